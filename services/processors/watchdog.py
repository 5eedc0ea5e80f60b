"""The watchdog's pure core: what the current attempt is waiting for, and what is overdue.

:func:`watch_of` folds one job's history (plus the latest heartbeat of each
attempt) into a :class:`Watch` of its current attempt; :func:`overdue` says
which bounded waits expired at ``now``:

- scheduled, not accepted by ``dispatch_deadline`` -> DispatchTimedOut;
- accepted and running, no heartbeat for ``silence_s`` -> AttemptUnresponsive
  with ``lost_deadline = now + lost_after_s``; a newer heartbeat before that ->
  AttemptResponsive; none -> AttemptLost at the deadline;
- process exited, no ComputeReleased within ``finishing_timeout_s`` ->
  FinishingTimedOut.

Every event's id derives from the event that started the wait (the last
heartbeat, the AttemptScheduled, the AttemptUnresponsive, the ProcessExited),
so re-checking after a restart yields the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict

from projections.evidence import attempt_ended
from projections.history import unique
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptAccepted,
    AttemptCancelled,
    AttemptHeartbeat,
    AttemptLost,
    AttemptResponsive,
    AttemptScheduled,
    AttemptUnresponsive,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    DispatchTimedOut,
    Event,
    FinishingTimedOut,
    ProcessExited,
    derived_event_id,
)

PROCESSOR = "watchdog"

ATTEMPT_ENDS: tuple[type[Event], ...] = (
    ComputeReleased,
    AttemptLost,
    DispatchTimedOut,
    FinishingTimedOut,
)
"""After one of these (a stale DispatchTimedOut aside) there is nothing left to watch."""


class _Base(TypedDict):
    job_id: str
    attempt: int
    node_id: str


class _Common(TypedDict):
    job_id: str
    attempt: int
    occurred_at: datetime
    producer: str


@dataclass(frozen=True)
class Thresholds:
    silence_s: float = 30.0
    lost_after_s: float = 60.0
    finishing_timeout_s: float = 300.0
    producer: str = "watchdog"


@dataclass(frozen=True)
class Watch:
    """The current attempt of one job and the wait it is in."""

    job_id: str
    attempt: int
    node_id: str
    phase: str
    """dispatch, running, finishing."""
    scheduled: AttemptScheduled
    last_seen_at: datetime | None = None
    """Latest of acceptance, start and heartbeats (and the watchdog's own rebuild time)."""
    last_seen_id: str = ""
    """Event the current silence is counted from; the AttemptUnresponsive id derives from it."""
    last_heartbeat_at: datetime | None = None
    unresponsive: AttemptUnresponsive | None = None
    """Open uncertainty (not resolved by AttemptResponsive or AttemptLost)."""
    exited: ProcessExited | None = None
    seen_at: datetime | None = None
    """When the event ``last_seen_id`` names happened (``last_seen_at`` may be the floor)."""
    floor: datetime | None = None


def watch_of(
    history: Sequence[Event],
    heartbeats: Mapping[int, AttemptHeartbeat] | None = None,
    floor: datetime | None = None,
) -> Watch | None:
    """The wait of the job's current attempt, or None when nothing is being waited for.

    Args:
        history: the job's job-events (duplicates allowed).
        heartbeats: latest AttemptHeartbeat of each attempt.
        floor: silence is never counted from before this (the time the watchdog
            rebuilt its state, since it does not re-read old heartbeats).
    """
    events = unique(history)
    if any(isinstance(e, TERMINAL_EVENTS) for e in events):
        return None
    scheduled = [e for e in events if isinstance(e, AttemptScheduled)]
    if not scheduled:
        return None
    current = max(scheduled, key=lambda e: e.attempt)
    attempt = current.attempt
    mine = [e for e in events if e.attempt == attempt]
    if attempt_ended(mine, attempt, by=ATTEMPT_ENDS):
        return None
    base = _Base(job_id=current.job_id, attempt=attempt, node_id=current.node_id)
    exited = next((e for e in mine if isinstance(e, ProcessExited)), None)
    if exited is not None:
        return Watch(**base, phase="finishing", scheduled=current, exited=exited)
    alive = [e for e in mine if isinstance(e, AttemptAccepted | ComputeHeld | ContainerStarted)]
    if not alive:
        if any(isinstance(e, AttemptCancelled) for e in mine):
            return None
        return Watch(**base, phase="dispatch", scheduled=current)
    seen = max(alive, key=lambda e: e.occurred_at)
    resolved = {e.causation_id for e in mine if isinstance(e, AttemptResponsive | AttemptLost)}
    open_ = [e for e in mine if isinstance(e, AttemptUnresponsive) and e.event_id not in resolved]
    base_watch = Watch(
        **base,
        phase="running",
        scheduled=current,
        last_seen_at=seen.occurred_at if floor is None else max(seen.occurred_at, floor),
        last_seen_id=seen.event_id,
        unresponsive=open_[-1] if open_ else None,
        seen_at=seen.occurred_at,
        floor=floor,
    )
    return with_heartbeat(base_watch, (heartbeats or {}).get(attempt))


def with_heartbeat(watch: Watch | None, beat: AttemptHeartbeat | None) -> Watch | None:
    """``watch`` (folded from job-events only) updated with the attempt's latest heartbeat.

    Cheap, so the watchdog refolds a job's events only when they change, not on
    every heartbeat.
    """
    if watch is None or beat is None or watch.phase != "running" or beat.attempt != watch.attempt:
        return watch
    update: dict[str, object] = {"last_heartbeat_at": beat.occurred_at}
    if watch.seen_at is None or beat.occurred_at > watch.seen_at:
        floor = watch.floor
        update.update(
            seen_at=beat.occurred_at,
            last_seen_id=beat.event_id,
            last_seen_at=beat.occurred_at if floor is None else max(beat.occurred_at, floor),
        )
    return replace(watch, **update)  # type: ignore[arg-type]


def overdue(watch: Watch | None, now: datetime, thresholds: Thresholds) -> list[Event]:
    """The watchdog events due at ``now`` for ``watch`` (at most one)."""
    if watch is None:
        return []
    common = _Common(
        job_id=watch.job_id, attempt=watch.attempt, occurred_at=now, producer=thresholds.producer
    )
    if watch.phase == "dispatch":
        deadline = watch.scheduled.dispatch_deadline
        if now < deadline:
            return []
        return [
            DispatchTimedOut(
                **common,
                event_id=derived_event_id(watch.scheduled.event_id, PROCESSOR),
                causation_id=watch.scheduled.event_id,
                node_id=watch.node_id,
                deadline=deadline,
            )
        ]
    if watch.phase == "finishing":
        assert watch.exited is not None
        deadline = watch.exited.occurred_at + timedelta(seconds=thresholds.finishing_timeout_s)
        if now < deadline:
            return []
        return [
            FinishingTimedOut(
                **common,
                event_id=derived_event_id(watch.exited.event_id, PROCESSOR),
                causation_id=watch.exited.event_id,
                node_id=watch.node_id,
                deadline=deadline,
            )
        ]
    assert watch.last_seen_at is not None
    pending = watch.unresponsive
    if pending is not None:
        since = pending.last_heartbeat_at
        if watch.last_heartbeat_at is not None and (
            since is None or watch.last_heartbeat_at > since
        ):
            return [
                AttemptResponsive(
                    **common,
                    event_id=derived_event_id(pending.event_id, PROCESSOR, "responsive"),
                    causation_id=pending.event_id,
                    node_id=watch.node_id,
                    silence_s=round(
                        (watch.last_heartbeat_at - (since or pending.occurred_at)).total_seconds(),
                        3,
                    ),
                )
            ]
        if now < pending.lost_deadline:
            return []
        return [
            AttemptLost(
                **common,
                event_id=derived_event_id(pending.event_id, PROCESSOR, "lost"),
                causation_id=pending.event_id,
                node_id=watch.node_id,
                last_heartbeat_at=since,
                deadline=pending.lost_deadline,
            )
        ]
    if now - watch.last_seen_at < timedelta(seconds=thresholds.silence_s):
        return []
    return [
        AttemptUnresponsive(
            **common,
            event_id=derived_event_id(watch.last_seen_id, PROCESSOR, "unresponsive"),
            causation_id=watch.last_seen_id,
            node_id=watch.node_id,
            last_heartbeat_at=watch.last_heartbeat_at or watch.last_seen_at,
            silence_s=thresholds.silence_s,
            lost_deadline=now + timedelta(seconds=thresholds.lost_after_s),
        )
    ]
