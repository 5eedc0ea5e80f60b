"""The pure step of the classifier and retry decider: triggers, ids, idempotence."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.decisions import (
    CLASSIFIER,
    DECIDER,
    DECISION_PRODUCERS,
    REACTS_TO,
    classifier_step,
    decider_step,
    react,
    react_all,
    settle,
    verify,
)
from schemas.events import (
    ComputeReleased,
    Event,
    FailureClassified,
    JobCancelled,
    RetryScheduled,
    derived_event_id,
)
from tests.golden.golden import fixture_paths, load
from tests.projections import scenarios
from tests.projections.histories import JobHistory


def facts(h: JobHistory) -> list[Event]:
    return [e for e in h.events if e.producer not in DECISION_PRODUCERS]


def decisions(h: JobHistory) -> list[Event]:
    return [e for e in h.events if e.producer in DECISION_PRODUCERS]


def test_derived_events_have_deterministic_envelopes() -> None:
    h = scenarios.cuda_oom()
    release = next(e for e in h.events if isinstance(e, ComputeReleased))
    fc = next(e for e in h.events if isinstance(e, FailureClassified))
    assert fc.event_id == derived_event_id(release.event_id, CLASSIFIER)
    assert (fc.causation_id, fc.producer, fc.occurred_at) == (
        release.event_id,
        CLASSIFIER,
        release.occurred_at,
    )
    assert (fc.job_id, fc.attempt) == (release.job_id, release.attempt)
    failed = h.events[-1]
    assert failed.event_id == derived_event_id(fc.event_id, DECIDER)
    assert failed.producer == DECIDER and failed.causation_id == fc.event_id


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_replay_equals_the_live_decisions(name: str) -> None:
    h = scenarios.SCENARIOS[name]()
    assert react_all(h.events) == decisions(h)
    assert settle(facts(h)) == h.events
    assert verify(h.events) == []


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_a_redelivered_event_adds_nothing(name: str) -> None:
    h = scenarios.SCENARIOS[name]()
    for event in h.events:
        assert react([*h.events, event], event) == []


def test_after_a_crash_the_same_ids_are_produced_again() -> None:
    h = scenarios.node_lost_then_resume()
    lost = next(i for i, e in enumerate(h.events) if e.type == "AttemptLost")
    before_crash = h.events[: lost + 1]
    first = react(before_crash, h.events[lost])
    again = react([*before_crash, h.events[lost]], h.events[lost])
    assert (
        [e.event_id for e in first] == [e.event_id for e in again] == [h.events[lost + 1].event_id]
    )


def test_once_per_attempt_a_late_release_from_a_lost_node_is_not_acted_on() -> None:
    h = scenarios.node_lost_then_resume()
    first_attempt = h.attempt
    h.attempt = 1  # the vanished node comes back and reports its release
    late = h.emit(ComputeReleased, "agent/node-a", node_id="node-a", reason="exited")
    h.attempt = first_attempt
    assert react(h.events, late) == []
    assert verify(h.events) == []


def test_a_second_classification_of_an_attempt_is_not_decided_again() -> None:
    h = scenarios.registry_unreachable()
    fc = next(e for e in h.events if isinstance(e, FailureClassified))
    other = fc.model_copy(update={"event_id": "another-classifier-run", "classifier_version": "2"})
    at = h.events.index(fc) + 1
    history = [*h.events[:at], other]
    assert react(history, other) == []


def test_cancel_while_retrying_ends_the_job_at_once() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.schedule()
    h.wait(60).dispatch_timed_out()
    assert isinstance(h.events[-1], RetryScheduled)
    h.wait(1).cancel()
    assert isinstance(h.events[-1], JobCancelled)


def test_cancel_while_running_waits_for_the_agent() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.start()
    cancel = h.wait(10).cancel()
    assert h.events[-1] is cancel  # nothing derived: the agent stops the container first


def test_cancel_before_the_node_accepts_ends_through_the_dispatch_timeout() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.schedule()
    h.wait(5).cancel()
    h.wait(55).dispatch_timed_out()
    fc, cancelled = h.events[-2:]
    assert isinstance(fc, FailureClassified) and fc.failure_class == "cancelled"
    assert isinstance(cancelled, JobCancelled)


def test_a_graceful_exit_0_after_a_cancel_is_still_cancelled() -> None:
    h = JobHistory()
    h.submit()
    h.queue()
    h.start()
    h.wait(10).cancel()
    h.attempt_cancelled()
    h.exit(0, ("caught SIGTERM, saved state",))
    h.output()
    h.release("cancelled")
    assert isinstance(h.events[-1], JobCancelled)


def test_success_before_a_late_cancel_stands() -> None:
    h = scenarios.success()
    cancel = h.cancel()
    assert react(h.events, cancel) == [] and h.events[-1] is cancel


def test_stale_watchdog_and_scheduler_facts_are_not_triggers() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    timed_out = h.dispatch_timed_out()  # the node accepted before the deadline fired
    assert react(h.events, timed_out) == []
    h2 = JobHistory(live=False)
    h2.submit()
    h2.queue()
    h2.schedule()
    stale = h2.no_capacity()
    assert react(h2.events, stale) == []


def test_decisions_read_only_the_history_up_to_the_event() -> None:
    h = scenarios.cuda_oom()
    release = next(e for e in h.events if isinstance(e, ComputeReleased))
    at = h.events.index(release)
    assert react(h.events[: at + 1], release) == [h.events[at + 1]]


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: p.stem)
def test_the_steps_derive_nothing_from_events_outside_reacts_to(path: Path) -> None:
    """react() returns early for events outside REACTS_TO; the steps it skips agree."""
    events, _, _ = load(path)
    for i, event in enumerate(events):
        if not isinstance(event, REACTS_TO):
            history = events[: i + 1]
            assert classifier_step(history, event) == [], event.type
            assert decider_step(history, event) == [], event.type
