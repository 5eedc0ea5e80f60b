"""Property tests over generated histories, with redeliveries and reordering.

Histories are generated the way they happen: a job runs attempts with random
outcomes while the live decisions are appended (``JobHistory(live=True)``).
Then delivery is made unreliable: events are duplicated and shuffled.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS, react, react_all, settle, verify
from projections.history import unique
from projections.job_state import evolve, project
from schemas.events import TERMINAL_EVENTS, ComputeHeld, Event, JobRejected, MeterTick
from schemas.views import TERMINAL_STATUSES
from tests.projections.histories import JobHistory, job_spec

TERMINAL_STATUS = {
    "JobSucceeded": "succeeded",
    "JobSucceededWithErrors": "succeeded_with_errors",
    "JobFailed": "failed",
    "JobCancelled": "cancelled",
    "JobRejected": "rejected",
}
OUTCOMES = (
    "success",
    "exit_1",
    "gpu_oom",
    "host_oom",
    "killed",
    "lost",
    "lost_contact_recovers",
    "dispatch_timeout",
    "registry_unreachable",
    "image_not_found",
    "daemon_error",
    "upload_failed",
    "output_missing",
    "cancel_running",
    "finishing_timeout",
)
PROPERTY = settings(
    max_examples=int(os.environ.get("GRIDLEDGER_PROPERTY_EXAMPLES", "120")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _finish(h: JobHistory, outcome: str, checkpoint: bool) -> None:
    logs = {
        "exit_1": (1, ("ValueError: boom",), False),
        "gpu_oom": (1, ("torch.cuda.OutOfMemoryError: CUDA out of memory.",), False),
        "host_oom": (137, (), True),
        "killed": (137, (), False),
    }
    if checkpoint:
        h.checkpoint(f"step-{len(h.events)}", len(h.events))
    if outcome in logs:
        code, lines, oom = logs[outcome]
        h.exit(code, lines, oom_killed=oom)
        h.wait(1).release()
    elif outcome == "lost":
        h.node_dies()
        h.wait(45).unresponsive()
        h.wait(60).lost()
    elif outcome == "cancel_running":
        h.cancel()
        h.wait(1).attempt_cancelled()
        h.exit(143, (), signal=15)
        h.release("cancelled")
    elif outcome == "finishing_timeout":
        h.exit(0)
        h.wait(300).finishing_timed_out()
        h.wait(10).release()  # late: after the decision
    else:
        if outcome == "lost_contact_recovers":
            h.heartbeats_pause()
            h.wait(45).unresponsive()
            h.wait(10).heartbeats_resume()
            h.responsive()
        h.exit(0)
        if outcome == "upload_failed":
            h.output_failed("model.pt", "store_failed", "503")
        elif outcome == "output_missing":
            h.output_failed("model.pt", "missing")
        else:
            h.output()
        h.wait(1).release()


def _attempt(h: JobHistory, outcome: str, seconds: int, checkpoint: bool) -> None:
    node = f"node-{h.attempt + 1}"
    if outcome == "dispatch_timeout":
        h.schedule(node=node)
        h.wait(60).dispatch_timed_out()
        return
    if outcome in ("registry_unreachable", "image_not_found", "daemon_error"):
        h.schedule(node=node)
        h.wait(1).accept()
        h.hold()
        h.wait(seconds)
        if outcome == "daemon_error":
            h.image_ok()
            h.start_failed("daemon_error", "Error response from daemon")
        else:
            reason = "not_found" if outcome == "image_not_found" else "registry_unreachable"
            h.image_unavailable(reason, "x")
        h.release("start_failed")
        return
    h.start(node=node)
    h.wait(seconds)
    _finish(h, outcome, checkpoint)


@st.composite
def live_jobs(draw: Any) -> JobHistory:
    """A job's complete history as the live system would write it."""
    spec = job_spec(
        retry={
            "max_attempts": draw(st.integers(1, 4)),
            "retry_user_errors": draw(st.booleans()),
        }
    )
    h = JobHistory(job_id="job-p", spec=spec, tick_s=draw(st.sampled_from([10.0, 30.0])))
    h.submit()
    opening = draw(st.sampled_from(["queue"] * 6 + ["reject", "cancel"]))
    if opening == "reject":
        h.emit(JobRejected, "api", failure_class="invalid_spec", summary="bad", advice="fix")
        return h
    if opening == "cancel":
        h.cancel()
        return h
    h.wait(1).queue()
    for _ in range(8):
        status = project(h.events).status
        if status in TERMINAL_STATUSES:
            break
        if status == "retrying":
            h.wait(10).queue()
        step = draw(st.sampled_from(["run"] * 8 + ["no_capacity", "cancel_queued"]))
        if step == "no_capacity":
            h.wait(600).no_capacity()
        elif step == "cancel_queued":
            h.cancel()
        else:
            outcome = draw(st.sampled_from(OUTCOMES))
            _attempt(h, outcome, draw(st.integers(1, 200)), draw(st.booleans()))
    return h


