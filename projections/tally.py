"""One job's accounting folded per event on the hot paths, beside its ``JobState``.

``projections.accounting.account`` is the specification: a function of the whole history
that groups it by attempt, finds the submission, the job's end and the attempts placed
after it, the clock (``as_of``) and every attempt's ticks, on every call. A :class:`Tally`
keeps all of that as events arrive: each event is filed once under its attempt, the end,
the placements and the clock are kept up to date, and a record recomputes only the
attempts whose inputs changed since the last one (their events, their ticks, the job's
end, or the clock while the attempt still holds its GPUs), each with the specification's
own ``accounting._attempt`` over that attempt's events alone.

The processors' job logs are not append-only: an event the worker appended is moved to
the offset where it is read back, and a record read meanwhile is inserted before it.
:meth:`Tally.sync` therefore takes the job's history as it is now, keeps the prefix that
is unchanged since the last sync (by identity) and folds the rest again, taking back
what it had filed of the changed tail first.

``tests/projections/test_incremental_accounting.py`` shows, on generated histories with
late facts, duplicates, reordering and rewritten tails, that a tally's record equals
``account`` of the same history and ticks after every sync. MeterTicks come through
:meth:`Tally.add_ticks` (the processors keep them apart from the job-events); one in the
history passed to ``sync`` is ignored.

Pure: the tally is the caller's, nothing else is read or kept.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from itertools import islice

from projections.accounting import (
    DEFAULT_POLICY,
    AccountingPolicy,
    _attempt,
    summarize,
)
from projections.history import History, is_job_event
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptScheduled,
    ComputeHeld,
    ComputeReleased,
    Event,
    JobSubmitted,
    MeterTick,
)
from schemas.views import TERMINAL_STATUSES, AccountingRecord, AttemptAccounting, JobView

_Result = tuple[AttemptAccounting, int, int, int]


class _Attempt:
    """What the tally filed of one attempt: its events' positions and their counts."""

    __slots__ = ("positions", "placements", "released", "version", "ticks", "memo")

    def __init__(self) -> None:
        self.positions: list[int] = []
        """Positions (in the tally's history) of the attempt's events, in log order."""
        self.placements = 0
        """Its AttemptScheduled and ComputeHeld: an attempt with none (and no tick) has
        no accounting."""
        self.released = 0
        """Its ComputeReleased: while none, the clock sizes its hold."""
        self.version = 0
        """Changed whenever an event is filed or taken back."""
        self.ticks: list[MeterTick] = []
        self.memo: tuple[tuple[object, ...], _Result] | None = None
        """The inputs of its last computed accounting, and the result."""


