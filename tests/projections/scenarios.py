"""The scenarios every projection is tested on, built with :mod:`histories`.

Each function returns the finished ``JobHistory`` (events with the live
decisions appended, meter ticks). The golden fixtures under ``tests/golden/``
are generated from these by ``python -m tests.golden.regenerate``.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas.events import RetryScheduled
from schemas.spec import JobSpec
from tests.projections.histories import JobHistory, fleet, job_spec

TRACEBACK = ("Traceback (most recent call last):", '  File "/app/train.py", line 42, in <module>')


def _ran(h: JobHistory, seconds: float = 600) -> JobHistory:
    h.submit()
    h.wait(1).queue()
    h.wait(4).start()
    h.wait(seconds)
    return h


def _succeed(h: JobHistory) -> JobHistory:
    h.exit(0, ("saved model.pt",))
    h.wait(2).output("model.pt")
    h.wait(1).release()
    return h


def success() -> JobHistory:
    h = _ran(JobHistory())
    h.checkpoint("step-500", 500)
    return _succeed(h)


def _fails(logs: tuple[str, ...], code: int = 1, **exit: object) -> JobHistory:
    h = _ran(JobHistory(), 120)
    h.exit(code, logs, **exit)  # type: ignore[arg-type]
    h.wait(1).output_failed("model.pt", "missing")
    h.wait(1).release()
    return h


def cuda_oom() -> JobHistory:
    return _fails(
        (
            *TRACEBACK,
            "    loss = model(**batch).loss",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
            "has a total capacity of 22.19 GiB of which 1.03 GiB is free.",
        )
    )


def missing_module() -> JobHistory:
    return _fails(
        (
            *TRACEBACK,
            "    from transformers import AutoModelForCausalLM",
            "ModuleNotFoundError: No module named 'transformers'",
        )
    )


def missing_libcudart() -> JobHistory:
    return _fails(
        (
            *TRACEBACK,
            "    import torch",
            "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
            "directory",
        )
    )


def _start_fails(spec: JobSpec, error_kind: str, message: str) -> JobHistory:
    """Placed, held and the image resolved, then the agent cannot start the container."""
    h = JobHistory(spec=spec)
    h.submit()
    h.wait(1).queue()
    h.wait(4).schedule()
    h.wait(2).accept()
    h.hold()
    h.wait(3).image_ok()
    h.wait(1).start_failed(error_kind, message)
    h.wait(1).release("start_failed")
    return h


def entrypoint_not_found() -> JobHistory:
    return _start_fails(
        job_spec(command=["trian.py"]),
        "entrypoint_not_found",
        "OCI runtime create failed: runc create failed: unable to start container process: "
        'exec: "trian.py": executable file not found in $PATH: unknown',
    )


def secret_missing() -> JobHistory:
    """The spec names a secret its tenant never set: the agent says so before the container."""
    return _start_fails(
        job_spec(secrets={"HF_TOKEN": "hf-token"}), "secret_missing", "hf-token (for HF_TOKEN)"
    )


def missing_data_file() -> JobHistory:
    return _fails(
        (
            "loading dataset",
            *TRACEBACK,
            "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.jsonl'",
        )
    )


def host_oom() -> JobHistory:
    return _fails(("epoch 1 step 200 loss 2.31",), 137, oom_killed=True)


def sigkill_not_oom() -> JobHistory:
    """Exit 137 without an OOM kill: a SIGKILL from an unknown sender, retried once."""
    h = _ran(JobHistory(), 300)
    h.exit(137, ("epoch 3 step 1200 loss 1.02",))
    h.wait(1).output_failed("model.pt", "missing")
    h.wait(1).release()
    h.wait(5).queue()
    h.wait(2).start(node="node-b")
    h.wait(300)
    return _succeed(h)


def image_not_found() -> JobHistory:
    h = JobHistory(spec=job_spec(image="gridledger/trainr:1.0"))
    h.submit()
    h.wait(1).queue()
    h.wait(4).schedule()
    h.wait(2).accept()
    h.hold()
    h.wait(3).image_unavailable(
        "not_found", "manifest for gridledger/trainr:1.0 not found: manifest unknown"
    )
    h.wait(1).release("image_unavailable")
    return h


def registry_unreachable() -> JobHistory:
    """The registry is down for every attempt: three tries, then the budget is spent."""
    h = JobHistory()
    h.submit()
    h.wait(1).queue()
    for node in ("node-a", "node-b", "node-c"):
        if h.attempt:
            h.wait(h.events[-1].delay_s if isinstance(h.events[-1], RetryScheduled) else 5)
            h.queue()
        h.wait(4).schedule(node=node)
        h.wait(2).accept()
        h.hold()
        h.wait(30).image_unavailable(
            "registry_unreachable",
            "Get https://registry.local/v2/: dial tcp 10.0.0.5:443: i/o timeout",
        )
        h.wait(1).release("image_unavailable")
    return h


def does_not_fit() -> JobHistory:
    h = JobHistory(spec=job_spec(model={"params_billion": 16, "dtype": "fp16"}, checkpoints=None))
    h.submit()
    h.reject_for_fit(fleet(("node-a", "A10G", 4, 24), ("node-b", "A10G", 1, 24)))
    return h


def capacity_unavailable() -> JobHistory:
    h = JobHistory()
    h.submit()
    h.wait(1).queue(timeout_s=600)
    h.wait(600).no_capacity()
    return h


def node_lost_then_resume() -> JobHistory:
    """Node lost mid-run; the retry resumes from the latest checkpoint on another node."""
    h = _ran(JobHistory(), 300)
    h.checkpoint("step-500", 500)
    h.wait(300).checkpoint("step-1000", 1000)
    h.wait(20).node_dies()
    h.wait(45).unresponsive()
    h.wait(60).lost()
    retry = h.events[-1]
    assert isinstance(retry, RetryScheduled), retry
    h.wait(retry.delay_s).queue()
    h.wait(2).start(node="node-b", provider="gcp", resume_from=retry.resume_from)
    h.wait(400)
    return _succeed(h)


def retry_no_capacity() -> JobHistory:
    """Node lost mid-run; its retry finds no node before its queue deadline."""
    h = _ran(JobHistory(), 300)
    h.checkpoint("step-500", 500)
    h.wait(20).node_dies()
    h.wait(45).unresponsive()
    h.wait(60).lost()
    retry = h.events[-1]
    assert isinstance(retry, RetryScheduled), retry
    h.wait(retry.delay_s).queue()
    h.wait(600).no_capacity()
    return h


def _unheard_then_lost(h: JobHistory) -> RetryScheduled:
    """A broker outage: the node runs on, unheard; the watchdog declares it lost."""
    h.heartbeats_pause()
    h.wait(45).unresponsive()
    h.wait(60).lost()
    retry = h.events[-1]
    assert isinstance(retry, RetryScheduled), retry
    return retry


def late_success_withdraws_the_retry() -> JobHistory:
    """Declared lost during a broker outage, the attempt's spool then delivers its true end
    (exit 0, outputs stored, released) before the retry is placed: the retry is withdrawn
    and the job succeeds, billed up to the real release."""
    h = _ran(JobHistory(), 120)
    _unheard_then_lost(h)
    h.wait(3).unheard_node_returns()
    _succeed(h)
    return h


def late_success_supersedes_the_running_retry() -> JobHistory:
    """Declared lost during a broker outage; the retry already runs on another node when the
    lost attempt's clean end arrives. The earliest clean success wins: the job succeeds on
    attempt 1, attempt 2 is superseded (its node stops it) and credited."""
    h = _ran(JobHistory(), 120)
    retry = _unheard_then_lost(h)
    h.wait(retry.delay_s).queue()
    h.wait(2).start(node="node-b", provider="gcp", resume_from=retry.resume_from)
    h.wait(20).late(1, "node-a")
    _succeed(h)
    h.current().wait(2).attempt_cancelled()
    h.exit(143, ("received SIGTERM, stopping",), signal=15)
    h.wait(1).release("cancelled")
    return h


def late_failure_decides_on_the_real_facts() -> JobHistory:
    """Declared lost during a broker outage; its late end is the job's own failure (exit 1)
    before the retry is placed: the retry is withdrawn, the attempt classified on its real
    facts, and the job fails user_process_error, billed up to the real release."""
    h = _ran(JobHistory(), 120)
    _unheard_then_lost(h)
    h.wait(1).unheard_node_returns()
    h.exit(1, ("RuntimeError: boom",))
    h.wait(1).release()
    return h


def late_failure_keeps_the_running_retry() -> JobHistory:
    """Declared lost; its late end is a failure (exit 1) after the retry started: the
    decision on the loss stands, the late exit is recorded, the retry succeeds; the lost
    attempt is credited up to its last heartbeat, the retry billed."""
    h = _ran(JobHistory(), 120)
    retry = _unheard_then_lost(h)
    h.wait(retry.delay_s).queue()
    h.wait(2).start(node="node-b", provider="gcp", resume_from=retry.resume_from)
    h.wait(30).late(1, "node-a")
    h.exit(1, ("RuntimeError: boom",))
    h.wait(1).release()
    h.current().wait(100)
    return _succeed(h)


def upload_failed() -> JobHistory:
    h = _ran(JobHistory())
    h.exit(0, ("saved model.pt",))
    h.wait(30).output_failed(
        "model.pt", "store_failed", "PUT s3://artifacts/job-1/model.pt: 503 Slow Down (3 tries)"
    )
    h.wait(1).release()
    return h


def output_refused() -> JobHistory:
    """A required output that is a link to a host file: refused by the agent, the user's."""
    h = _ran(JobHistory())
    h.exit(0, ("linked",))
    h.wait(1).output_failed(
        "model.pt",
        "refused_link",
        "'model.pt' is a symbolic link; links are never followed",
    )
    h.wait(1).release()
    return h


