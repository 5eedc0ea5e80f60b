"""Usage by period: a job's accounting record split exactly at hour, day or month boundaries.

An invoice covers an hour, a day or a month (UTC); a job that runs across a boundary
has one accounting record. :func:`split` cuts each attempt of that record into
pieces, one per period it touched:

* **held, GPU, billable and credited** time come from the attempt's held interval
  (``held_from`` to ``released_at``; to the record's ``updated_at`` while the GPUs are
  still held), exactly as :mod:`projections.accounting` counted it, in whole
  microseconds. Each attempt's GPU time is all billable or all credited, so its pieces
  are too. The pieces of a job sum *exactly* to its record (integers, no rounding);
* **metered** time comes from the attempt's meter ticks in the window the record
  counted (``uncounted_ticks`` excluded, each tick index once). A tick is rounded to
  whole microseconds of GPU time and spread over the periods its interval covers in
  proportion to time, the remainders going by largest fraction, so the pieces sum
  exactly to the ticks' microseconds.

Hours nest in days and days in months (all UTC), so the read model stores hourly
pieces and a day or a month is the sum of its hours. What a piece is grouped by
(:data:`DIMENSIONS`) and the id of an exported line (:func:`line_id`) are defined
here too, so every export groups and names lines one way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from schemas.events import MeterTick
from schemas.spec import LABEL_KEY_RE, LABEL_KEY_RULE
from schemas.views import AccountingRecord, AttemptAccounting

PERIODS = ("hour", "day", "month")
"""The periods usage is split and summed by (UTC)."""

_US = timedelta(microseconds=1)

DIMENSIONS = ("tenant", "gpu_model", "provider", "region")
"""What usage can be grouped by, besides ``label:<key>`` (the value of one label)."""
LABEL_DIMENSION = "label:"
MAX_GROUP_BY = 8


def period_start(moment: datetime, period: str) -> datetime:
    """The start of the UTC ``period`` (hour, day or month) that holds ``moment``."""
    t = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if period == "hour":
        return t
    t = t.replace(hour=0)
    if period == "day":
        return t
    if period == "month":
        return t.replace(day=1)
    raise ValueError(f"unknown period {period!r}: use one of {', '.join(PERIODS)}")


def next_period(start: datetime, period: str) -> datetime:
    """The start of the period after the one that starts at ``start``."""
    if period == "hour":
        return start + timedelta(hours=1)
    if period == "day":
        return start + timedelta(days=1)
    if period == "month":
        year, month = divmod(start.month, 12)
        return start.replace(year=start.year + year, month=month + 1)
    raise ValueError(f"unknown period {period!r}: use one of {', '.join(PERIODS)}")


def is_boundary(moment: datetime, period: str) -> bool:
    """True when ``moment`` is the start of a UTC ``period``."""
    return period_start(moment, period) == moment


@dataclass(frozen=True)
class UsagePiece:
    """One attempt's usage within one period; times in whole microseconds."""

    job_id: str
    attempt: int
    period_start: datetime
    tenant: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    provider: str = ""
    region: str = ""
    gpu_model: str = ""
    held_us: int = 0
    gpu_us: int = 0
    metered_gpu_us: int = 0
    billable_gpu_us: int = 0
    credited_gpu_us: int = 0
    final: bool = False
    """The record was final: these numbers will not change."""


