"""The fast fold (``projections.fold``) equals the specification, ``evolve``.

The processors, the sink and replay fold each job into one mutable ``JobState`` and
freeze it into a JobView only when they publish or store it, and encode its Avro datum
straight from the state. Over generated histories (the live system's, redelivered with
duplicates, reordered, with the late facts of an attempt given up on), frozen after
every event, after copies and after a round trip through a frozen view, the state gives
exactly the view ``evolve`` gives, and its datum encodes to the view's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import fold
from projections.job_state import evolve, project
from schemas import codec
from schemas.events import Event
from schemas.views import JobView
from tests.projections import scenarios
from tests.projections.histories import JobHistory
from tests.projections.test_invariants import PROPERTY, live_jobs, redelivered
from tests.projections.test_late_facts import outages

QUICK = settings(PROPERTY, max_examples=min(PROPERTY.max_examples, 40))
"""The default run's share (GRIDLEDGER_PROPERTY_EXAMPLES lowers it further); each example
freezes the state after every event of a history of up to a hundred."""


def _agrees(events: Sequence[Event], cuts: Sequence[int] = ()) -> None:
    """Folded event by event, the state frozen equals ``evolve``'s view each time; at
    ``cuts`` the state is copied (a batch's working copy) and rebuilt from its frozen
    view (a view read back from a table)."""
    state: fold.JobState | None = None
    view: JobView | None = None
    for i, event in enumerate(events):
        view = evolve(view, event)
        state = fold.fold([event], state)
        assert state is not None
        frozen = state.freeze()
        assert frozen == view, f"after event {i} ({event.type})"
        if i in cuts:
            kept = state.freeze()
            copy = state.copy()
            state = fold.JobState.of(frozen) if i % 2 else copy
            assert kept == view  # a frozen view never changes with the state
    if state is not None and view is not None:
        datum = codec.Datum("JobView", view.job_id, state.datum())
        assert codec.encode(datum) == codec.encode(view)
        assert codec.decode(codec.encode(state.freeze())) == view


@QUICK
@given(live_jobs(), st.data())
def test_the_fast_fold_equals_evolve_on_live_histories(h: JobHistory, data: Any) -> None:
    events: list[Event] = data.draw(redelivered(h.events))
    if data.draw(st.booleans()):
        events = data.draw(st.permutations(events))
    cuts = data.draw(st.sets(st.integers(0, max(0, len(events) - 1)), max_size=4))
    _agrees(events, sorted(cuts))


@QUICK
@given(outages(), st.data())
def test_the_fast_fold_equals_evolve_with_late_facts(case: Any, data: Any) -> None:
    events: list[Event] = data.draw(redelivered(case[0].events))
    _agrees(events, [len(events) // 2])


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_the_fast_fold_equals_project_in_every_scenario(name: str) -> None:
    events = scenarios.SCENARIOS[name]().events
    for history in (events, [*events, *events[::2]], events[::-1]):
        state = fold.fold(history)
        assert state is not None
        assert state.freeze() == project(history)
        _agrees(history)


def test_an_event_of_another_job_and_a_second_submission_are_noted_once() -> None:
    h = scenarios.success()
    other = JobHistory(job_id="job-other")
    other.submit()
    forged = other.events[0].model_copy(update={"job_id": h.job_id, "event_id": "forged"})
    events = [*h.events[:3], forged, forged, other.events[0], *h.events[3:]]
    _agrees(events)
    state = fold.fold(events)
    assert state is not None
    assert sum("forged" in n for n in state.anomalies) == 1
    assert state.freeze().tenant == h.events[0].tenant  # type: ignore[attr-defined]