def optional_folder_refused() -> JobHistory:
    """model.pt stored, and `{"path": ".", "required": false}` declared: the declared folder
    is refused, and the job is still billed (no free compute by declaring a folder)."""
    h = _ran(JobHistory())
    h.exit(0, ("saved model.pt",))
    h.wait(1).output("model.pt")
    h.output_failed(
        ".",
        "refused_folder",
        "'.' is a folder; folders are not stored: declare each file in it as an output",
        required=False,
    )
    h.wait(1).release()
    return h


def optional_output_missing() -> JobHistory:
    """An optional output the job did not write: a clean success."""
    h = _ran(JobHistory())
    h.exit(0, ("saved model.pt",))
    h.wait(1).output("model.pt")
    h.output_failed("extra.log", "missing", required=False)
    h.wait(1).release()
    return h


def output_missing() -> JobHistory:
    h = _ran(JobHistory())
    h.exit(0, ("done",))
    h.wait(1).output_failed("model.pt", "missing")
    h.wait(1).release()
    return h


def cancel_while_queued() -> JobHistory:
    h = JobHistory()
    h.submit()
    h.wait(1).queue()
    h.wait(30).cancel()
    return h


def cancel_while_running() -> JobHistory:
    h = _ran(JobHistory(), 120)
    h.cancel()
    h.wait(2).attempt_cancelled()
    h.exit(143, ("received SIGTERM, stopping",), signal=15)
    h.wait(1).release("cancelled")
    return h


