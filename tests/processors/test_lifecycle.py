"""Jobs driven end to end on the real broker: scheduler + processors in process,
a scripted node for the agent facts (issue 5)."""

from __future__ import annotations

import logging

import pytest

from schemas.events import (
    AttemptCancelled,
    AttemptLost,
    AttemptScheduled,
    AttemptUnresponsive,
    CancelRequested,
    DispatchTimedOut,
    FailureClassified,
    JobCancelled,
    JobFailed,
    JobQueued,
    JobRejected,
    JobSucceeded,
    NoCapacity,
    RetryScheduled,
)
from services.ledger import Ledger
from services.ops.logs import context_of
from services.processors import build_processors
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import (
    fast,
    services,
    submitted,
    terminals,
    utcnow,
    wait_latest,
    wait_terminal,
)

pytestmark = pytest.mark.integration


async def test_success_is_one_terminal_event_a_final_view_and_a_billed_record(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a", gpus=2).start()
        try:
            job = submitted(outputs=[{"path": "model.pt"}])
            await ledger.append(job)
            scheduled = await node.next_command(AttemptScheduled)
            assert (scheduled.job_id, scheduled.attempt, scheduled.gpu_count) == (job.job_id, 1, 1)
            run = await node.accept(scheduled)
            await run.checkpoint("step-1", step=1)
            await run.finish(exit_code=0, outputs=["model.pt"])
            history = await wait_terminal(ledger, job.job_id)
            view = await wait_latest(ledger, "job-state", job.job_id, lambda v: v.terminal_event)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await node.stop()
    assert [type(e) for e in terminals(history)] == [JobSucceeded]
    assert [e.attempt for e in history if isinstance(e, JobQueued)] == [0]
    assert view.status == "succeeded" and view.attempts[0].node_id == "node-a"
    assert record.status == "succeeded" and record.billable_gpu_seconds > 0
    assert record.billable_gpu_seconds == pytest.approx(record.gpu_seconds)
    assert record.credited_gpu_seconds == 0 and record.reconciled


async def test_a_user_failure_is_classified_and_not_retried(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a").start()
        try:
            job = submitted()
            await ledger.append(job)
            run = await node.accept(await node.next_command(AttemptScheduled))
            await run.finish(
                exit_code=1,
                last_log_lines=["ModuleNotFoundError: No module named 'torch'"],
            )
            history = await wait_terminal(ledger, job.job_id)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await node.stop()
    (failed,) = terminals(history)
    assert isinstance(failed, JobFailed) and failed.failure_class == "missing_module"
    assert failed.attribution == "user"
    assert not [e for e in history if isinstance(e, RetryScheduled)]
    assert {e.attempt for e in history if isinstance(e, AttemptScheduled)} == {1}
    assert record.billable_gpu_seconds > 0 and record.credited_gpu_seconds == 0


def _lines(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, object]]:
    """The context (job, attempt, event, node) of every captured line saying ``message``."""
    return [context_of(r) for r in caplog.records if r.getMessage() == message]


async def test_node_lost_retries_on_another_node_from_the_last_checkpoint(topics, caplog):
    caplog.set_level(logging.INFO)
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        lost = await ScriptedNode(ledger, "node-a", provider="p1").start()
        spare = await ScriptedNode(ledger, "node-b", provider="p2").start()
        try:
            job = submitted(
                checkpoints="ckpt",
                placement={"providers": ["p1"]},
                retry={"backoff_s": 0.2, "backoff_cap_s": 1.0},
            )
            await ledger.append(job)
            first = await lost.accept(await lost.next_command(AttemptScheduled))
            assert first.scheduled.node_id == "node-a"
            await first.checkpoint("step-1", step=1)
            ckpt = await first.checkpoint("step-2", step=2)
            await lost.stop()  # the node goes silent: no node or attempt heartbeats
            second = await spare.next_command(AttemptScheduled, timeout=30)
            assert second.attempt == 2 and second.node_id == "node-b"
            assert second.resume_from is not None and second.resume_from.name == ckpt.name
            run = await spare.accept(second)
            await run.finish(exit_code=0)
            history = await wait_terminal(ledger, job.job_id)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await spare.stop()
    unresponsive = [e for e in history if isinstance(e, AttemptUnresponsive)]
    lost_events = [e for e in history if isinstance(e, AttemptLost)]
    assert len({e.event_id for e in unresponsive}) == 1 and unresponsive[0].silence_s == 2.0
    assert len({e.event_id for e in lost_events}) == 1
    assert lost_events[0].deadline == unresponsive[0].lost_deadline
    # The watchdog says so in its log, naming the job, attempt, verdict and node.
    for verdict in (unresponsive[0], lost_events[0]):
        expected = {"job_id": job.job_id, "attempt": 1, "event_id": verdict.event_id}
        assert _lines(caplog, f"watchdog: {verdict.type}") == [{**expected, "node_id": "node-a"}]
    classified = [e for e in history if isinstance(e, FailureClassified)]
    assert classified[0].failure_class == "node_lost" and classified[0].attribution == "platform"
    retry = next(e for e in history if isinstance(e, RetryScheduled))
    assert "node-a" in retry.avoid_nodes
    assert [type(e) for e in terminals(history)] == [JobSucceeded]
    by_attempt = {a.attempt: a for a in record.attempts}
    assert by_attempt[1].billable_gpu_seconds == 0 and by_attempt[1].credited_gpu_seconds > 0
    assert by_attempt[2].billable_gpu_seconds > 0


async def test_a_job_that_cannot_fit_is_rejected_with_nothing_held(topics, caplog):
    caplog.set_level(logging.INFO)
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(
            ledger, "node-a", gpus=1, gpu_model="L4-24GB", memory_gb=24
        ).start()
        try:
            job = submitted(model={"params_billion": 70, "dtype": "fp16"})
            await ledger.append(job)
            history = await wait_terminal(ledger, job.job_id)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await node.stop()
    (rejected,) = terminals(history)
    assert isinstance(rejected, JobRejected) and rejected.failure_class == "does_not_fit"
    assert rejected.fit is not None and rejected.fit.required_vram_gb == 168.0
    assert "24" in rejected.summary
    told = [r for r in caplog.records if r.getMessage().startswith("rejected (does_not_fit)")]
    assert [context_of(r) for r in told] == [
        {"job_id": job.job_id, "attempt": 0, "event_id": rejected.event_id}
    ]
    assert rejected.summary in told[0].getMessage()
    assert not [e for e in history if isinstance(e, AttemptScheduled | JobQueued)]
    assert (
        record.held_seconds == 0
        and record.billable_gpu_seconds == 0
        and record.status == "rejected"
    )


async def test_a_job_past_its_queue_deadline_ends_capacity_unavailable_unbilled(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = ScriptedNode(ledger, "node-a", gpus=1)
        node.free = []  # the node's only GPU is busy with work the scheduler does not know
        await node.start()
        try:
            job = submitted(limits={"queue_timeout_s": 2})
            await ledger.append(job)
            history = await wait_terminal(ledger, job.job_id, timeout=20)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await node.stop()
    assert [type(e) for e in history if isinstance(e, NoCapacity)] == [NoCapacity]
    (failed,) = terminals(history)
    assert isinstance(failed, JobFailed) and failed.failure_class == "capacity_unavailable"
    assert failed.attribution == "capacity"
    assert not [e for e in history if isinstance(e, AttemptScheduled)]
    assert record.billable_gpu_seconds == 0 and record.held_seconds == 0


async def test_a_cancel_is_routed_to_the_node_running_the_attempt(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a").start()
        try:
            job = submitted()
            await ledger.append(job)
            run = await node.accept(await node.next_command(AttemptScheduled))
            await ledger.append(
                CancelRequested(job_id=job.job_id, occurred_at=utcnow(), requested_by="alice")
            )
            command = await node.next_command(CancelRequested)
            assert (command.job_id, command.attempt, command.node_id) == (job.job_id, 1, "node-a")
            await run.stop_heartbeats()
            await node.emit(
                AttemptCancelled(
                    job_id=job.job_id, attempt=1, occurred_at=utcnow(), node_id="node-a"
                )
            )
            await run.release("cancelled")
            history = await wait_terminal(ledger, job.job_id)
        finally:
            await node.stop()
    assert [type(e) for e in terminals(history)] == [JobCancelled]


async def test_processors_split_over_two_workers_give_the_same_result(topics):
    settings = fast(topics)
    views = build_processors(settings, only=["state", "accounting"])
    deciders = build_processors(settings, only=["dispatch", "watchdog", "classifier"])
    assert views.app_id != deciders.app_id
    async with services(settings, processors=False), Ledger(settings, "test") as ledger:
        await views.start()
        await deciders.start()
        node = await ScriptedNode(ledger, "node-a").start()
        try:
            job = submitted()
            await ledger.append(job)
            run = await node.accept(await node.next_command(AttemptScheduled))
            await run.finish(exit_code=0)
            history = await wait_terminal(ledger, job.job_id)
            view = await wait_latest(ledger, "job-state", job.job_id, lambda v: v.terminal_event)
            record = await wait_latest(ledger, "accounting", job.job_id, lambda r: r.final)
        finally:
            await node.stop()
            await deciders.stop()
            await views.stop()
    assert [type(e) for e in terminals(history)] == [JobSucceeded]
    assert view.status == "succeeded" and record.status == "succeeded"


async def test_a_node_that_never_accepts_times_out_and_the_job_moves_on(topics):
    settings = fast(topics).model_copy(update={"scheduler_dispatch_timeout_s": 2.0})
    async with services(settings), Ledger(settings, "test") as ledger:
        mute = await ScriptedNode(ledger, "node-mute", provider="p1").start()
        good = await ScriptedNode(ledger, "node-good", provider="p2").start()
        try:
            job = submitted(
                placement={"providers": ["p1"]}, retry={"backoff_s": 0.2, "backoff_cap_s": 1.0}
            )
            await ledger.append(job)
            first = await mute.next_command(AttemptScheduled)  # and never answers
            second = await good.next_command(AttemptScheduled, timeout=30)
            assert (first.attempt, second.attempt) == (1, 2)
            run = await good.accept(second)
            await run.finish(exit_code=0)
            history = await wait_terminal(ledger, job.job_id)
        finally:
            await mute.stop()
            await good.stop()
    timed_out = [e for e in history if isinstance(e, DispatchTimedOut)]
    assert len({e.event_id for e in timed_out}) == 1 and timed_out[0].node_id == "node-mute"
    assert timed_out[0].deadline == first.dispatch_deadline
    assert [type(e) for e in terminals(history)] == [JobSucceeded]
