"""Small queries over one job's event history, shared by the reducers and deciders.

A history is a list of events in the order they were read from the job's
partition. It may hold duplicates (at-least-once delivery), so every query here
looks at the first occurrence of each ``event_id`` only.

A :class:`History` is such a list deduplicated once, with its ``of_type`` /
``first`` / ``last`` answers indexed on first use. The deciders ask dozens of
those per decision (the classifier, the evidence gatherer, ``account``); on a
plain list each one re-deduplicates the whole history, on a History each is a
dictionary look-up after the first. Every function here takes either; the
entry points (``react``, ``gather``, ``account``) wrap their input once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, overload

from schemas.events import (
    EVENT_TYPES,
    AttemptAccepted,
    AttemptCancelled,
    AttemptLost,
    AttemptScheduled,
    ComputeHeld,
    ComputeReleased,
    DispatchTimedOut,
    Event,
    FinishingTimedOut,
    JobSubmitted,
    NoCapacity,
    OutputFailed,
    OutputStored,
    ProcessExited,
    Role,
    with_role,
)
from schemas.spec import JobSpec

E = TypeVar("E", bound=Event)

ENDING_EVENTS = with_role(Role.TRIGGER)
"""Events after which an unsuccessful attempt is classified (the classifier's triggers)."""

STREAM_EVENTS: tuple[type[Event], ...] = tuple(
    cls for cls in EVENT_TYPES.values() if cls.TOPIC != Event.TOPIC or Role.FENCE in cls.ROLES
)
"""Per-attempt streams, node events and the price catalog (the types on a topic other
than job-events) and the schedulers' fence markers (on job-events, but no job's):
ignored by the job folds."""


def is_job_event(event: Event) -> bool:
    """True for lifecycle facts and decisions (``gridledger.job-events``)."""
    return not isinstance(event, STREAM_EVENTS)


class History(Sequence[Event]):
    """One job's events, each ``event_id`` once (its first occurrence), in log order.

    Immutable. ``of_type`` / ``first`` / ``last`` are computed once per (class,
    attempt) and kept; a slice is a History again (a prefix of a deduplicated
    history is deduplicated). Build one with :meth:`of`, which returns a History
    unchanged, so passing one down a call chain costs nothing.
    """

    __slots__ = ("_events", "_positions", "_found", "_types", "_triggers")

    def __init__(self, events: Iterable[Event] = (), *, deduplicated: bool = False) -> None:
        """``deduplicated``: the caller knows every id in ``events`` is unique (a slice
        of a History), so they are kept as they are."""
        if isinstance(events, History):
            kept: tuple[Event, ...] = events.events
        elif deduplicated:
            kept = tuple(events)
        else:
            seen: set[str] = set()
            first_seen: list[Event] = []
            for event in events:
                if event.event_id not in seen:
                    seen.add(event.event_id)
                    first_seen.append(event)
            kept = tuple(first_seen)
        self._events = kept
        self._positions: dict[str, int] | None = None
        self._found: dict[tuple[type[Event], int | None], list[Event]] = {}
        self._types: dict[type[Event], list[Event]] | None = None
        """The events by their exact class, made on the first query (one pass)."""
        self._triggers: dict[int, Event | None] = {}

    @classmethod
    def of(cls, events: Iterable[Event]) -> History:
        """``events`` as a History (itself when it is one already)."""
        return events if isinstance(events, History) else cls(events)

    @property
    def events(self) -> tuple[Event, ...]:
        """The events, each id once, in log order."""
        return self._events

    def __len__(self) -> int:
        return len(self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> History: ...

    def __getitem__(self, index: int | slice) -> Event | History:
        if isinstance(index, slice):
            return History(self._events[index], deduplicated=True)
        return self._events[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    def __eq__(self, other: object) -> bool:
        """Equal to a History or a list/tuple holding the same events in the same order."""
        if isinstance(other, History):
            return self._events == other.events
        if isinstance(other, list | tuple):
            return list(self._events) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so unhashable like them

    def __repr__(self) -> str:
        return f"History({list(self._events)!r})"

    def position(self, event_id: str) -> int | None:
        """Where the event with ``event_id`` is, or None."""
        if self._positions is None:
            self._positions = {e.event_id: i for i, e in enumerate(self._events)}
        return self._positions.get(event_id)

    def index(self, value: object, start: int = 0, stop: int | None = None) -> int:
        """Position of ``value`` (by its ``event_id``: ids are unique here)."""
        found = self.position(value.event_id) if isinstance(value, Event) else None
        if found is None or found < start or (stop is not None and found >= stop):
            raise ValueError(f"{value!r} is not in the history")
        return found

    def upto(self, event_id: str) -> History:
        """The history up to and including the event ``event_id`` (all of it when absent)."""
        found = self.position(event_id)
        return self if found is None else self[: found + 1]

    def of_type(self, cls: type[E], attempt: int | None = None) -> list[E]:
        """Every event of ``cls`` (of ``attempt`` only, unless None), in log order."""
        key = (cls, attempt)
        found = self._found.get(key)
        if found is None:
            if attempt is None and not cls.__subclasses__():  # a leaf: its exact class
                if self._types is None:
                    self._types = {}
                    for e in self._events:
                        self._types.setdefault(type(e), []).append(e)
                found = self._types.get(cls, [])
            elif attempt is None:
                found = [e for e in self._events if isinstance(e, cls)]
            else:
                found = [e for e in self.of_type(cls) if e.attempt == attempt]
            self._found[key] = found
        return found  # type: ignore[return-value]

    # ----------------------------------------------------------------------- queries

    def first(self, cls: type[E], attempt: int | None = None) -> E | None:
        """The first event of ``cls`` (of ``attempt``), or None."""
        found = self.of_type(cls, attempt)
        return found[0] if found else None

    def last(self, cls: type[E], attempt: int | None = None) -> E | None:
        """The last event of ``cls`` (of ``attempt``), or None."""
        found = self.of_type(cls, attempt)
        return found[-1] if found else None

    @property
    def spec(self) -> JobSpec | None:
        """The submitted spec, or None when JobSubmitted is not in the history."""
        submitted = self.first(JobSubmitted)
        return submitted.spec if submitted else None

    def missing_required_outputs(self, attempt: int) -> list[str]:
        """Required outputs of the spec the attempt did not store (nor report refused or
        failed).

        An output the agent never reported at all counts as missing: "all required
        outputs stored" is what a clean success means, not "no failure reported".
        """
        spec = self.spec
        failures = self.of_type(OutputFailed, attempt)
        stored = {e.path for e in self.of_type(OutputStored, attempt)}
        reported = {e.path for e in failures if e.reason != "missing"}
        missing = [
            o.path
            for o in (spec.outputs if spec else [])
            if o.required and o.path not in stored and o.path not in reported
        ]
        # An OutputFailed(missing) for a path the spec does not know still counts if marked
        # required.
        for e in failures:
            if (
                e.reason == "missing"
                and e.required
                and e.path not in missing
                and e.path not in stored
            ):
                missing.append(e.path)
        return missing

    def failed_stores(self, attempt: int) -> list[OutputFailed]:
        """Outputs the attempt produced but could not store (the artifact store failed)."""
        return [e for e in self.of_type(OutputFailed, attempt) if e.reason == "store_failed"]

    def refused_outputs(self, attempt: int, required: bool) -> list[OutputFailed]:
        """Outputs and checkpoints of the attempt not stored because of what the job wrote
        or declared (a link, a special file, a folder, a size cap: every reason but
        ``missing`` and ``store_failed``), the required ones or the optional ones."""
        return [
            e
            for e in self.of_type(OutputFailed, attempt)
            if e.reason not in ("missing", "store_failed") and e.required == required
        ]

    def is_clean_success(self, attempt: int) -> bool:
        """The attempt's process exited 0, it was not stopped by gridledger, and every
        required output is stored: what JobSucceeded means."""
        exited = self.last(ProcessExited, attempt)
        released = self.last(ComputeReleased, attempt)
        return (
            exited is not None
            and exited.exit_code == 0
            and not exited.oom_killed
            and not exited.runtime_exceeded
            # A process that handles SIGTERM exits 0: stopped by a cancel is not a success.
            and (released is None or released.reason not in ("cancelled", "agent_shutdown"))
            and self.first(AttemptCancelled, attempt) is None
            and not self.missing_required_outputs(attempt)
            and not self.failed_stores(attempt)
            and not self.refused_outputs(attempt, required=True)
            and not self.refused_outputs(attempt, required=False)
        )

    def endings(self, attempt: int) -> Iterator[Event]:
        """The events that end ``attempt``, in log order, without the stale ones.

        A DispatchTimedOut after the node accepted the attempt, or a NoCapacity after
        the attempt was placed, is a stale watchdog/scheduler fact (written by one that
        had not read the acceptance or placement yet) and ends nothing: the attempt runs
        on, so the watchdog keeps watching it and a cancel must still reach its node.
        """
        accepted = placed = False
        for e in self._events:
            if e.attempt != attempt:
                continue
            if isinstance(e, AttemptAccepted | ComputeHeld):
                accepted = True
            elif isinstance(e, AttemptScheduled):
                placed = True
            elif (
                isinstance(e, DispatchTimedOut) and accepted or isinstance(e, NoCapacity) and placed
            ):
                continue
            if isinstance(e, ENDING_EVENTS):
                yield e

    def trigger_for(self, attempt: int) -> Event | None:
        """The event that ended ``attempt`` and on which the classifier acts, or None.

        The first of :meth:`endings` counts; later ones (a late ComputeReleased from a
        node already declared lost) change nothing.
        """
        if attempt not in self._triggers:
            self._triggers[attempt] = next(self.endings(attempt), None)
        return self._triggers[attempt]

    def late_verdict(self, attempt: int) -> Event | None:
        """The watchdog's verdict (AttemptLost or FinishingTimedOut) that ended ``attempt``
        before its node released it, or None. Facts the node sends after it are late
        facts."""
        verdict = self.trigger_for(attempt)
        return verdict if isinstance(verdict, AttemptLost | FinishingTimedOut) else None

    def attempt_ended(self, attempt: int, by: tuple[type[Event], ...]) -> bool:
        """True once one of :meth:`endings` of ``attempt`` is of a type in ``by``."""
        return any(isinstance(e, by) for e in self.endings(attempt))


def unique(events: Iterable[Event]) -> Sequence[Event]:
    """The events in order with every repeated ``event_id`` after the first dropped."""
    return History.of(events)


# The queries of a plain sequence of events: each wraps it in a History once (nothing when
# it is one) and asks the History.


def of_type(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> list[E]:
    """Every (deduplicated) event of ``cls``, optionally of one attempt only."""
    return History.of(history).of_type(cls, attempt)


def first(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> E | None:
    """:meth:`History.first`."""
    return History.of(history).first(cls, attempt)


def last(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> E | None:
    """:meth:`History.last`."""
    return History.of(history).last(cls, attempt)


def spec_of(history: Iterable[Event]) -> JobSpec | None:
    """:attr:`History.spec`."""
    return History.of(history).spec


def missing_required_outputs(history: Iterable[Event], attempt: int) -> list[str]:
    """:meth:`History.missing_required_outputs`."""
    return History.of(history).missing_required_outputs(attempt)


def is_clean_success(history: Iterable[Event], attempt: int) -> bool:
    """:meth:`History.is_clean_success`."""
    return History.of(history).is_clean_success(attempt)


def trigger_for(history: Iterable[Event], attempt: int) -> Event | None:
    """:meth:`History.trigger_for`."""
    return History.of(history).trigger_for(attempt)


def late_verdict(history: Iterable[Event], attempt: int) -> Event | None:
    """:meth:`History.late_verdict`."""
    return History.of(history).late_verdict(attempt)


def attempt_ended(history: Iterable[Event], attempt: int, by: tuple[type[Event], ...]) -> bool:
    """:meth:`History.attempt_ended`."""
    return History.of(history).attempt_ended(attempt, by)
