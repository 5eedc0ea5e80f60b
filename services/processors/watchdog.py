"""The watchdog's pure core: what the current attempt is waiting for, and what is overdue.

:func:`watch_of` folds one job's history (plus the latest heartbeat of each
attempt) into a :class:`Watch` of its current attempt; :func:`overdue` says
which bounded waits expired at ``now``:

- scheduled, not accepted by ``dispatch_deadline`` -> DispatchTimedOut;
- accepted and running, no heartbeat heard for ``silence_s`` of *audible* time
  -> AttemptUnresponsive (``lost_deadline`` = when it would be lost if the
  watchdog hears everything from now on); a newer heartbeat before that ->
  AttemptResponsive; none for ``lost_after_s`` more audible time -> AttemptLost;
- process exited, no ComputeReleased within ``finishing_timeout_s`` ->
  FinishingTimedOut.

Silence is judged on the receiving side (docs/watchdog.md, "Silence"). Every
sign of life counts from when the platform *heard* it (the broker's append time
on the heartbeats topic, else the worker's receive time), never from the
agent's ``occurred_at``, so an agent's clock does not move its deadlines. And
only time during which the watchdog could have heard counts: :class:`Hearing`
keeps the intervals in which it could not (broker unreachable, its consumer not
fetching, its lag on the heartbeats topic above ``watchdog_lag_threshold_s``),
and every deadline is pushed back by the deaf time inside it. While deaf, no
verdict is given at all.

Every event's id derives from the event that started the wait (the last
heartbeat, the AttemptScheduled, the AttemptUnresponsive, the ProcessExited),
so re-checking after a restart yields the same ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict

from projections.history import attempt_ended, unique
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
    ContainerStarted,
    DispatchTimedOut,
    Event,
    FinishingTimedOut,
    ProcessExited,
    Role,
    with_role,
)

PROCESSOR = "watchdog"

ATTEMPT_ENDS = with_role(Role.ENDS_ATTEMPT)
"""After one of these (a stale DispatchTimedOut aside) there is nothing left to watch."""


class _Base(TypedDict):
    job_id: str
    attempt: int
    node_id: str


@dataclass(frozen=True)
class Thresholds:
    """The watchdog's bounds: silence before unresponsive, then before lost, and the finishing
    timeout."""

    silence_s: float = 30.0
    lost_after_s: float = 60.0
    finishing_timeout_s: float = 300.0
    producer: str = "watchdog"


Deaf = tuple[datetime, datetime]
"""[start, end] during which the watchdog could not hear."""


@dataclass(frozen=True)
class Hearing:
    """What the watchdog could hear, from its own probes (pure: the worker passes times in).

    The worker probes every tick and reports ``heard_through`` (H): the latest
    probe time at which everything the broker held on the watchdog's heartbeat
    partitions has since been processed. Deadlines are judged at H, never past
    it: a heartbeat may be waiting, unread, for any time after H. A jump of H by
    more than ``lag_threshold_s`` is deaf time (the broker was unreachable, the
    consumer did not fetch, or the worker stalled or fell that far behind): it
    is taken out of every silence that spans it. While ``now`` is more than
    ``lag_threshold_s`` past H the watchdog is deaf and gives no verdict at all.

    A hearing that never probed (:data:`ALWAYS`) hears everything at once: H is
    ``now`` and nothing is deaf (the pure tests, replays).
    """

    lag_threshold_s: float = 5.0
    heard: datetime | None = None
    """H, the latest ``heard_through`` reported (None: no probe succeeded yet)."""
    deaf: tuple[Deaf, ...] = ()
    """Deaf intervals, oldest first, disjoint."""
    probing: bool = False
    keep: int = 256
    """Intervals kept; older ones are out of reach of any wait in practice."""

    def through(self, now: datetime) -> datetime | None:
        """H: the time up to which every heartbeat has been heard (None: none yet)."""
        return now if not self.probing else self.heard

    def is_deaf(self, now: datetime) -> bool:
        """Whether nothing was heard for more than ``lag_threshold_s``: silence proves nothing."""
        if not self.probing:
            return False
        return self.heard is None or (now - self.heard).total_seconds() > self.lag_threshold_s

    def observe(self, heard_through: datetime | None) -> Hearing:
        """The hearing after a probe reported ``heard_through`` (unchanged H: None or older)."""
        previous = self.heard
        if heard_through is None or (previous is not None and heard_through <= previous):
            return replace(self, probing=True)
        deaf = list(self.deaf)
        if previous is not None and (
            (heard_through - previous).total_seconds() > self.lag_threshold_s
        ):
            start = previous
            if deaf and deaf[-1][1] >= start:
                start = deaf.pop()[0]  # it continues the last interval
            deaf.append((start, heard_through))
        return replace(self, heard=heard_through, deaf=tuple(deaf[-self.keep :]), probing=True)

    def due(self, since: datetime, seconds: float) -> datetime:
        """The instant at which ``seconds`` of audible time have passed since ``since``:
        ``due - since - (deaf time inside [since, due]) = seconds``."""
        remaining = timedelta(seconds=seconds)
        at = since
        for start, end in self.deaf:
            if end <= at:
                continue
            if start > at:
                if start - at >= remaining:
                    return at + remaining
                remaining -= start - at
            at = end
        return at + remaining

    def audible_s(self, since: datetime, until: datetime) -> float:
        """Seconds in [since, until] the watchdog could hear (the span minus deaf time)."""
        total = (until - since).total_seconds()
        for start, end in self.deaf:
            lo, hi = max(start, since), min(end, until)
            if hi > lo:
                total -= (hi - lo).total_seconds()
        return max(0.0, total)


ALWAYS = Hearing()
"""A watchdog that always hears (pure tests, replays): deadlines are plain sums."""


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
    """When the latest sign of life (acceptance, start, heartbeat) was *heard*, floored at
    the watchdog's rebuild time."""
    last_seen: Event | None = None
    """The event the current silence is counted from; the AttemptUnresponsive derives from it."""
    last_heartbeat_at: datetime | None = None
    """The latest heartbeat's ``occurred_at`` (the agent's clock: reported, never timed)."""
    unresponsive: AttemptUnresponsive | None = None
    """Open uncertainty (not resolved by AttemptResponsive or AttemptLost)."""
    exited: ProcessExited | None = None
    seen_at: datetime | None = None
    """When ``last_seen`` was heard (``last_seen_at`` may be the floor)."""
    floor: datetime | None = None

    @property
    def last_seen_id(self) -> str:
        """The id of the last heartbeat heard, or '' when none was."""
        return self.last_seen.event_id if self.last_seen is not None else ""


