"""Routing of job-events to node-commands, as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.events import (
    AttemptAccepted,
    AttemptScheduled,
    AttemptSuperseded,
    CancelRequested,
    ComputeReleased,
    DispatchTimedOut,
    JobSubmitted,
    JobSucceeded,
)
from schemas.spec import JobSpec, carried, spec_digest
from services.processors.dispatch import commands_for

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SUB = JobSubmitted(job_id="j", occurred_at=T0, tenant="t", spec=JobSpec(image="x"))


def sched(attempt: int, node: str) -> AttemptScheduled:
    return AttemptScheduled(
        job_id="j",
        attempt=attempt,
        occurred_at=T0,
        node_id=node,
        gpu_count=1,
        dispatch_deadline=T0 + timedelta(seconds=60),
        **carried(SUB.spec),
    )


def test_the_node_gets_the_spec_of_the_jobs_first_jobsubmitted() -> None:
    """job-events carry the spec once (JobSubmitted); the node's command carries it whole,
    a forged second JobSubmitted never replaces it, and without JobSubmitted no command goes."""
    a1 = sched(1, "n1")
    assert a1.spec is None and a1.spec_digest == spec_digest(SUB.spec)
    forged = JobSubmitted(job_id="j", occurred_at=T0, tenant="other", spec=JobSpec(image="evil"))
    (command,) = commands_for([SUB, a1], [SUB, forged, a1], a1, T0)
    assert isinstance(command, AttemptScheduled)
    assert command.runnable == SUB.spec and command.event_id == a1.event_id
    assert command == a1.for_node(SUB.spec)
    assert commands_for([a1], [a1], a1, T0) == []
    # A decision written before the spec was stored once carries it: sent as it was.
    old = a1.model_copy(update={"spec": SUB.spec, "spec_digest": ""})
    assert commands_for([SUB, old], [SUB, old], old, T0) == [old]


def test_attempt_scheduled_is_copied_unless_late_accepted_or_over() -> None:
    a1 = sched(1, "n1")
    assert commands_for([SUB, a1], [SUB, a1], a1, T0) == [a1.for_node(SUB.spec)]
    assert commands_for([SUB, a1], [SUB, a1], a1, T0 + timedelta(seconds=60)) == []
    accepted = AttemptAccepted(job_id="j", attempt=1, occurred_at=T0, node_id="n1")
    assert commands_for([SUB, a1], [SUB, a1, accepted], a1, T0) == []
    released = ComputeReleased(job_id="j", attempt=1, occurred_at=T0, node_id="n1")
    assert commands_for([SUB, a1], [SUB, a1, released], a1, T0) == []


def test_cancel_goes_to_the_node_of_the_current_attempt() -> None:
    a1, a2 = sched(1, "n1"), sched(2, "n2")
    released = ComputeReleased(job_id="j", attempt=1, occurred_at=T0, node_id="n1")
    cancel = CancelRequested(job_id="j", occurred_at=T0, requested_by="u")
    history = [SUB, a1, released, a2, cancel]
    (routed,) = commands_for(history, history, cancel, T0)
    assert isinstance(routed, CancelRequested)
    assert (routed.node_id, routed.attempt, routed.causation_id) == ("n2", 2, cancel.event_id)
    assert routed.event_id != cancel.event_id
    assert commands_for(history, history, cancel, T0)[0].event_id == routed.event_id
    assert commands_for([SUB, cancel], [SUB, cancel], cancel, T0) == []


def test_a_placement_after_a_cancel_carries_the_cancel_along() -> None:
    cancel = CancelRequested(job_id="j", occurred_at=T0)
    a1 = sched(1, "n1")
    out = commands_for([SUB, cancel, a1], [SUB, cancel, a1], a1, T0)
    assert [type(e) for e in out] == [AttemptScheduled, CancelRequested]
    assert isinstance(out[1], CancelRequested) and out[1].node_id == "n1"


def test_a_cancel_still_reaches_a_node_whose_dispatch_timeout_was_stale() -> None:
    a1 = sched(1, "n1")
    accepted = AttemptAccepted(job_id="j", attempt=1, occurred_at=T0, node_id="n1")
    stale = DispatchTimedOut(
        job_id="j", attempt=1, occurred_at=T0, node_id="n1", deadline=T0, causation_id="x"
    )
    cancel = CancelRequested(job_id="j", occurred_at=T0)
    history = [SUB, a1, accepted, stale, cancel]
    (routed,) = commands_for(history, history, cancel, T0)
    assert isinstance(routed, CancelRequested) and routed.node_id == "n1"
    timed_out_first = [SUB, a1, stale, cancel]
    assert commands_for(timed_out_first, timed_out_first, cancel, T0) == []


def test_a_superseded_attempt_is_cancelled_on_its_node_even_after_the_job_ended() -> None:
    a1, a2 = sched(1, "n1"), sched(2, "n2")
    done = JobSucceeded(job_id="j", attempt=1, occurred_at=T0)
    stop = AttemptSuperseded(
        job_id="j", attempt=2, occurred_at=T0, node_id="n2", winner=1, reason="attempt 1 won"
    )
    history = [SUB, a1, a2, done, stop]
    (routed,) = commands_for(history, history, stop, T0)
    assert isinstance(routed, CancelRequested)
    assert (routed.attempt, routed.node_id, routed.causation_id) == (2, "n2", stop.event_id)
    assert routed.reason == "superseded: attempt 1 won"
    assert commands_for(history, history, stop, T0)[0].event_id == routed.event_id
