"""Small queries over one job's event history, shared by the reducers and deciders.

A history is a list of events in the order they were read from the job's
partition. It may hold duplicates (at-least-once delivery), so every query here
looks at the first occurrence of each ``event_id`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from schemas.events import (
    AttemptCancelled,
    AttemptHeartbeat,
    ComputeReleased,
    Event,
    JobSubmitted,
    LogChunk,
    MeterTick,
    NodeEvent,
    OutputFailed,
    OutputStored,
    ProcessExited,
)
from schemas.spec import JobSpec

E = TypeVar("E", bound=Event)

STREAM_EVENTS: tuple[type[Event], ...] = (AttemptHeartbeat, LogChunk, MeterTick, NodeEvent)
"""Per-attempt streams and node events: not job-events, ignored by the job folds."""


def is_job_event(event: Event) -> bool:
    """True for lifecycle facts and decisions (``gridledger.job-events``)."""
    return not isinstance(event, STREAM_EVENTS)


def unique(events: Iterable[Event]) -> list[Event]:
    """The events in order with every repeated ``event_id`` after the first dropped."""
    seen: set[str] = set()
    out: list[Event] = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            out.append(event)
    return out


def of_type(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> list[E]:
    """Every (deduplicated) event of ``cls``, optionally of one attempt only."""
    return [
        e
        for e in unique(history)
        if isinstance(e, cls) and (attempt is None or e.attempt == attempt)
    ]


def first(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> E | None:
    """The first event of ``cls`` (of ``attempt``), or None."""
    found = of_type(history, cls, attempt)
    return found[0] if found else None


def last(history: Iterable[Event], cls: type[E], attempt: int | None = None) -> E | None:
    """The last event of ``cls`` (of ``attempt``), or None."""
    found = of_type(history, cls, attempt)
    return found[-1] if found else None


def spec_of(history: Sequence[Event]) -> JobSpec | None:
    """The submitted spec, or None when JobSubmitted is not in the history."""
    submitted = first(history, JobSubmitted)
    return submitted.spec if submitted else None


def missing_required_outputs(history: Sequence[Event], attempt: int) -> list[str]:
    """Required outputs of the spec the attempt did not store (and whose store did not fail).

    An output the agent never reported at all counts as missing: "all required
    outputs stored" is what a clean success means, not "no failure reported".
    """
    spec = spec_of(history)
    stored = {e.path for e in of_type(history, OutputStored, attempt)}
    store_failed = {
        e.path for e in of_type(history, OutputFailed, attempt) if e.reason == "store_failed"
    }
    missing = [
        o.path
        for o in (spec.outputs if spec else [])
        if o.required and o.path not in stored and o.path not in store_failed
    ]
    # An OutputFailed(missing) for a path the spec does not know still counts if marked required.
    for e in of_type(history, OutputFailed, attempt):
        if e.reason == "missing" and e.required and e.path not in missing and e.path not in stored:
            missing.append(e.path)
    return missing


def failed_stores(history: Sequence[Event], attempt: int) -> list[OutputFailed]:
    """Outputs the attempt produced but could not store (the artifact store failed)."""
    return [e for e in of_type(history, OutputFailed, attempt) if e.reason == "store_failed"]


def is_clean_success(history: Sequence[Event], attempt: int) -> bool:
    """The attempt's process exited 0, it was not stopped by gridledger, and every
    required output is stored: what JobSucceeded means."""
    exited = last(history, ProcessExited, attempt)
    released = last(history, ComputeReleased, attempt)
    return (
        exited is not None
        and exited.exit_code == 0
        and not exited.oom_killed
        and not exited.runtime_exceeded
        # A process that handles SIGTERM exits 0: stopped by a cancel is still not a success.
        and (released is None or released.reason not in ("cancelled", "agent_shutdown"))
        and first(history, AttemptCancelled, attempt) is None
        and not missing_required_outputs(history, attempt)
        and not failed_stores(history, attempt)
    )
