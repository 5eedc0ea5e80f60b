"""One test per billing rule that changes money when broken (`python -m bench.mutation
rules` checks that breaking each of them makes a test here fail)."""

from __future__ import annotations

from datetime import timedelta

from projections.accounting import account
from projections.job_state import project
from schemas.events import AttemptScheduled, FailureClassified, JobSucceeded, RetryScheduled
from tests.projections import scenarios
from tests.projections.histories import JobHistory


def test_a_re_emitted_tick_with_a_new_id_is_the_same_tick() -> None:
    """Ticks count once per (attempt, tick index), not once per event id: an agent that
    re-emits a tick after a restart gives it a new id."""
    h = scenarios.success()
    before = account(h.events, h.ticks)
    again = [t.model_copy(update={"event_id": f"{t.event_id}-again"}) for t in h.ticks]
    after = account(h.events, [*h.ticks, *again])
    (a,) = after.attempts
    assert a.metered_gpu_seconds == before.attempts[0].metered_gpu_seconds == a.gpu_seconds
    assert a.tick_count == len(h.ticks) and after.reconciled
    assert after == before


def test_reconciled_says_when_the_meter_saw_more_than_the_lifecycle() -> None:
    """``reconciled`` follows the facts: ticks for time the lifecycle does not hold are
    extra tick indices, so the meter exceeds the lifecycle and the record says so."""
    h = scenarios.success()
    last, full = max(h.ticks, key=lambda t: t.tick_index), h.ticks[0]
    extra = [
        full.model_copy(
            update={
                "event_id": f"extra-{i}",
                "tick_index": last.tick_index + i,
                "occurred_at": last.occurred_at + timedelta(seconds=30 * i),
            }
        )
        for i in (1, 2, 3)
    ]
    record = account(h.events, [*h.ticks, *extra])
    assert record.attempts[0].metered_gpu_seconds > record.attempts[0].gpu_seconds
    assert not record.reconciled


def _shutdown(exit_code: int, signal: int | None) -> JobHistory:
    h = JobHistory()
    h.submit()
    h.wait(1).queue()
    h.wait(2).start()
    h.wait(120)
    h.exit(exit_code, ("caught SIGTERM, saving and exiting",), signal=signal)
    h.output()  # it even saved its output: still not a success, the agent stopped it
    h.wait(1).release("agent_shutdown")
    return h


def test_an_agent_shutdown_is_never_a_billed_success_even_if_the_process_exits_0() -> None:
    for code, signal in ((0, None), (143, 15)):
        h = _shutdown(code, signal)
        assert not any(isinstance(e, JobSucceeded) for e in h.events), code
        classified = next(e for e in h.events if isinstance(e, FailureClassified))
        assert (classified.failure_class, classified.rule_id) == (
            "node_lost",
            "node.agent_shutdown",
        )
        assert any(isinstance(e, RetryScheduled) for e in h.events)
        (a,) = account(h.events, h.ticks).attempts
        assert a.billable_gpu_seconds == 0.0 and a.credited_gpu_seconds == a.gpu_seconds > 0


def test_held_time_never_goes_negative_when_the_agent_clock_steps_back() -> None:
    h = JobHistory()
    h.submit()
    h.wait(1).queue()
    h.wait(2).start()
    h.wait(10).exit(0, ("saved",))
    h.output()
    h.now -= timedelta(seconds=300)  # the agent's clock is stepped back by NTP
    h.release()
    record = account(h.events, h.ticks)
    (a,) = record.attempts
    assert a.held_seconds == 0.0 and a.gpu_seconds == 0.0
    assert a.billable_gpu_seconds == 0.0 and a.credited_gpu_seconds == 0.0
    assert record.billable_gpu_seconds >= 0.0 and a.released_at == a.held_from


def test_a_late_release_after_a_lost_attempt_does_not_grow_its_credit() -> None:
    """The loss stands when the late end is not a clean success: the lost attempt is
    credited up to its last heartbeat, however late its node's release arrives."""
    h = scenarios.node_lost_then_resume()
    before = account(h.events, h.ticks).attempts[0]
    late = h.late(1, "node-a")
    late.wait(600).exit(1, ("RuntimeError: boom",))
    late.release()
    h.current()
    after = account(h.events, h.ticks).attempts[0]
    assert after.credited_gpu_seconds == before.credited_gpu_seconds
    assert after.released_at == before.released_at and after.release_source == "lost"


def test_an_attempt_placed_after_a_cancel_while_queued_is_not_billed() -> None:
    """The scheduler placed the attempt just as the user cancelled the queued job: the job
    ended cancelled, the attempt that ran anyway is the platform's, and nobody classifies it."""
    for stopped in (True, False):
        h = JobHistory()
        h.submit()
        h.wait(1).queue()
        h.wait(5).cancel()
        assert project(h.events).status == "cancelled"
        h.wait(1).start()
        h.wait(60)
        if stopped:  # the routed cancel reached the node
            h.attempt_cancelled()
            h.exit(143, (), signal=15)
            h.wait(1).release("cancelled")
        else:  # it ran to a clean end before the cancel arrived
            h.exit(0, ("saved",))
            h.output()
            h.wait(1).release()
        assert not any(isinstance(e, FailureClassified | JobSucceeded) for e in h.events)
        record = account(h.events, h.ticks)
        (a,) = record.attempts
        assert a.outcome == "after_end" and a.billable_gpu_seconds == 0.0
        assert a.credited_gpu_seconds == a.gpu_seconds > 0
        assert record.status == "cancelled" and record.billable_gpu_seconds == 0.0
        assert record.final
        scheduled = next(e for e in h.events if isinstance(e, AttemptScheduled))
        assert any(
            "scheduled while the job was cancelled" in x for x in project(h.events).anomalies
        )
        assert scheduled.attempt == 1
