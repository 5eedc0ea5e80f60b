"""A job's lifecycle as a timeline: state intervals per lane, the uncertain windows, every event.

Pure: it folds the job's events with the same ``projections.job_state.evolve``
the processors and the sink use, and records the job's and each attempt's
state after every event, so the console draws exactly the states the ledger
implies and never re-implements the lifecycle in JavaScript.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projections.job_state import evolve
from schemas.events import Event
from schemas.views import JobView


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimelineEvent(_Model):
    """One event on the timeline, placed on its lane."""

    seq: int
    event_id: str
    type: str
    attempt: int
    occurred_at: datetime
    job_status: str = Field(description="the job's state once this event was applied")
    attempt_status: str | None = Field(None, description="the event's attempt's state after it")


class Segment(_Model):
    """A stretch of time one state held."""

    state: str
    start: datetime
    end: datetime | None = Field(description="null: the state still holds")


class Lane(_Model):
    """A row of the timeline: the job's states, or one attempt's."""

    key: str = Field(description="`job`, or `attempt-N`")
    label: str
    attempt: int = 0
    node_id: str = ""
    segments: list[Segment]


class Window(_Model):
    """A bounded wait on something uncertain, and how it ended."""

    kind: Literal["lost_contact", "finishing", "backoff"]
    attempt: int
    start: datetime
    end: datetime | None
    deadline: datetime | None = None
    outcome: str = Field(description="recovered, lost, released, timed_out, retried, open")


class Timeline(_Model):
    """A job's history as lanes of state segments, for the console's timeline view."""

    job_id: str
    start: datetime | None
    end: datetime | None = Field(description="the last event's time")
    terminal: bool
    lanes: list[Lane]
    windows: list[Window]
    events: list[TimelineEvent]


def _segments(points: Sequence[tuple[datetime, str]]) -> list[Segment]:
    """Consecutive (time, state) points -> intervals; a repeated state extends the interval."""
    out: list[Segment] = []
    for at, state in points:
        if out and out[-1].state == state:
            continue
        if out:
            out[-1] = out[-1].model_copy(update={"end": at})
        out.append(Segment(state=state, start=at, end=None))
    return out


def timeline(events: Sequence[tuple[int, Event]], terminal_statuses: frozenset[str]) -> Timeline:
    """The timeline of one job's ``(seq, event)`` history, in ledger order."""
    view: JobView | None = None
    rows: list[TimelineEvent] = []
    job_points: list[tuple[datetime, str]] = []
    attempt_points: dict[int, list[tuple[datetime, str]]] = {}
    for seq, event in events:
        view = evolve(view, event)
        attempt = next((a for a in view.attempts if a.attempt == event.attempt), None)
        rows.append(
            TimelineEvent(
                seq=seq,
                event_id=event.event_id,
                type=event.type,
                attempt=event.attempt,
                occurred_at=event.occurred_at,
                job_status=view.status,
                attempt_status=attempt.status if attempt else None,
            )
        )
        job_points.append((event.occurred_at, view.status))
        for a in view.attempts:
            points = attempt_points.setdefault(a.attempt, [])
            if a.attempt == event.attempt or not points:
                points.append((event.occurred_at, a.status))
    if view is None:
        return Timeline(job_id="", start=None, end=None, terminal=False, lanes=[], windows=[],
                        events=[])  # fmt: skip
    terminal = view.status in terminal_statuses
    lanes = [Lane(key="job", label="job", segments=_close(_segments(job_points), terminal))]
    for a in view.attempts:
        segments = _segments(attempt_points.get(a.attempt, []))
        done = a.status in ("ended", "lost", "superseded") or terminal
        lanes.append(
            Lane(
                key=f"attempt-{a.attempt}",
                label=f"attempt {a.attempt}",
                attempt=a.attempt,
                node_id=a.node_id,
                segments=_close(segments, done),
            )
        )
    return Timeline(
        job_id=view.job_id,
        start=rows[0].occurred_at,
        end=max(r.occurred_at for r in rows),
        terminal=terminal,
        lanes=lanes,
        windows=_windows(rows, view.deadline),
        events=rows,
    )


def _close(segments: list[Segment], done: bool) -> list[Segment]:
    """A finished lane's last state is a point (end = start), not an open interval."""
    if done and segments and segments[-1].end is None:
        segments[-1] = segments[-1].model_copy(update={"end": segments[-1].start})
    return segments


WINDOW_KINDS = {"lost_contact": "lost_contact", "finishing": "finishing", "retrying": "backoff"}
"""Job states that are a bounded wait, and the window each is drawn as."""


def _windows(rows: Sequence[TimelineEvent], deadline: datetime | None) -> list[Window]:
    """Lost-contact, finishing and retry-backoff windows, read off the job's state changes.

    A window's outcome is what was decided inside it (the watchdog's AttemptLost, a
    FinishingTimedOut), not the event that happened to change the state next.
    """
    out: list[Window] = []
    current: TimelineEvent | None = None
    decided: set[str] = set()
    for row in rows:
        if current is not None and row.job_status != current.job_status:
            out.append(_window(current, row.occurred_at, _outcome(current.job_status, decided)))
            current = None
        if current is None and row.job_status in WINDOW_KINDS:
            current, decided = row, set()
        if current is not None:
            decided.add(row.type)
    if current is not None:
        out.append(_window(current, None, "open", deadline))
    return out


def _window(
    started: TimelineEvent, end: datetime | None, outcome: str, deadline: datetime | None = None
) -> Window:
    return Window(
        kind=WINDOW_KINDS[started.job_status],
        attempt=started.attempt,
        start=started.occurred_at,
        end=end,
        deadline=deadline,
        outcome=outcome,
    )


def _outcome(kind: str, decided: set[str]) -> str:
    if kind == "lost_contact":
        return "lost" if "AttemptLost" in decided else "recovered"
    if kind == "finishing":
        return "timed_out" if "FinishingTimedOut" in decided else "released"
    return "retried"
