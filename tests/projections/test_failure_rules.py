"""The classification table: coverage, specifics in the messages, rule order."""

from __future__ import annotations

import re

import pytest

from projections.accounting import account
from projections.failures import (
    CLASSIFIER_VERSION,
    FAILURE_CLASSES,
    RULES,
    classify,
    classify_rejection,
    render,
)
from projections.job_state import project
from schemas.events import Event, JobRejected
from tests.projections.histories import JobHistory, job_spec


def exited(
    code: int,
    *logs: str,
    oom_killed: bool = False,
    gpus: int = 1,
    signal: int | None = None,
    runtime_exceeded: bool = False,
) -> list[Event]:
    h = JobHistory(spec=job_spec(resources={"gpus": gpus, "memory_gb": 16}), live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60)
    h.exit(code, logs, oom_killed=oom_killed, signal=signal, runtime_exceeded=runtime_exceeded)
    h.output("model.pt")
    h.release()
    return h.events


def started_and(step: str, *args: str) -> list[Event]:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.schedule()
    h.accept()
    h.hold()
    getattr(h, step)(*args)
    h.release("start_failed")
    return h.events


def test_every_class_has_a_rule_and_every_rule_a_known_class() -> None:
    assert {r.failure_class for r in RULES} == set(FAILURE_CLASSES)
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert RULES[-1].id == "fallback.unknown" and RULES[-1].phase == "*"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_templates_render_without_placeholders_when_nothing_is_known(rule: object) -> None:
    for template in (rule.summary, rule.advice):  # type: ignore[attr-defined]
        text = render(template, {})
        assert "[" not in text and "{" not in text and "None" not in text
    for pattern in (rule.log, rule.extract):  # type: ignore[attr-defined]
        re.compile(pattern)


CASES = [
    # (exit code, log lines, class, attribution, retryable, snippets in the summary)
    (
        1,
        ["RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total)"],
        "gpu_out_of_memory",
        "user",
        False,
        ["while allocating 20.00 MiB"],
    ),
    (1, ["RuntimeError: CUDA error: out of memory"], "gpu_out_of_memory", "user", False, []),
    (
        1,
        ["AssertionError: Torch not compiled with CUDA enabled"],
        "cuda_unavailable",
        "user",
        False,
        ["CPU-only build of PyTorch"],
    ),
    (
        1,
        ["RuntimeError: No CUDA GPUs are available"],
        "cuda_unavailable",
        "platform",
        True,
        ["saw no GPU although 1 GPU(s) were assigned", "node-a"],
    ),
    (
        2,
        ["python: can't open file '/app/train.py': [Errno 2] No such file or directory"],
        "missing_file",
        "user",
        False,
        ["'/app/train.py'", "code 2"],
    ),
    (  # in an image whose WORKDIR is /, python says '//XLA_bench.py' for 'XLA_bench.py'
        2,
        ["python: can't open file '//XLA_bench.py': [Errno 2] No such file or directory"],
        "missing_file",
        "user",
        False,
        ["'/XLA_bench.py'"],
    ),
    (
        1,
        ["FileNotFoundError: data/train.jsonl"],
        "missing_file",
        "user",
        False,
        ["data/train.jsonl"],
    ),
    (1, ["ImportError: No module named yaml"], "missing_module", "user", False, ["'yaml'"]),
    (
        1,
        ["ImportError: cannot import name 'LlamaForCausalLM' from 'transformers' (/x/__init__.py)"],
        "missing_module",
        "user",
        False,
        ["'LlamaForCausalLM'", "'transformers'"],
    ),
    (127, ["/bin/sh: 1: trian: not found"], "entrypoint_not_found", "user", False, ["code 127"]),
    (126, ["/bin/sh: ./run.sh: Permission denied"], "entrypoint_not_found", "user", False, []),
    (139, ["step 10"], "user_process_error", "user", False, ["SIGSEGV", "exit code 139"]),
    (
        1,
        ["ValueError: learning rate must be > 0"],
        "user_process_error",
        "user",
        False,
        [
            "exited with code 1",
            "ValueError: learning rate must be > 0",
        ],
    ),
    (143, [], "unknown", "platform", True, ["SIGTERM"]),
]


@pytest.mark.parametrize(("code", "logs", "cls", "who", "retryable", "snippets"), CASES)
def test_process_failures(
    code: int, logs: list[str], cls: str, who: str, retryable: bool, snippets: list[str]
) -> None:
    c = classify(exited(code, *logs), 1)
    assert (c.failure_class, c.attribution, c.retryable) == (cls, who, retryable), c.rule_id
    for snippet in snippets:
        assert snippet in c.summary
    assert c.classifier_version == CLASSIFIER_VERSION and c.evidence.rule_id == c.rule_id
    assert c.evidence.exit_code == code


def test_pip_package_names_differ_from_import_names() -> None:
    c = classify(exited(1, "ModuleNotFoundError: No module named 'cv2'"), 1)
    assert "pip install opencv-python" in c.advice