def _cut(start: datetime, end: datetime, period: str) -> list[tuple[datetime, int]]:
    """``[start, end)`` as (period start, microseconds in it), in order; [] when empty."""
    out = []
    cursor, slot = start, period_start(start, period)
    while cursor < end:
        upto = min(next_period(slot, period), end)
        out.append((slot, (upto - cursor) // _US))
        cursor, slot = upto, next_period(slot, period)
    return out


def _spread(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (integers summing exactly to it):
    floors first, then one more each by largest remainder (earlier first on ties)."""
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def tick_us(tick: MeterTick) -> int:
    """A tick's GPU time in whole microseconds (what the metered pieces add up)."""
    return round(tick.gpu_seconds * 1e6)


def _tick_pieces(tick: MeterTick, period: str) -> list[tuple[datetime, int]]:
    length = round(tick.interval_s * 1e6)
    start = tick.interval_start
    cuts = _cut(start, start + timedelta(microseconds=length), period)
    if not cuts:
        return [(period_start(start, period), tick_us(tick))]
    return list(
        zip([s for s, _ in cuts], _spread(tick_us(tick), [w for _, w in cuts]), strict=True)
    )


def counted_ticks(attempt: AttemptAccounting, ticks: Iterable[MeterTick]) -> list[MeterTick]:
    """The attempt's ticks its record counted: each index once (the first given, as
    :func:`projections.accounting.account` keeps it), those after the counted end left out."""
    by_index: dict[int, MeterTick] = {}
    for t in ticks:
        if t.attempt == attempt.attempt:
            by_index.setdefault(t.tick_index, t)
    skip = set(attempt.uncounted_ticks)
    return [t for i, t in sorted(by_index.items()) if i not in skip]


def split(
    record: AccountingRecord, ticks: Iterable[MeterTick] = (), period: str = "hour"
) -> list[UsagePiece]:
    """The record's usage, one piece per attempt and period it touched, in order.

    ``ticks`` are the job's meter ticks (those of other jobs are ignored), as given to
    :func:`projections.accounting.account` for this record.
    """
    own = [t for t in ticks if t.job_id == record.job_id]
    pieces: list[UsagePiece] = []
    for a in record.attempts:
        held: dict[datetime, int] = {}
        if a.held_from is not None:
            end = a.released_at or record.updated_at or a.held_from
            held = dict(_cut(a.held_from, max(end, a.held_from), period))
        metered: dict[datetime, int] = {}
        for tick in counted_ticks(a, own):
            for slot, us in _tick_pieces(tick, period):
                metered[slot] = metered.get(slot, 0) + us
        billable = a.billable_gpu_seconds > 0
        for slot in sorted(held.keys() | metered.keys()):
            gpu_us = held.get(slot, 0) * a.gpu_count
            pieces.append(
                UsagePiece(
                    job_id=record.job_id,
                    attempt=a.attempt,
                    period_start=slot,
                    tenant=record.tenant,
                    labels=dict(record.labels),
                    provider=a.provider,
                    region=a.region,
                    gpu_model=a.gpu_model,
                    held_us=held.get(slot, 0),
                    gpu_us=gpu_us,
                    metered_gpu_us=metered.get(slot, 0),
                    billable_gpu_us=gpu_us if billable else 0,
                    credited_gpu_us=0 if billable else gpu_us,
                    final=record.final,
                )
            )
    return pieces


def parse_group_by(values: Iterable[str]) -> tuple[str, ...]:
    """The dimensions of a ``by`` list (comma-separated items allowed), checked.

    Raises ValueError naming the rule for an unknown dimension, a bad label key, a
    repeat or too many.
    """
    out: list[str] = []
    for item in (part.strip() for v in values for part in v.split(",")):
        if not item:
            continue
        if item.startswith(LABEL_DIMENSION):
            key = item[len(LABEL_DIMENSION) :]
            if not LABEL_KEY_RE.match(key):
                raise ValueError(f"{item[:80]!r}: the label key must be {LABEL_KEY_RULE}")
        elif item not in DIMENSIONS:
            raise ValueError(
                f"{item[:80]!r} is not a dimension: use {', '.join(DIMENSIONS)} or label:<key>"
            )
        if item in out:
            raise ValueError(f"{item!r} is given twice")
        out.append(item)
    if len(out) > MAX_GROUP_BY:
        raise ValueError(f"{len(out)} dimensions; at most {MAX_GROUP_BY}")
    return tuple(out)


def group_value(piece: UsagePiece, dimension: str) -> str:
    """The value of ``dimension`` for ``piece`` ('' for a label the job does not have)."""
    if dimension.startswith(LABEL_DIMENSION):
        return piece.labels.get(dimension[len(LABEL_DIMENSION) :], "")
    value = getattr(piece, dimension)
    assert isinstance(value, str)
    return value


def line_id(period: str, start: datetime, group: Sequence[tuple[str, str]]) -> str:
    """The deterministic id of an exported line: its period and its group's values, so a
    re-export names every line the same and a billing system can de-duplicate by it."""
    key = json.dumps([period, start.astimezone(UTC).isoformat(), [list(g) for g in group]])
    return "ul-" + hashlib.sha256(key.encode()).hexdigest()[:32]
