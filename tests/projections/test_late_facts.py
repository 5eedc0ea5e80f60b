"""Late facts after a verdict: every branch of the rule, over generated histories.

A broker outage makes the watchdog declare a running attempt lost; the node ran
on, unheard, and its spool delivers the true end later: before the retry is
placed, while it runs, or after it ended. The rule (docs/lifecycle.md): the
earliest clean success wins; a retry not yet placed is withdrawn, one placed is
superseded; a late failure decides the job while its retry is not placed and
changes nothing once it is; the job ends once, and nothing is billed twice.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.decisions import verify
from projections.job_state import project
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptLost,
    AttemptSuperseded,
    ComputeReleased,
    JobFailed,
    JobSucceeded,
    RetryScheduled,
    RetryWithdrawn,
)
from schemas.views import TERMINAL_STATUSES
from tests.projections.histories import JobHistory, job_spec
from tests.projections.test_invariants import PROPERTY

WHEN = ("before_retry", "retry_running", "after_retry_ended")
LATE = ("success", "exit_1", "missing_output")


def _end(h: JobHistory, how: str) -> None:
    if how == "success":
        h.exit(0, ("saved model.pt",))
        h.output()
    elif how == "missing_output":
        h.exit(0, ("done",))
        h.output_failed("model.pt", "missing")
    else:
        h.exit(1, ("RuntimeError: boom",))
    h.wait(1).release()


def _drive_to_the_end(h: JobHistory) -> None:
    """Run the retries the decider orders until the job ends (each one succeeds)."""
    for node in ("node-c", "node-d", "node-e"):
        if project(h.events).status != "retrying":
            return
        h.wait(10).queue()
        h.wait(2).start(node=node, provider="azure")
        h.wait(30)
        _end(h, "success")


@st.composite
def outages(draw: Any) -> tuple[JobHistory, str, str, bool]:
    """(history, when the late end arrived, what it was, whether the job had ended by then)."""
    h = JobHistory(job_id="job-l", spec=job_spec(retry={"max_attempts": draw(st.integers(2, 4))}))
    h.submit()
    h.wait(1).queue()
    h.wait(2).start(node="node-a")
    h.wait(draw(st.integers(1, 300)))
    h.heartbeats_pause()
    h.wait(45).unresponsive()
    h.wait(60).lost()
    retry = h.events[-1]
    assert isinstance(retry, RetryScheduled)
    when, late = draw(st.sampled_from(WHEN)), draw(st.sampled_from(LATE))
    if when != "before_retry":
        h.wait(retry.delay_s).queue()
        retry_end = "running"
        if when == "after_retry_ended":
            retry_end = draw(st.sampled_from(["success", "exit_1", "dispatch_timeout"]))
        if retry_end == "dispatch_timeout":  # a platform failure: retried again if budget is left
            h.wait(2).schedule(node="node-b", provider="gcp")
            h.wait(60).dispatch_timed_out()
        else:
            h.wait(2).start(node="node-b", provider="gcp")
            h.wait(draw(st.integers(1, 100)))
            if retry_end != "running":
                _end(h, retry_end)
    h.wait(draw(st.integers(0, 4))).late(1, "node-a")
    ended = any(isinstance(e, TERMINAL_EVENTS) for e in h.events)
    _end(h, late)
    h.current()
    if when == "retry_running":
        if project(h.events).attempts[-1].status == "superseded":
            h.wait(2).attempt_cancelled()  # the node obeys the routed cancel
            h.exit(143, (), signal=15)
            h.release("cancelled")
        else:
            _end(h, "success")
    _drive_to_the_end(h)
    return h, when, late, ended


@PROPERTY
@given(outages())
def test_late_facts_reconcile_by_the_rule(case: tuple[JobHistory, str, str, bool]) -> None:
    h, when, late, ended_before = case
    terminals = [e for e in h.events if isinstance(e, TERMINAL_EVENTS)]
    assert len(terminals) == 1  # exactly one terminal event, whatever arrived late
    assert verify(h.events) == []  # replayed decisions equal the live ones
    view = project(h.events)
    assert view.status in TERMINAL_STATUSES
    withdrawn = [e for e in h.events if isinstance(e, RetryWithdrawn)]
    superseded = [e for e in h.events if isinstance(e, AttemptSuperseded)]
    if late == "success" and not ended_before:
        # The earliest clean success wins: the lost attempt's.
        assert isinstance(terminals[0], JobSucceeded) and terminals[0].attempt == 1
        running = when == "retry_running"
        assert len(withdrawn) == (0 if running else 1)
        assert [s.attempt for s in superseded] == ([2] if running else [])
    elif when == "before_retry":
        # A late failure while its retry is not placed: decided on the real facts.
        real = {"exit_1": "user_process_error", "missing_output": "output_missing"}[late]
        assert isinstance(terminals[0], JobFailed) and terminals[0].attempt == 1
        assert terminals[0].failure_class == real and len(withdrawn) == 1
        assert view.failure is not None and view.failure.failure_class == real
    else:
        # A late failure once the retry runs, or anything after the job ended: no change.
        assert withdrawn == [] and all(s.attempt == 1 for s in superseded)
        assert terminals[0].attempt != 1 or not isinstance(terminals[0], JobSucceeded)


@PROPERTY
@given(outages())
def test_late_facts_are_billed_once_and_credited_only_to_the_last_heartbeat(
    case: tuple[JobHistory, str, str, bool],
) -> None:
    h, when, late, ended_before = case
    record = account(h.events, h.ticks)
    assert record.final
    succeeded = [a for a in record.attempts if a.outcome == "succeeded"]
    assert len(succeeded) <= 1  # one result is kept, and billed
    for a in record.attempts:
        assert a.billable_gpu_seconds + a.credited_gpu_seconds == a.gpu_seconds
    lost = next(e for e in h.events if isinstance(e, AttemptLost))
    first = record.attempts[0]
    won = late == "success" and not ended_before
    decided_on_it = not ended_before and (won or when == "before_retry")
    real_release = next(e for e in h.events if isinstance(e, ComputeReleased) and e.attempt == 1)
    if decided_on_it:  # the real facts apply to the attempt the job was decided on
        assert first.outcome == ("succeeded" if won else "failed")
        assert first.released_at == real_release.occurred_at
        assert first.billable_gpu_seconds == first.gpu_seconds > 0
        assert record.billable_gpu_seconds == first.gpu_seconds
    else:  # the loss stands: credited up to the last heartbeat, never past it
        assert first.outcome == "lost" and first.billable_gpu_seconds == 0.0
        assert first.released_at == lost.last_heartbeat_at


@PROPERTY
@given(outages())
def test_the_meter_is_reconciled_over_the_window_the_lifecycle_counted(
    case: tuple[JobHistory, str, str, bool],
) -> None:
    """Whatever arrived late, every attempt's meter agrees with its lifecycle over the window
    the lifecycle counted; the ticks after that window (a lost attempt's node ran on,
    unheard) are reported apart, neither dropped nor billed."""
    h, _, _, _ = case
    record = account(h.events, h.ticks)
    assert record.reconciled
    for a in record.attempts:
        ticks = {t.tick_index: t for t in h.ticks if t.attempt == a.attempt}
        if a.held_from is None:  # placed, never held (a dispatch timeout): nothing metered
            assert ticks == {} and a.metered_gpu_seconds == a.uncounted_gpu_seconds == 0.0
            continue
        end = a.released_at
        assert end is not None  # final: released or declared lost
        after = sorted(i for i, t in ticks.items() if t.interval_start > end)
        assert a.uncounted_ticks == after
        assert a.metered_gpu_seconds + a.uncounted_gpu_seconds == sum(
            t.gpu_seconds for t in ticks.values()
        )
        assert a.billable_gpu_seconds + a.credited_gpu_seconds == a.gpu_seconds
        if a.release_source == "released":
            assert after == []  # the meter stops at the release: nothing after it
    lost = next(e for e in h.events if isinstance(e, AttemptLost))
    first = record.attempts[0]
    if first.release_source == "lost":
        beat = lost.last_heartbeat_at
        assert beat is not None and first.released_at == beat
        ran_on = any(t.attempt == 1 and t.interval_start > beat for t in h.ticks)
        assert (first.uncounted_gpu_seconds > 0) == ran_on
    assert record.uncounted_gpu_seconds == sum(a.uncounted_gpu_seconds for a in record.attempts)
