"""The job-state fold: states, attempts, idempotence and anomalies."""

from __future__ import annotations

import pytest

from projections.job_state import evolve, project
from schemas.events import (
    ContainerStarted,
    FailureClassified,
    JobCancelled,
    JobSucceeded,
    LogChunk,
    NodeHeartbeat,
    RetryScheduled,
)
from tests.projections import scenarios
from tests.projections.histories import JobHistory


def states(h: JobHistory) -> list[str]:
    """The status after each event, consecutive repeats collapsed."""
    out: list[str] = []
    view = None
    for event in h.events:
        view = evolve(view, event)
        if not out or out[-1] != view.status:
            out.append(view.status)
    return out


def test_lifecycle_of_a_successful_job() -> None:
    assert states(scenarios.success()) == [
        "submitted",
        "queued",
        "scheduled",
        "starting",
        "running",
        "finishing",
        "succeeded",
    ]


def test_lifecycle_through_a_lost_node_and_a_retry() -> None:
    assert states(scenarios.node_lost_then_resume()) == [
        "submitted",
        "queued",
        "scheduled",
        "starting",
        "running",
        "lost_contact",  # AttemptUnresponsive, then AttemptLost keeps it until the decision
        "retrying",
        "queued",
        "scheduled",
        "starting",
        "running",
        "finishing",
        "succeeded",
    ]


def test_attempt_records_what_happened() -> None:
    view = project(scenarios.node_lost_then_resume().events)
    lost, ok = view.attempts
    assert (lost.node_id, lost.status, lost.failure_class) == ("node-a", "lost", "node_lost")
    assert lost.lost_at is not None and lost.unresponsive_since is not None
    assert (ok.node_id, ok.status, ok.exit_code, ok.image) == (
        "node-b",
        "ended",
        0,
        "gridledger/trainer:1.0",
    )
    assert ok.held_from and ok.started_at and ok.exited_at and ok.released_at
    assert view.avoid_nodes == ["node-a"] and view.attempt == 2
    assert [c.name for c in view.checkpoints] == ["step-500", "step-1000"]


def test_failure_view_carries_class_and_advice() -> None:
    view = project(scenarios.cuda_oom().events)
    assert view.status == "failed" and view.failure is not None
    assert view.failure.attempt == 1 and view.failure.rule_id == "run.gpu_oom"
    assert view.attempts[0].attribution == "user"
    assert view.reason.startswith("not retryable")


def test_duplicates_are_no_ops() -> None:
    h = scenarios.cuda_oom()
    once = project(h.events)
    assert project(h.events + h.events) == once
    assert project([e for e in h.events for _ in range(2)]) == once


def test_a_second_terminal_event_is_an_anomaly_and_the_first_is_kept() -> None:
    h = scenarios.success()
    late = h.emit(JobCancelled, "retry-decider", summary="late")
    view = project(h.events)
    assert view.status == "succeeded" and view.terminal_event == "JobSucceeded"
    assert any(late.event_id in a and "second terminal" in a for a in view.anomalies)


def test_a_late_release_after_the_decision_is_recorded_without_anomaly() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(30).exit(1)
    h.emit(JobSucceeded, "retry-decider")  # any terminal event first
    h.release()
    view = project(h.events)
    assert view.status == "succeeded" and view.anomalies == []
    assert view.attempts[0].released_at == h.now


def test_events_before_submission_are_recorded_as_anomalies() -> None:
    h = scenarios.success()
    view = project(h.events[1:])
    assert view.status == "succeeded"
    assert "arrived before JobSubmitted" in view.anomalies[0]


def test_stream_and_node_events_are_ignored_silently() -> None:
    h = scenarios.lost_contact_recovers()
    beat = h.heartbeat()
    chunk = LogChunk(
        job_id=h.job_id, attempt=1, occurred_at=h.now, stream="stdout", seq=0, first_line=1,
        line_count=1, data="hello\n",
    )  # fmt: skip
    node = NodeHeartbeat(node_id="node-a", attempt=0, occurred_at=h.now, seq=3)
    mixed = [*h.events[:5], beat, chunk, *h.ticks, node, *h.events[5:]]
    assert project(mixed) == project(h.events)