@st.composite
def redelivered(draw: Any, events: Sequence[Event]) -> list[Event]:
    """The events with some delivered again later (at-least-once)."""
    out = list(events)
    for _ in range(draw(st.integers(0, 8))):
        i = draw(st.integers(0, len(out) - 1))
        j = draw(st.integers(i + 1, len(out)))
        out.insert(j, out[i])
    return out


def _ticks(h: JobHistory, draw: Any) -> list[MeterTick]:
    ticks: list[MeterTick] = draw(redelivered(h.ticks)) if h.ticks else []
    return ticks


@PROPERTY
@given(live_jobs(), st.data())
def test_exactly_one_terminal_state_once_terminal(h: JobHistory, data: st.DataObject) -> None:
    assert sum(isinstance(e, TERMINAL_EVENTS) for e in h.events) <= 1
    events = data.draw(redelivered(h.events))
    events = data.draw(st.permutations(events)) if data.draw(st.booleans()) else events
    view = None
    first_terminal: str | None = None
    for event in events:
        view = evolve(view, event)  # never raises, whatever the order
        if first_terminal is None and isinstance(event, TERMINAL_EVENTS):
            first_terminal = event.type
        if first_terminal is None:
            assert view.status not in TERMINAL_STATUSES
        else:
            assert view.status == TERMINAL_STATUS[first_terminal]
            assert view.terminal_event == first_terminal


@PROPERTY
@given(live_jobs(), st.data())
def test_applying_a_history_twice_equals_applying_it_once(
    h: JobHistory, data: st.DataObject
) -> None:
    events = data.draw(st.permutations(h.events)) if data.draw(st.booleans()) else h.events
    once = project(events)
    assert project([*events, *events]) == once
    noisy = data.draw(redelivered(events))
    assert project(noisy) == project(unique(noisy)) == once


@PROPERTY
@given(live_jobs(), st.data())
def test_billable_plus_credited_is_the_held_gpu_time(h: JobHistory, data: st.DataObject) -> None:
    events = data.draw(redelivered(h.events))
    if data.draw(st.booleans()):
        events = data.draw(st.permutations(events))
    record = account(events, _ticks(h, data.draw))
    numbers = [a.attempt for a in record.attempts]
    assert len(numbers) == len(set(numbers))  # no attempt billed twice
    for a in record.attempts:
        assert a.billable_gpu_seconds + a.credited_gpu_seconds == a.gpu_seconds
        assert min(a.billable_gpu_seconds, a.credited_gpu_seconds) == 0.0
        assert (
            a.gpu_seconds == a.held_seconds * a.gpu_count
            or abs(a.gpu_seconds - a.held_seconds * a.gpu_count) < 1e-6
        )
    total = record.billable_gpu_seconds + record.credited_gpu_seconds
    assert abs(total - record.gpu_seconds) < 1e-6
    assert record.billable_gpu_seconds <= record.gpu_seconds + 1e-6
    assert account(events, h.ticks) == account(unique(events), h.ticks)


@PROPERTY
@given(live_jobs())
def test_live_records_are_final_and_reconciled(h: JobHistory) -> None:
    record = account(h.events, h.ticks)
    if record.status in TERMINAL_STATUSES:
        assert record.final
    assert record.reconciled


@PROPERTY
@given(live_jobs())
def test_a_job_that_never_held_compute_owes_nothing(h: JobHistory) -> None:
    record = account(h.events, h.ticks)
    if not any(isinstance(e, ComputeHeld) for e in h.events):
        assert record.gpu_seconds == record.billable_gpu_seconds == 0.0
        assert record.credited_gpu_seconds == 0.0
    if any(isinstance(e, JobRejected) for e in h.events):
        assert record.attempts == [] and record.final


@PROPERTY
@given(live_jobs(), st.data())
def test_decisions_are_idempotent(h: JobHistory, data: st.DataObject) -> None:
    recorded = [e for e in h.events if e.producer in DECISION_PRODUCERS]
    assert react_all(h.events) == recorded and verify(h.events) == []
    event = data.draw(st.sampled_from(h.events))
    assert react([*h.events, event], event) == []  # redelivered after its results were written
    at = h.events.index(event)
    fresh = react(h.events[: at + 1], event)
    crashed = react([*h.events[: at + 1], event], event)  # redelivered before they were written
    assert [e.event_id for e in fresh] == [e.event_id for e in crashed]
    noisy = data.draw(redelivered(h.events))
    assert verify(noisy) == []
    facts = [e for e in noisy if e.producer not in DECISION_PRODUCERS]
    assert project(settle(facts)) == project(h.events)
