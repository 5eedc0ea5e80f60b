"""Meter ticks of one attempt: pure arithmetic on the held interval.

Tick ``k`` covers ``[held_at + k*I, held_at + (k+1)*I)``; its index is a
function of time alone, so a restarted agent re-emits the same ticks with the
same indices (and the same event ids). The last tick is partial and ``final``:
it ends at the release time, so the ticks of an attempt sum to exactly
``(released_at - held_at) * gpu_count``. Time is handled in integer microseconds,
the resolution of ``occurred_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.events import AttemptScheduled, MeterTick
from services.agent.facts import agent_fact


@dataclass(frozen=True)
class Tick:
    """One metered interval of an attempt, before it becomes a MeterTick."""

    index: int
    interval_start: datetime
    interval_s: float
    gpu_seconds: float
    final: bool = False


def tick_fact(
    tick: Tick, scheduled: AttemptScheduled, node_id: str, gpu_model: str, at: datetime
) -> MeterTick:
    """The MeterTick fact of ``tick`` of the attempt ``scheduled`` placed on ``node_id``
    (the agent's and the simulator's alike), reported ``at``."""
    return agent_fact(
        MeterTick,
        scheduled,
        node_id,
        at,
        node_id=node_id,
        tick_index=tick.index,
        interval_start=tick.interval_start,
        interval_s=tick.interval_s,
        gpu_count=scheduled.gpu_count,
        gpu_model=gpu_model,
        gpu_seconds=tick.gpu_seconds,
        final=tick.final,
    )


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _tick(held_at: datetime, index: int, length_us: int, gpu_count: int, final: bool) -> Tick:
    return Tick(
        index=index,
        interval_start=held_at + timedelta(microseconds=index * length_us),
        interval_s=length_us / 1_000_000,
        gpu_seconds=length_us * gpu_count / 1_000_000,
        final=final,
    )


def due_ticks(
    held_at: datetime, now: datetime, interval_s: float, gpu_count: int, next_index: int
) -> list[Tick]:
    """Full ticks from ``next_index`` whose interval has ended by ``now``."""
    step = round(interval_s * 1_000_000)
    complete = max(0, _micros(now - held_at)) // step
    return [_tick(held_at, k, step, gpu_count, False) for k in range(next_index, complete)]


def final_ticks(
    held_at: datetime, released_at: datetime, interval_s: float, gpu_count: int, next_index: int
) -> list[Tick]:
    """The full ticks not yet emitted, then the final partial tick ending at ``released_at``.

    The final tick always exists (possibly 0 s long when the release falls on a
    tick boundary), so a reader knows the attempt's metering is closed.
    """
    step = round(interval_s * 1_000_000)
    held_us = max(0, _micros(released_at - held_at))
    complete = held_us // step
    ticks = [_tick(held_at, k, step, gpu_count, False) for k in range(next_index, complete)]
    last = max(complete, next_index)
    rest_us = max(0, held_us - last * step)
    ticks.append(
        Tick(
            index=last,
            interval_start=held_at + timedelta(microseconds=last * step),
            interval_s=rest_us / 1_000_000,
            gpu_seconds=rest_us * gpu_count / 1_000_000,
            final=True,
        )
    )
    return ticks


def next_boundary(held_at: datetime, index: int, interval_s: float) -> datetime:
    """When tick ``index`` ends."""
    return held_at + timedelta(microseconds=(index + 1) * round(interval_s * 1_000_000))