def test_out_of_order_facts_never_move_the_job_backwards() -> None:
    h = scenarios.success()
    started = next(i for i, e in enumerate(h.events) if e.type == "ContainerStarted")
    held = next(i for i, e in enumerate(h.events) if e.type == "ComputeHeld")
    order = list(h.events)
    order[held], order[started] = order[started], order[held]
    view = project(order[: started + 1])
    assert view.status == "running"
    assert any("out of order" in a for a in view.anomalies)


def test_responsive_without_unresponsive_is_an_anomaly() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.responsive()
    view = project(h.events)
    assert view.status == "running" and "no AttemptUnresponsive" in view.anomalies[-1]


def test_another_jobs_event_is_ignored() -> None:
    h, other = scenarios.success(), scenarios.cuda_oom()
    foreign = other.events[-1].model_copy(update={"job_id": "job-2", "event_id": "x"})
    view = project([*h.events, foreign])
    assert view.status == "succeeded" and "belongs to job 'job-2'" in view.anomalies[-1]


def test_only_terminal_events_end_a_job() -> None:
    h = scenarios.cuda_oom()
    before_decision = [e for e in h.events if e.type != "JobFailed"]
    assert project(before_decision).status == "finishing"


def test_projecting_nothing_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        project([])


def test_a_stale_verdict_after_the_job_ended_changes_neither_its_status_nor_its_failure() -> None:
    # A classification delivered after the terminal event (a verdict on facts the job has
    # outrun) is noted; the job still says what ended it.
    h = scenarios.success()
    verdict = next(e for e in scenarios.missing_module().events if isinstance(e, FailureClassified))
    stale = verdict.model_copy(update={"job_id": h.job_id, "event_id": "stale-verdict"})
    view = project([*h.events, stale])
    assert (view.status, view.failure, view.terminal_event) == ("succeeded", None, "JobSucceeded")
    assert any(
        "stale-verdict" in a and "classified after the job ended" in a for a in view.anomalies
    )


def test_an_ended_job_has_no_deadline_and_a_late_decision_is_noted_with_why() -> None:
    # Unsure of its node, the job shows when it will be declared lost; once it ended, not.
    h = JobHistory()
    h.submit()
    h.queue()
    h.start()
    h.wait(10)
    unheard = h.unresponsive()
    assert project(h.events).deadline == unheard.lost_deadline is not None
    h.emit(JobCancelled, "retry-decider", summary="cancelled by the user")
    assert project(h.events).deadline is None
    late = h.emit(RetryScheduled, "retry-decider", next_attempt=2, delay_s=0, not_before=h.now)
    view = project(h.events)
    assert view.status == "cancelled"
    assert any(
        late.event_id in a and "would make the job retrying; it already ended cancelled" in a
        for a in view.anomalies
    )


def test_facts_after_the_end_and_of_a_future_attempt_are_noted_with_why() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.schedule()
    h.emit(JobCancelled, "retry-decider", summary="cancelled by the user")
    accepted = h.accept()
    started = h.container_started()
    future = h.emit(ContainerStarted, h.agent, attempt=2, container_id="c2")
    notes = project(h.events).anomalies
    for fact in (accepted, started):
        assert any(
            fact.event_id in a and "the attempt moved on after the job ended cancelled" in a
            for a in notes
        )
    assert any(future.event_id in a and "the current attempt is 1" in a for a in notes)


def test_facts_while_the_node_is_unheard_wait_for_it_to_be_heard_again() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.start()
    h.wait(10)
    h.unresponsive()
    h.exit(0, ())
    view = project(h.events)
    assert (view.status, view.status_before_lost_contact) == ("lost_contact", "finishing")
    h.responsive()
    assert project(h.events).status == "finishing"


def test_an_older_fact_while_the_node_is_unheard_does_not_move_the_job_back() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.schedule()
    accepted = h.accept()
    h.container_started()
    h.wait(10)
    h.unresponsive()
    h.add(accepted.model_copy(update={"event_id": "accepted-again"}))  # a late, older fact
    view = project(h.events)
    assert (view.status, view.status_before_lost_contact) == ("lost_contact", "running")
    h.responsive()
    assert project(h.events).status == "running"
