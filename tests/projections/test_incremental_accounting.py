"""``projections.tally``: the accounting folded per event equals ``account``.

The live processors keep one :class:`Tally` per job and sync it with the job's log in
every batch that touches it. The log grows, and its tail is rewritten: an event the
worker appended moves to where it is read back, a record read meanwhile goes before it.
Over generated histories (the live system's, redelivered with duplicates, reordered,
with the late facts of an attempt given up on) synced in growing prefixes whose last
events are shuffled, with meter ticks arriving in between and some only later, the
tally's record equals ``account`` of the same history and ticks after every sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.accounting import account
from projections.history import is_job_event, unique
from projections.job_state import project
from projections.tally import Tally
from schemas.events import CancelRequested, Event, MeterTick
from tests.projections import scenarios
from tests.projections.histories import JobHistory
from tests.projections.test_invariants import PROPERTY, live_jobs, redelivered
from tests.projections.test_late_facts import outages

QUICK = settings(PROPERTY, max_examples=min(PROPERTY.max_examples, 30))
"""The default run's share: each example syncs and accounts after every event."""


def _view(history: Sequence[Event]) -> Any:
    events = [e for e in unique(history) if is_job_event(e)]
    return project(events) if events else None


def _agrees(events: list[Event], ticks: list[MeterTick], data: st.DataObject) -> Tally:
    """Synced with growing prefixes of ``events`` (the last few of each shuffled), the
    ticks sent by then added (some a batch late), the tally equals ``account``."""
    tally = Tally(events[0].job_id)
    sent = 0
    for cut in range(1, len(events) + 1):
        tail = data.draw(st.integers(0, min(3, cut)))
        shown = events[: cut - tail] + data.draw(st.permutations(events[cut - tail : cut]))
        until = max(e.occurred_at for e in shown)
        due = sum(t.occurred_at <= until for t in ticks)
        sent = max(sent, due - data.draw(st.integers(0, due)))  # a tick is late, never taken back
        seen = ticks[:sent]
        tally.sync(shown)
        tally.add_new_ticks(seen)
        assert tally.record(_view(shown)) == account(shown, seen), f"after {cut} events"
    tally.sync(events)
    tally.add_ticks(ticks)
    assert tally.record(_view(events)) == account(events, ticks)
    return tally


@QUICK
@given(live_jobs(), st.data())
def test_the_tally_equals_account_on_live_histories(h: JobHistory, data: st.DataObject) -> None:
    events: list[Event] = data.draw(redelivered(h.events))
    if data.draw(st.booleans()):
        events = data.draw(st.permutations(events))
    _agrees(events, list(h.ticks), data)


@QUICK
@given(outages(), st.data())
def test_the_tally_equals_account_with_late_facts(case: Any, data: st.DataObject) -> None:
    h: JobHistory = case[0]
    _agrees(data.draw(redelivered(h.events)), list(h.ticks), data)


def test_the_tally_equals_account_in_every_scenario() -> None:
    for name, build in sorted(scenarios.SCENARIOS.items()):
        h = build()
        for events in (h.events, h.events[::-1]):
            tally = Tally(events[0].job_id)
            tally.sync(events)
            tally.add_ticks(h.ticks)
            assert tally.record(_view(events)) == account(events, h.ticks), name


def test_an_open_hold_grows_with_the_history_although_its_attempt_has_no_new_event() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    tally = Tally(h.job_id)
    tally.sync(h.events)
    before = tally.record(_view(h.events))
    # Only an event of another attempt (the queue's, attempt 0) moves the clock on.
    h.wait(100).emit(CancelRequested, "api", attempt=0, requested_by="alice", reason="r")
    tally.sync(h.events)
    after = tally.record(_view(h.events))
    assert after == account(h.events)
    assert after.attempts[0].held_seconds == before.attempts[0].held_seconds + 100


def test_a_rewritten_tail_is_taken_back_and_an_unchanged_attempt_is_not_recomputed() -> None:
    h = scenarios.success()
    events = list(h.events)
    tally = Tally(h.job_id)
    tally.sync(events[:-2])
    first = tally.record(_view(events[:-2]))
    # The last two arrive in the other order: the tail is rewritten, the record follows.
    swapped = [*events[:-2], events[-1], events[-2]]
    tally.sync(swapped)
    assert tally.record(_view(swapped)) == account(swapped)
    tally.sync(events)
    final = tally.record(_view(events))
    assert final == account(events)
    assert final.final and not first.final
    again = tally.record(_view(events))
    assert all(a is b for a, b in zip(again.attempts, final.attempts, strict=True))
