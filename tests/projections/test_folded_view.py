"""Passing an already folded view to ``account`` / ``react`` changes nothing but the cost.

The processors keep each job's view folded on event by event and hand it to the
pure functions instead of letting them fold the history again; the contract is
that the view equals ``project()`` of the history they would have folded (for
``react``: up to and including the first occurrence of the event).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.decisions import classifier_step, decider_step, react, react_all
from projections.history import is_job_event, unique
from projections.job_state import evolve, project
from schemas.events import Event
from schemas.views import JobView
from tests.projections import scenarios
from tests.projections.histories import JobHistory
from tests.projections.test_invariants import PROPERTY, live_jobs, redelivered


def _views_as_of_each_event(events: Sequence[Event]) -> list[JobView | None]:
    """What the processors hold: for each position, the view folded incrementally up to
    and including the first occurrence of that event (None before any job-event)."""
    first: dict[str, JobView | None] = {}
    out: list[JobView | None] = []
    view: JobView | None = None
    for event in events:
        if event.event_id not in first:
            if is_job_event(event):
                view = evolve(view, event)
            first[event.event_id] = view
        out.append(first[event.event_id])
    return out


def _check(events: Sequence[Event], ticks: Sequence[Any]) -> None:
    views = _views_as_of_each_event(events)
    for i, event in enumerate(events):
        history = list(events[: i + 1])
        view = views[i]
        assert react(history, event, view=view) == react(history, event)
        # the processors pass the whole read history, the view still as of the event
        assert react(list(events), event, view=view) == react(list(events), event)
        prefix = unique(history[: [e.event_id for e in history].index(event.event_id) + 1])
        assert classifier_step(prefix, event, view) == classifier_step(prefix, event)
        assert decider_step(prefix, event, view=view) == decider_step(prefix, event)
        job_events = [e for e in unique(history) if is_job_event(e)]
        if job_events:
            latest = project(job_events)
            assert account(history, ticks, view=latest) == account(history, ticks)


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_a_given_view_gives_the_same_output_in_every_scenario(name: str) -> None:
    h: JobHistory = scenarios.SCENARIOS[name]()
    _check(h.events, h.ticks)
    _check([*h.events, *h.events[::3]], h.ticks)  # redeliveries


def test_account_ignores_the_view_without_job_events() -> None:
    h = scenarios.success()
    view = project(h.events)
    assert account([], h.ticks, view=view) == account([], h.ticks)


@PROPERTY
@given(live_jobs(), st.data())
def test_a_given_view_gives_the_same_output_on_unreliable_delivery(
    h: JobHistory, data: st.DataObject
) -> None:
    events = data.draw(redelivered(h.events))
    if data.draw(st.booleans()):
        events = data.draw(st.permutations(events))
    _check(events, h.ticks)
    assert react_all(events) == _react_each_prefix(events)


def _react_each_prefix(events: Sequence[Event]) -> list[Event]:
    """react_all's definition, folding every prefix from scratch."""
    out: list[Event] = []
    for i, event in enumerate(events):
        out += react(events[: i + 1], event)
    return out


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_react_all_folding_on_equals_reacting_to_each_prefix(name: str) -> None:
    events = scenarios.SCENARIOS[name]().events
    for history in (events, [*events, *events[::2]], events[::-1]):
        assert react_all(history) == _react_each_prefix(history)
