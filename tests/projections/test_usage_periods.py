"""Usage by period (``projections.usage``): pieces that sum exactly to the job's record.

Over generated live histories moved in time so that a month's end falls inside
their held compute (attempts cross hour, day and month boundaries), split by each
period: the held, GPU,
billable and credited microseconds of the pieces sum exactly to the record, the
metered ones to the counted ticks, hours sum to days and days to months, and
splitting again gives identical pieces.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.usage import (
    PERIODS,
    counted_ticks,
    is_boundary,
    line_id,
    next_period,
    parse_group_by,
    period_start,
    split,
    tick_us,
)
from schemas.events import ComputeHeld, Event, MeterTick
from schemas.views import AccountingRecord
from tests.projections.histories import JobHistory, job_spec
from tests.projections.test_invariants import PROPERTY, live_jobs

E = TypeVar("E", bound=Event)

MONTH_END = datetime(2025, 2, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def _shift(value: Any, delta: timedelta) -> Any:
    if isinstance(value, datetime):
        return value + delta
    if isinstance(value, dict):
        return {k: _shift(v, delta) for k, v in value.items()}
    if isinstance(value, list):
        return [_shift(v, delta) for v in value]
    return value


def moved(event: E, delta: timedelta) -> E:
    """The event with every time in it moved by ``delta`` (same ids)."""
    return type(event).model_validate(_shift(event.model_dump(), delta))


@st.composite
def across_month_end(draw: Any) -> tuple[list[Event], list[MeterTick]]:
    """A live job's events and ticks, moved so that MONTH_END falls at a drawn moment
    between its first event and its last (inside held compute when it held any)."""
    h = draw(live_jobs())
    times = sorted(e.occurred_at for e in [*h.events, *h.ticks])
    held = [e.occurred_at for e in h.events if isinstance(e, ComputeHeld)]
    start = held[0] if held else times[0]
    span = (times[-1] - start) // _US
    at = start + draw(st.integers(0, max(span, 0))) * _US
    delta = MONTH_END - at
    return [moved(e, delta) for e in h.events], [moved(t, delta) for t in h.ticks]


def us(seconds: float) -> int:
    return round(seconds * 1e6)


def totals(pieces: list, *fields: str) -> dict[str, int]:
    return {f: sum(getattr(p, f) for p in pieces) for f in fields}


@PROPERTY
@given(across_month_end())
def test_pieces_sum_exactly_to_the_record_in_every_period(
    job: tuple[list[Event], list[MeterTick]],
) -> None:
    events, ticks = job
    record = account(events, ticks)
    counted = [t for a in record.attempts for t in counted_ticks(a, ticks)]
    by_period = {p: split(record, ticks, p) for p in PERIODS}
    for period, pieces in by_period.items():
        assert totals(pieces, "held_us", "gpu_us", "billable_gpu_us", "credited_gpu_us") == {
            "held_us": us(record.held_seconds),
            "gpu_us": us(record.gpu_seconds),
            "billable_gpu_us": us(record.billable_gpu_seconds),
            "credited_gpu_us": us(record.credited_gpu_seconds),
        }
        metered = sum(p.metered_gpu_us for p in pieces)
        assert metered == sum(tick_us(t) for t in counted)
        assert abs(metered - record.metered_gpu_seconds * 1e6) <= 0.5 * len(counted) + 1e-3
        keys = [(p.attempt, p.period_start) for p in pieces]
        assert len(keys) == len(set(keys)), "one piece per attempt and period"
        for p in pieces:
            assert is_boundary(p.period_start, period)
            assert p.held_us <= (next_period(p.period_start, period) - p.period_start) // (
                timedelta(microseconds=1)
            )
            assert p.tenant == record.tenant and p.final == record.final
        assert split(record, [*ticks, *ticks], period) == pieces, "deterministic"
    # Hours sum to days and days to months: an hourly store answers every period.
    for finer, coarser in (("hour", "day"), ("day", "month")):
        summed: Counter[tuple[int, datetime, str]] = Counter()
        for p in by_period[finer]:
            for f in ("held_us", "gpu_us", "metered_gpu_us", "billable_gpu_us"):
                summed[(p.attempt, period_start(p.period_start, coarser), f)] += getattr(p, f)
        direct: Counter[tuple[int, datetime, str]] = Counter()
        for p in by_period[coarser]:
            for f in ("held_us", "gpu_us", "metered_gpu_us", "billable_gpu_us"):
                direct[(p.attempt, p.period_start, f)] += getattr(p, f)
        assert +summed == +direct


def test_an_attempt_across_midnight_at_a_month_end_is_split_there() -> None:
    spec = job_spec(resources={"gpus": 2}, labels={"project": "llm"})
    h = JobHistory(spec=spec, start=MONTH_END - timedelta(minutes=31), tick_s=60.0)
    h.submit()
    h.wait(1).queue()
    h.start(gpus=2, provider="aws", region="eu-west-1")
    h.wait(3600)
    h.exit(0)
    h.output()
    h.release()
    record = account(h.events, h.ticks)
    held_from = record.attempts[0].held_from
    assert held_from is not None and record.final
    before = (MONTH_END - held_from) // timedelta(microseconds=1)
    for period in ("day", "month"):
        a, b = split(record, h.ticks, period)
        assert (a.period_start, b.period_start) == (
            period_start(MONTH_END - timedelta(days=1), period),
            MONTH_END,
        )
        assert a.gpu_us == 2 * before and a.billable_gpu_us == a.gpu_us
        assert a.gpu_us + b.gpu_us == us(record.billable_gpu_seconds)
        assert (a.labels, a.provider, a.region) == ({"project": "llm"}, "aws", "eu-west-1")
    assert [p.period_start.hour for p in split(record, h.ticks, "hour")] == [23, 0]


def test_a_tick_across_a_boundary_is_spread_by_time() -> None:
    h = JobHistory(start=MONTH_END - timedelta(seconds=20), tick_s=60.0)
    h.submit()
    h.queue()
    h.start()
    h.wait(60)
    h.exit(0)
    h.output()
    h.release()
    record = account(h.events, h.ticks)
    first = [p for p in split(record, h.ticks, "hour") if p.attempt == 1]
    tick = h.ticks[0]
    assert tick.interval_start < MONTH_END
    share = (MONTH_END - tick.interval_start) / timedelta(seconds=60)
    assert first[0].metered_gpu_us == pytest.approx(tick_us(tick) * share, abs=1)
    assert sum(p.metered_gpu_us for p in first) == sum(tick_us(t) for t in h.ticks)


def test_a_record_without_held_compute_has_no_pieces() -> None:
    assert split(AccountingRecord(job_id="job-x", tenant="t")) == []


def test_line_ids_are_a_function_of_period_and_group() -> None:
    group = [("tenant", "acme"), ("label:project", "llm")]
    same = line_id("day", MONTH_END, group)
    assert same == line_id("day", MONTH_END.astimezone(), list(group))
    assert same.startswith("ul-") and len(same) == 35
    assert len({same, line_id("month", MONTH_END, group), line_id("day", MONTH_END, [])}) == 3


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (["colour"], "is not a dimension: use tenant, gpu_model, provider, region or label:<key>"),
        (["label:Cost Centre"], "the label key must be 1-63 characters"),
        (["tenant,tenant"], "given twice"),
        ([",".join(f"label:k{i}" for i in range(9))], "at most 8"),
    ],
)
def test_group_by_is_checked_with_the_rule(given: list[str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_group_by(given)
    assert parse_group_by(["tenant, label:project", "gpu_model"]) == (
        "tenant",
        "label:project",
        "gpu_model",
    )
