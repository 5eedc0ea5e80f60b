"""Prices (``projections.prices``): a strict catalog, a book that never reprices the past,
and money that sums exactly.

The catalog's refusals name the row and the field; the book refuses a version that would
change a moment before its publication, an old version or another currency (a forged
event too); costs are integer nanos rounded half to even, and over generated live
histories moved across a price change, the hourly pieces' costs sum exactly to the job's,
days and months are sums of hours, each piece is within half a nano of the exact
rational cost, and publishing a later version leaves every earlier hour's cost as it was.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.prices import (
    CatalogError,
    PriceBook,
    cost_nanos,
    money,
    parse_catalog,
    priced,
)
from projections.usage import period_start
from schemas.events import Event, MeterTick, PriceCatalogPublished
from tests.projections.test_invariants import PROPERTY
from tests.projections.test_usage_periods import MONTH_END, across_month_end

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def row(**fields: Any) -> dict[str, Any]:
    return {
        "provider": "aws",
        "gpu_model": "A10G",
        "per_gpu_hour": "1.25",
        "effective_from": "2025-01-01T00:00:00Z",
        **fields,
    }


def catalog(*rows: dict[str, Any], version: int = 1, currency: str = "EUR") -> dict[str, Any]:
    return {"version": version, "currency": currency, "prices": list(rows or [row()])}


def published(data: dict[str, Any], at: datetime = T0, event_id: str = "") -> PriceCatalogPublished:
    parsed = parse_catalog(data)
    return PriceCatalogPublished(
        event_id=event_id or f"cat-{parsed.version}",
        occurred_at=at,
        version=parsed.version,
        currency=parsed.currency,
        entries=list(parsed.entries),
    )


def problems(data: object) -> list[tuple[str, str]]:
    with pytest.raises(CatalogError) as caught:
        parse_catalog(data)
    return caught.value.problems


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({**catalog(), "discount": 1}, "discount", "unknown field"),
        (catalog(row(zone="a")), "prices[0].zone", "unknown field"),
        (catalog(row(per_gpu_hour="-0.01")), "prices[0].per_gpu_hour", "negative"),
        (catalog(row(per_gpu_hour=0.1)), "prices[0].per_gpu_hour", "float is not exact"),
        (catalog(row(per_gpu_hour="1,5")), "prices[0].per_gpu_hour", "not a decimal"),
        (catalog(row(per_gpu_hour="NaN")), "prices[0].per_gpu_hour", "finite"),
        (catalog(row(per_gpu_hour="0.0000001")), "prices[0].per_gpu_hour", "6 decimal places"),
        (catalog(row(per_gpu_hour="1000001")), "prices[0].per_gpu_hour", "at most"),
        (catalog(row(effective_from="2025-01-01T00:30:00Z")), "prices[0].effective_from", "hour"),
        (catalog(row(effective_from="2025-01-01T00:00:00")), "prices[0].effective_from", "zone"),
        (catalog(row(provider="")), "prices[0].provider", "empty"),
        (catalog(row(gpu_model="A\x1b[2J")), "prices[0].gpu_model", "control"),
        (catalog(currency="EURO"), "currency", "ISO 4217"),
        (catalog(currency="XXX"), "currency", "ISO 4217"),
        ({**catalog(), "version": 0}, "version", "from 1 on"),
        ({**catalog(), "version": "2"}, "version", "whole number"),
        ({"version": 1, "currency": "EUR"}, "prices", "required"),
        ({**catalog(), "prices": []}, "prices", "non-empty"),
        (catalog(row(), row(per_gpu_hour="2")), "prices[1]", "as prices[0]"),
        (["a list"], "(catalog)", "mapping"),
    ],
)
def test_a_catalog_is_refused_naming_the_row_and_the_field(
    data: object, field: str, words: str
) -> None:
    found = problems(data)
    assert any(f == field and words in why for f, why in found), found


def test_every_problem_of_a_catalog_is_named_at_once() -> None:
    found = problems(catalog(row(per_gpu_hour="-1"), row(provider=None, region=3)))
    assert [f for f, _ in found] == [
        "prices[0].per_gpu_hour",
        "prices[1].provider",
        "prices[1].region",
    ]


def test_the_example_catalog_is_valid() -> None:
    example = Path(__file__).parents[2] / "examples" / "prices" / "catalog.yaml"
    parsed = parse_catalog(yaml.safe_load(example.read_text()))
    assert parsed.currency == "EUR" and len(parsed.entries) == 3


def test_a_price_is_kept_exactly() -> None:
    parsed = parse_catalog(catalog(row(per_gpu_hour="3.100000"), row(region="eu", per_gpu_hour=7)))
    assert [e.per_gpu_hour for e in parsed.entries] == ["3.100000", "7.000000"]


def test_cost_is_integer_nanos_rounded_half_to_even() -> None:
    # 1 micro per GPU-hour for 1.8 s of a GPU is half a nano: to even (0), 5.4 s -> 2.
    assert cost_nanos(1, 1_800_000) == 0
    assert cost_nanos(1, 5_400_000) == 2
    assert cost_nanos(3_400_000, 3_600_000_000) == 3_400_000_000
    assert money(cost_nanos(1_250_000, 90_000_000)) == "0.031250000"


def test_the_row_in_force_region_first_latest_time_then_higher_version() -> None:
    book = PriceBook(
        [
            published(
                catalog(
                    row(),
                    row(region="eu-west-1", per_gpu_hour="2"),
                    row(effective_from="2025-01-01T05:00:00Z", per_gpu_hour="1.5"),
                )
            ),
            published(
                catalog(row(effective_from="2025-01-01T05:00:00Z", per_gpu_hour="9"), version=2),
                at=T0 + timedelta(hours=1),
            ),
        ]
    )
    at = book.price_at
    assert at("aws", "A10G", "us-east-1", T0 + timedelta(hours=1)).per_gpu_hour == "1.250000"
    assert at("aws", "A10G", "eu-west-1", T0 + timedelta(hours=9)).per_gpu_hour == "2.000000"
    later = at("aws", "A10G", "us-east-1", T0 + timedelta(hours=5))
    assert (later.per_gpu_hour, later.version) == ("9.000000", 2)
    assert at("aws", "A10G", "us-east-1", T0 - timedelta(microseconds=1)) is None
    assert at("gcp", "A10G", "", T0 + timedelta(hours=1)) is None
    assert [k for k, _ in book.in_force(T0 + timedelta(hours=5))] == [
        ("aws", "A10G", ""),
        ("aws", "A10G", "eu-west-1"),
    ]


def test_a_version_that_would_reprice_the_past_is_refused_by_the_fold() -> None:
    first = published(catalog())
    # Published at 10:00 with a row from 09:00: it would change an hour already used.
    back = published(
        catalog(row(effective_from="2025-01-01T09:00:00Z", per_gpu_hour="99"), version=2),
        at=T0 + timedelta(hours=10),
    )
    old = published(catalog(row(effective_from="2025-01-02T00:00:00Z")), at=T0, event_id="x")
    other = published(
        catalog(row(effective_from="2025-01-02T00:00:00Z"), version=3, currency="USD"), at=T0
    )
    book = PriceBook([first, back, old, other, first])
    assert book.catalogs == [first]
    reasons = {e.version: [f for f, _ in p] for e, p in book.refused}
    assert reasons == {2: ["prices[0].effective_from"], 1: ["version"], 3: ["currency"]}
    assert book.price_at("aws", "A10G", "", T0 + timedelta(hours=9)).per_gpu_hour == "1.250000"


BOOK = [
    published(
        catalog(
            row(per_gpu_hour="1.234567"),
            row(effective_from=(MONTH_END - timedelta(hours=1)).isoformat(), per_gpu_hour="2.5"),
            row(effective_from=MONTH_END.isoformat(), per_gpu_hour="0.333333"),
        )
    )
]
CHANGE = MONTH_END + timedelta(hours=2)
LATER = published(
    catalog(row(effective_from=CHANGE.isoformat(), per_gpu_hour="7.77"), version=2),
    at=CHANGE - timedelta(minutes=30),
)


@PROPERTY
@given(across_month_end())
def test_costs_sum_exactly_and_a_later_version_leaves_the_past_as_it_was(
    job: tuple[list[Event], list[MeterTick]],
) -> None:
    events, ticks = job
    record = account(events, ticks)
    before = priced(PriceBook(BOOK), record, ticks)
    after = priced(PriceBook([*BOOK, LATER]), record, ticks)
    for pieces in (before, after):
        job_cost = sum(p.billable_nanos + p.credited_nanos for p in pieces)
        for coarser in ("day", "month"):
            per_period: Counter[datetime] = Counter()
            for p in pieces:
                per_period[period_start(p.piece.period_start, coarser)] += (
                    p.billable_nanos + p.credited_nanos
                )
            assert sum(per_period.values()) == job_cost
        for p in pieces:
            assert p.price is not None, "every hour of this job has a price"
            exact = Fraction(Decimal(p.price.per_gpu_hour)) * Fraction(
                p.piece.billable_gpu_us, 3_600_000_000
            )
            assert abs(Fraction(p.billable_nanos, 10**9) - exact) <= Fraction(1, 2 * 10**9)
            assert p.price.effective_from <= p.piece.period_start
    assert [p.piece for p in before] == [p.piece for p in after]
    for old, new in zip(before, after, strict=True):
        if old.piece.period_start < LATER.occurred_at:
            assert new == old, "a later version changed a past hour"
        else:
            assert new.price is not None and new.price.version == 2


@given(st.integers(0, 10**12), st.integers(0, 16 * 3_600_000_000))
def test_cost_nanos_is_the_nearest_nano(micros: int, gpu_us: int) -> None:
    exact = Fraction(micros * gpu_us, 3_600_000)
    assert abs(cost_nanos(micros, gpu_us) - exact) <= Fraction(1, 2)