def test_a_gpu_requested_by_nobody_is_the_jobs_mistake() -> None:
    c = classify(exited(1, "RuntimeError: No CUDA GPUs are available", gpus=0), 1)
    assert (c.failure_class, c.attribution, c.retryable) == ("cuda_unavailable", "user", False)
    assert "resources.gpus = 0" in c.summary


def test_oom_kill_wins_over_log_lines_and_is_ram() -> None:
    c = classify(exited(137, "CUDA out of memory.", oom_killed=True), 1)
    assert c.failure_class == "host_out_of_memory"


def test_sigkill_reported_as_signal_is_not_host_oom() -> None:
    c = classify(exited(137, signal=9), 1)
    assert c.failure_class == "unknown" and c.rule_id == "run.killed"
    assert "SIGKILL" in c.summary and "not the host memory limit of 16 GiB" in c.summary


def test_runtime_limit() -> None:
    c = classify(exited(137, runtime_exceeded=True), 1)
    assert (c.failure_class, c.attribution) == ("runtime_exceeded", "user")
    assert "1 h" in c.summary and "limits.max_runtime_s = 3600" in c.summary


def test_evidence_keeps_the_matching_lines_not_the_noise() -> None:
    logs = [f"step {i}" for i in range(20)] + ["ModuleNotFoundError: No module named 'peft'"]
    c = classify(exited(1, *logs), 1)
    assert c.evidence.log_lines == ["ModuleNotFoundError: No module named 'peft'"]


def test_no_log_match_keeps_the_last_lines() -> None:
    logs = [f"step {i}" for i in range(20)]
    c = classify(exited(3, *logs), 1)
    assert c.evidence.log_lines == logs[-5:]


@pytest.mark.parametrize(
    ("kind", "message", "cls", "who"),
    [
        ("daemon_error", "Error response from daemon: ... context deadline exceeded",
         "container_start_failed", "platform"),
        ("invalid_config", "Minimum memory limit allowed is 6MB", "invalid_spec", "user"),
        ("daemon_error", 'could not select device driver "" with capabilities: [[gpu]]',
         "cuda_unavailable", "platform"),
        ("unknown", 'exec: "/app/run.sh": permission denied', "entrypoint_not_found", "user"),
    ],
)  # fmt: skip
def test_container_start_failures(kind: str, message: str, cls: str, who: str) -> None:
    c = classify(started_and("start_failed", kind, message), 1)
    assert (c.failure_class, c.attribution) == (cls, who)


def test_agent_shutdown_is_a_lost_node() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60).exit(143, ("received SIGTERM",), signal=15)  # the agent stopped the container
    h.release("agent_shutdown")
    c = classify(h.events, 1)
    assert (c.failure_class, c.attribution, c.retryable) == ("node_lost", "platform", True)


def test_finishing_timeout_is_the_platforms() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60).exit(0)
    h.wait(300).finishing_timed_out()
    c = classify(h.events, 1)
    assert (c.failure_class, c.attribution, c.retryable) == ("finishing_timeout", "platform", True)


def test_later_events_do_not_change_a_classification() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60).node_dies()
    h.wait(60).lost()
    before = classify(h.events, 1)
    h.cancel()  # a cancel after the loss must not turn it into "cancelled"
    h.release("cancelled")
    assert classify(h.events, 1) == before
    assert before.failure_class == "node_lost"


def test_rejection_for_invalid_spec() -> None:
    h = JobHistory(live=False)
    h.submit()
    event = h.emit(
        JobRejected, "api", failure_class="invalid_spec", summary="env: bad name", advice="Fix it."
    )
    c = classify_rejection(event)
    assert (c.failure_class, c.attribution, c.summary, c.advice) == (
        "invalid_spec",
        "user",
        "env: bad name",
        "Fix it.",
    )


def test_a_cancel_after_the_process_failed_on_its_own_keeps_the_real_cause() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60).exit(1, ("ModuleNotFoundError: No module named 'peft'",))
    h.cancel()  # the user gives up while the agent is still storing outputs
    h.release()
    assert classify(h.events, 1).failure_class == "missing_module"


def test_a_process_that_exits_0_when_stopped_at_its_runtime_limit_hit_the_limit() -> None:
    # It trapped SIGTERM and exited 0: the job still did not finish within max_runtime_s.
    c = classify(exited(0, runtime_exceeded=True), 1)
    assert (c.failure_class, c.attribution, c.retryable) == ("runtime_exceeded", "user", False)
    # The agent's release says so even when the exit does not carry the flag.
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60)
    h.exit(0, ())
    h.release("runtime_exceeded")
    assert classify(h.events, 1).failure_class == "runtime_exceeded"


def test_a_job_stopped_at_its_runtime_limit_fails_even_with_exit_0() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.start()
    h.wait(60)
    h.exit(0, (), runtime_exceeded=True)
    h.output("model.pt")
    h.release("runtime_exceeded")
    view = project(h.events)
    assert view.status == "failed" and view.failure is not None
    assert view.failure.failure_class == "runtime_exceeded"
    assert account(h.events, h.ticks).billable_gpu_seconds > 0  # the user's, billed
