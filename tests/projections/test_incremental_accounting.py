"""``account(memo=...)``: accounting kept between calls equals accounting from scratch.

The live processors account a job again in every batch that touches it, keeping
each attempt's result (``memo``) and recomputing only an attempt whose inputs
changed. Over generated live histories, redelivered with duplicates and read in
growing prefixes (as batches would), with meter ticks arriving in between, the
record computed with one memo across all the calls equals the one computed
without it at every step.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import AttemptMemo, account
from schemas.events import CancelRequested, Event, MeterTick
from tests.projections.histories import JobHistory
from tests.projections.test_invariants import PROPERTY, live_jobs, redelivered


@PROPERTY
@given(live_jobs(), st.data())
def test_accounting_with_a_memo_equals_accounting_from_scratch(
    h: JobHistory, data: st.DataObject
) -> None:
    events: list[Event] = data.draw(redelivered(h.events))
    ticks: list[MeterTick] = list(h.ticks)
    memo: AttemptMemo = {}
    for cut in range(1, len(events) + 1):
        # The ticks the meter had sent by then, some of them only in a later batch.
        until = max(e.occurred_at for e in events[:cut])
        seen = [t for t in ticks if t.occurred_at <= until]
        late = data.draw(st.integers(0, len(seen)))
        seen = seen[: len(seen) - late]
        assert account(events[:cut], seen, memo=memo) == account(events[:cut], seen)
    # Every accounted attempt is kept (one entry per attempt, not one per call).
    assert len(memo) == len(account(events, ticks).attempts)


def test_an_open_hold_grows_with_the_history_although_its_attempt_has_no_new_event() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    memo: AttemptMemo = {}
    before = account(h.events, memo=memo)
    # Only an event of another attempt (the queue's, attempt 0) moves the clock on.
    h.wait(100).emit(CancelRequested, "api", attempt=0, requested_by="alice", reason="r")
    after = account(h.events, memo=memo)
    assert after == account(h.events)
    assert after.attempts[0].held_seconds == before.attempts[0].held_seconds + 100