def lost_contact_recovers() -> JobHistory:
    """Heartbeats stop for a while and come back before the lost deadline."""
    h = _ran(JobHistory(), 60)
    h.heartbeats_pause()
    h.wait(45).unresponsive()
    h.wait(20).heartbeats_resume()
    h.responsive()
    h.wait(300)
    return _succeed(h)


def dispatch_timeout_then_success() -> JobHistory:
    h = JobHistory()
    h.submit()
    h.wait(1).queue()
    h.wait(4).schedule(node="node-a")
    h.wait(60).dispatch_timed_out()
    h.wait(5).queue()
    h.wait(2).start(node="node-b")
    h.wait(300)
    return _succeed(h)


SCENARIOS: dict[str, Callable[[], JobHistory]] = {
    fn.__name__: fn
    for fn in (
        success,
        cuda_oom,
        missing_module,
        missing_libcudart,
        entrypoint_not_found,
        secret_missing,
        missing_data_file,
        host_oom,
        sigkill_not_oom,
        image_not_found,
        registry_unreachable,
        does_not_fit,
        capacity_unavailable,
        node_lost_then_resume,
        retry_no_capacity,
        late_success_withdraws_the_retry,
        late_success_supersedes_the_running_retry,
        late_failure_decides_on_the_real_facts,
        late_failure_keeps_the_running_retry,
        upload_failed,
        output_missing,
        cancel_while_queued,
        cancel_while_running,
        lost_contact_recovers,
        dispatch_timeout_then_success,
    )
}