class Tally:
    """One job's accounting, kept per event (see the module). ``record`` equals
    ``account(history, ticks, policy, view=view)`` of what was synced and added."""

    __slots__ = (
        "job_id",
        "policy",
        "_inputs",
        "_marks",
        "_events",
        "_ids",
        "_clock",
        "_attempts",
        "_submitted",
        "_ends",
        "_placed",
        "_tick_ids",
        "_tick_clock",
        "_ticks_seen",
    )

    def __init__(self, job_id: str, policy: AccountingPolicy = DEFAULT_POLICY) -> None:
        self.job_id = job_id
        self.policy = policy
        self._inputs: list[Event] = []
        """The history as last synced (what the unchanged prefix is found by)."""
        self._marks: list[int] = []
        """For each input, how many events were filed before it."""
        self._events: list[Event] = []
        """The job-events filed, each id once, in log order."""
        self._ids: set[str] = set()
        self._clock: list[datetime] = []
        """The latest ``occurred_at`` of the events up to each position."""
        self._attempts: dict[int, _Attempt] = {}
        self._submitted: list[int] = []
        """Positions of the JobSubmitted events (the first counts)."""
        self._ends: list[int] = []
        """Positions of the terminal events (the first counts)."""
        self._placed: list[int] = []
        """Positions of the AttemptScheduled events (placed after the end or not)."""
        self._tick_ids: set[str] = set()
        self._tick_clock: datetime | None = None
        self._ticks_seen = 0

    # ----------------------------------------------------------------------- in

    def sync(self, history: Sequence[Event]) -> None:
        """The job's history is now ``history``: what changed since the last sync (every
        event after the longest unchanged prefix) is taken back and filed again."""
        inputs = self._inputs
        history = history if isinstance(history, list) else list(history)
        same = min(len(inputs), len(history))
        if history[:same] != inputs[:same]:  # identical objects compare at C speed
            pairs = zip(history, inputs, strict=False)
            same = next(i for i, (a, b) in enumerate(pairs) if a is not b)
        self._take_back(same)
        for event in islice(history, same, None):
            self._marks.append(len(self._events))
            inputs.append(event)
            if event.event_id not in self._ids and is_job_event(event):
                self._file(event)

    def add_ticks(self, ticks: Iterable[MeterTick]) -> None:
        """Meter ticks (duplicates allowed; other jobs' ticks are ignored)."""
        for tick in ticks:
            if tick.event_id in self._tick_ids or tick.job_id != self.job_id:
                continue
            self._tick_ids.add(tick.event_id)
            self._attempt(tick.attempt).ticks.append(tick)
            if self._tick_clock is None or tick.occurred_at > self._tick_clock:
                self._tick_clock = tick.occurred_at

    def add_new_ticks(self, ticks: Collection[MeterTick]) -> None:
        """The ticks of an append-only sequence after those of it added before (the
        processors' store keeps a job's ticks so)."""
        self.add_ticks(islice(ticks, self._ticks_seen, None))
        self._ticks_seen = len(ticks)

    def _attempt(self, n: int) -> _Attempt:
        found = self._attempts.get(n)
        if found is None:
            found = self._attempts[n] = _Attempt()
        return found

    def _file(self, event: Event) -> None:
        position = len(self._events)
        self._events.append(event)
        self._ids.add(event.event_id)
        clock = self._clock[-1] if self._clock else event.occurred_at
        self._clock.append(max(clock, event.occurred_at))
        own = self._attempt(event.attempt)
        own.positions.append(position)
        own.version += 1
        if isinstance(event, AttemptScheduled | ComputeHeld):
            own.placements += 1
        if isinstance(event, ComputeReleased):
            own.released += 1
        for positions in self._indexes(event):
            positions.append(position)

    def _indexes(self, event: Event) -> list[list[int]]:
        """The position lists ``event`` belongs in (the submissions, the ends, the
        placements)."""
        found = []
        if isinstance(event, JobSubmitted):
            found.append(self._submitted)
        if isinstance(event, TERMINAL_EVENTS):
            found.append(self._ends)
        if isinstance(event, AttemptScheduled):
            found.append(self._placed)
        return found

    def _take_back(self, inputs: int) -> None:
        """Forget every input from the ``inputs``-th on, and what was filed of them."""
        if inputs >= len(self._inputs):
            return
        keep = self._marks[inputs]
        del self._inputs[inputs:], self._marks[inputs:]
        for position in range(len(self._events) - 1, keep - 1, -1):
            event = self._events[position]
            self._ids.discard(event.event_id)
            own = self._attempts[event.attempt]
            own.positions.pop()
            own.version += 1
            own.placements -= isinstance(event, AttemptScheduled | ComputeHeld)
            own.released -= isinstance(event, ComputeReleased)
            for positions in self._indexes(event):
                positions.pop()  # the latest position in each: the lists are in log order
        del self._events[keep:], self._clock[keep:]

    # ----------------------------------------------------------------------- out

    def record(self, view: JobView | None) -> AccountingRecord:
        """The job's accounting record; ``view`` is the job's view as of the synced
        history, as :func:`account` takes it (ignored while no job-event was synced)."""
        if not self._events:
            view = None
        terminal = view is not None and view.status in TERMINAL_STATUSES
        clocks = [c for c in (self._clock[-1] if self._clock else None, self._tick_clock) if c]
        as_of = max(clocks, default=None)
        events = self._events
        submitted = events[self._submitted[0]] if self._submitted else None
        after_end: set[int] = set()
        if self._ends:
            end = self._ends[0]
            after_end = {events[p].attempt for p in self._placed if p > end}
        attempts: list[AttemptAccounting] = []
        held_us = billable_us = credited_us = 0
        for n in sorted(self._attempts):
            own = self._attempts[n]
            if not own.placements and not own.ticks:
                continue
            late = n in after_end
            prepended = submitted is not None and submitted.attempt != n
            key = (
                own.version,
                len(own.ticks),
                terminal,
                None if own.released else as_of,
                late,
                submitted.event_id if prepended and submitted else None,
            )
            if own.memo is None or own.memo[0] != key:
                scope = [events[p] for p in own.positions]
                if prepended and submitted is not None:
                    scope.insert(0, submitted)
                result = _attempt(
                    History(scope, deduplicated=True),
                    own.ticks,
                    n,
                    terminal,
                    as_of,
                    self.policy,
                    late,
                )
                own.memo = (key, result)
            accounting, h, b, c = own.memo[1]
            attempts.append(accounting)
            held_us, billable_us, credited_us = held_us + h, billable_us + b, credited_us + c
        return summarize(
            self.job_id, view, self.policy, attempts, held_us, billable_us, credited_us, as_of
        )