def _heard_at(event: Event, heard: Mapping[str, datetime] | None) -> datetime:
    """When the platform heard ``event``; its own ``occurred_at`` when nobody recorded it."""
    if heard is not None:
        found = heard.get(event.event_id)
        if found is not None:
            return found
    return event.occurred_at


def watch_of(
    history: Sequence[Event],
    heartbeats: Mapping[int, AttemptHeartbeat] | None = None,
    floor: datetime | None = None,
    heard: Mapping[str, datetime] | None = None,
) -> Watch | None:
    """The wait of the job's current attempt, or None when nothing is being waited for.

    Args:
        history: the job's job-events (duplicates allowed).
        heartbeats: latest AttemptHeartbeat of each attempt.
        floor: silence is never counted from before this (the time the watchdog
            rebuilt its state, since it does not re-read old heartbeats).
        heard: event id -> when the platform heard it (job-events and the
            heartbeats); an event missing here counts from its ``occurred_at``.
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
    seen = max(alive, key=lambda e: _heard_at(e, heard))
    seen_at = _heard_at(seen, heard)
    resolved = {e.causation_id for e in mine if isinstance(e, AttemptResponsive | AttemptLost)}
    open_ = [e for e in mine if isinstance(e, AttemptUnresponsive) and e.event_id not in resolved]
    base_watch = Watch(
        **base,
        phase="running",
        scheduled=current,
        last_seen_at=seen_at if floor is None else max(seen_at, floor),
        last_seen=seen,
        unresponsive=open_[-1] if open_ else None,
        seen_at=seen_at,
        floor=floor,
    )
    beat = (heartbeats or {}).get(attempt)
    return with_heartbeat(base_watch, beat, _heard_at(beat, heard) if beat else None)


def with_heartbeat(
    watch: Watch | None, beat: AttemptHeartbeat | None, heard_at: datetime | None = None
) -> Watch | None:
    """``watch`` (folded from job-events only) updated with the attempt's latest heartbeat,
    heard at ``heard_at`` (its ``occurred_at`` when not given).

    Cheap, so the watchdog refolds a job's events only when they change, not on
    every heartbeat.
    """
    if watch is None or beat is None or watch.phase != "running" or beat.attempt != watch.attempt:
        return watch
    at = heard_at or beat.occurred_at
    update: dict[str, object] = {"last_heartbeat_at": beat.occurred_at}
    if watch.seen_at is None or at > watch.seen_at:
        floor = watch.floor
        update.update(
            seen_at=at,
            last_seen=beat,
            last_seen_at=at if floor is None else max(at, floor),
        )
    return replace(watch, **update)  # type: ignore[arg-type]


def overdue(
    watch: Watch | None, now: datetime, thresholds: Thresholds, hearing: Hearing = ALWAYS
) -> list[Event]:
    """The watchdog events due at ``now`` for ``watch`` (at most one).

    ``hearing`` says when the watchdog could hear: silence and the lost deadline
    count only audible time up to what it has heard through, and nothing is due
    while it is deaf.
    """
    if watch is None or hearing.is_deaf(now):
        return []
    through = hearing.through(now)
    if through is None:
        return []
    # Each verdict derives from the event that started the wait and occurs now.
    verdict: dict[str, object] = {"occurred_at": now, "producer": thresholds.producer}
    if watch.phase == "dispatch":
        deadline = watch.scheduled.dispatch_deadline
        if now < deadline:
            return []
        return [
            DispatchTimedOut.derived(
                watch.scheduled, PROCESSOR, **verdict, node_id=watch.node_id, deadline=deadline
            )
        ]
    if watch.phase == "finishing":
        assert watch.exited is not None
        deadline = watch.exited.occurred_at + timedelta(seconds=thresholds.finishing_timeout_s)
        if now < deadline:
            return []
        return [
            FinishingTimedOut.derived(
                watch.exited, PROCESSOR, **verdict, node_id=watch.node_id, deadline=deadline
            )
        ]
    assert watch.last_seen_at is not None and watch.last_seen is not None
    if watch.unresponsive is not None:
        return _after_unresponsive(watch, watch.unresponsive, now, through, hearing, verdict)
    due = hearing.due(watch.last_seen_at, thresholds.silence_s)
    if through < due:
        return []
    return [
        AttemptUnresponsive.derived(
            watch.last_seen,
            PROCESSOR,
            "unresponsive",
            **verdict,
            node_id=watch.node_id,
            last_heartbeat_at=watch.last_heartbeat_at or watch.last_seen_at,
            silence_s=thresholds.silence_s,
            lost_deadline=now + timedelta(seconds=thresholds.lost_after_s),
        )
    ]


def _after_unresponsive(
    watch: Watch,
    pending: AttemptUnresponsive,
    now: datetime,
    through: datetime,
    hearing: Hearing,
    verdict: dict[str, object],
) -> list[Event]:
    """What is due for an attempt declared unresponsive: responsive again on a newer sign
    of life, lost once the further silence the verdict allowed has passed, else nothing."""
    if _alive_since(watch, pending):
        heard_after = (watch.seen_at or now) - pending.occurred_at
        return [
            AttemptResponsive.derived(
                pending,
                PROCESSOR,
                "responsive",
                **verdict,
                node_id=watch.node_id,
                silence_s=round(max(0.0, heard_after.total_seconds()) + pending.silence_s, 3),
            )
        ]
    # The further silence allowed is the one recorded in the verdict, counted from it
    # (or from the watchdog's rebuild: it could not hear while it was down).
    start = pending.occurred_at
    if watch.floor is not None:
        start = max(start, watch.floor)
    lost_after_s = (pending.lost_deadline - pending.occurred_at).total_seconds()
    due = hearing.due(start, lost_after_s)
    if through < due:
        return []
    return [
        AttemptLost.derived(
            pending,
            PROCESSOR,
            "lost",
            **verdict,
            node_id=watch.node_id,
            last_heartbeat_at=pending.last_heartbeat_at,
            deadline=due,
        )
    ]


def _alive_since(watch: Watch, pending: AttemptUnresponsive) -> bool:
    """A sign of life newer than the one the verdict counted from: a heartbeat the agent
    sent later (same clock, so comparable), or anything heard after the verdict itself."""
    if watch.last_seen_id == pending.causation_id:
        return False
    since = pending.last_heartbeat_at
    newer_beat = watch.last_heartbeat_at is not None and (
        since is None or watch.last_heartbeat_at > since
    )
    heard_after = watch.seen_at is not None and watch.seen_at > pending.occurred_at
    return newer_beat or heard_after
