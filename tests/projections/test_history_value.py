"""The ``History`` value answers every query as the plain definitions over a list do.

Generated live histories (``test_invariants.live_jobs``), redelivered with
duplicates: a History keeps the first occurrence of each id, and its indexed
``of_type`` / ``first`` / ``last`` / ``index`` / slices equal the answers
computed from scratch on the list. The deciders that take it (``react``,
``classify`` via ``gather``, ``account``) give the same results on a History as
on the list with its duplicates.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.decisions import react
from projections.failures import classify
from projections.history import History, first, last, of_type
from schemas.events import AttemptScheduled, Event
from tests.projections.histories import JobHistory
from tests.projections.test_invariants import PROPERTY, live_jobs, redelivered


def _unique(events: list[Event]) -> list[Event]:
    """The definition: first occurrence of each event id, in order."""
    out: list[Event] = []
    for e in events:
        if all(e.event_id != o.event_id for o in out):
            out.append(e)
    return out


def _of_type(events: list[Event], cls: type[Event], attempt: int | None) -> list[Event]:
    return [
        e
        for e in _unique(events)
        if isinstance(e, cls) and (attempt is None or e.attempt == attempt)
    ]


@PROPERTY
@given(live_jobs(), st.data())
def test_history_queries_equal_the_definitions(h: JobHistory, data: st.DataObject) -> None:
    events: list[Event] = data.draw(redelivered(h.events))
    history = History(events)
    expected = _unique(events)
    assert list(history) == expected
    assert len(history) == len(expected)
    assert History.of(history) is history
    classes: set[type[Event]] = {type(e) for e in events} | {Event, AttemptScheduled}
    attempts = [None, *range(0, max(e.attempt for e in events) + 2)]
    for cls in classes:
        for n in attempts:
            want = _of_type(events, cls, n)
            # Twice: the second answer comes from the index and must not differ.
            assert history.of_type(cls, n) == want
            assert of_type(history, cls, n) == want
            assert first(history, cls, n) == (want[0] if want else None)
            assert last(history, cls, n) == (want[-1] if want else None)
    cut = data.draw(st.integers(0, len(expected)))
    prefix = history[:cut]
    assert isinstance(prefix, History)
    assert list(prefix) == expected[:cut]
    for i, e in enumerate(expected):
        assert history.index(e) == i
        assert list(history.upto(e.event_id)) == expected[: i + 1]


@PROPERTY
@given(live_jobs(), st.data())
def test_deciders_answer_the_same_on_a_history_and_on_the_list(
    h: JobHistory, data: st.DataObject
) -> None:
    events: list[Event] = data.draw(redelivered(h.events))
    history = History(events)
    ticks: list[Any] = list(h.ticks)
    assert account(history, ticks) == account(events, ticks)
    for i, event in enumerate(events):
        assert react(History(events[: i + 1]), event) == react(events[: i + 1], event)
    for n in {e.attempt for e in events}:
        assert classify(history, n) == classify(events, n)


def test_a_history_equals_the_list_of_its_events_and_not_one_with_duplicates() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    events = list(h.events)
    assert History(events) == events == History(events + events[:1])
    assert History(events) != events + events[:1]
    assert History(events) != events[::-1]
