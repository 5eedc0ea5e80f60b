"""Prices: a versioned catalog of prices per GPU-hour, and the money on usage.

A catalog (a file the operator loads, ``gridledger prices load``) is one ``version``,
one ``currency`` and rows ``provider x gpu_model (x region) -> per_gpu_hour`` from an
``effective_from`` time on. Each load is recorded on the ledger as a
:class:`~schemas.events.PriceCatalogPublished` event; :class:`PriceBook` folds those
events, in their order on the ``prices`` topic, into the prices in force.

The rules, checked one way (:func:`parse_catalog` for the file,
:func:`publication_problems` for the file against the book, and the book's fold
for every event, a forged one too):

* **Exact money.** Prices are decimal text with at most :data:`PRICE_DECIMALS`
  places (a float is refused: ``0.1`` is not exact in binary) and are kept as
  integer millionths of the currency; costs are integer billionths (nanos).
* **A price change never changes a past period.** Every row of a version takes
  effect at or after the version's publication time (the event's ``occurred_at``),
  so the price of any moment before a publication is fixed for good and replaying
  the ledger gives the same money. ``effective_from`` is a whole UTC hour, so each
  hourly usage piece (:func:`projections.usage.split` by hour) has exactly one
  price: a job crossing a price change is split there by the hourly split itself.
* **Versions only grow**, and every version has the currency of the first one: a
  job's money is in one currency.
* **Which row prices a moment**: of the rows for the provider and GPU model in force
  then (``effective_from`` at or before it), the region's own rows if any, else the
  provider-wide ones (``region`` empty); among those the latest ``effective_from``,
  and of equal ones the higher version. A version therefore overrides a future row
  of an earlier one by giving the same key and time.

A piece with no row in force is *unpriced*: its cost is 0 and its price is None, so
an export shows its GPU time as ``unpriced_gpu_us`` rather than inventing a price.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from projections.usage import UsagePiece, split
from schemas.errors import GridledgerError
from schemas.events import MeterTick, PriceCatalogPublished, PriceEntry
from schemas.views import AccountingRecord

PRICE_DECIMALS = 6
"""Places a price per GPU-hour may have; it is kept in millionths (``micros``)."""
MAX_PRICE = Decimal(1_000_000)
"""The largest price per GPU-hour: keeps a year of 16 GPUs' cost in a bigint of nanos."""
MAX_ENTRIES = 10_000
MAX_TEXT = 128
NANOS_PER_UNIT = 10**9
_MICROS_US_PER_NANO = 3_600_000
"""micros x GPU-us / this = nanos: (m / 1e6 per hour) x (us / 3.6e9 hours) x 1e9."""

CATALOG_FIELDS = ("version", "currency", "prices")
ENTRY_FIELDS = ("provider", "gpu_model", "region", "per_gpu_hour", "effective_from")
REQUIRED_ENTRY_FIELDS = ("provider", "gpu_model", "per_gpu_hour", "effective_from")

_ISO_4217 = """AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD
    BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR
    FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD
    JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT
    MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG
    QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS
    TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR
    ZMW ZWL"""
CURRENCIES = frozenset(_ISO_4217.split())
"""ISO 4217 codes of currencies in use (funds, metals and test codes left out)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

Problem = tuple[str, str]
"""(field, what is wrong and what to do), e.g. ``("prices[2].per_gpu_hour", "...")``."""


class CatalogError(GridledgerError):
    """A price catalog was refused; one entry per offending field."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {why}" for field, why in problems))


@dataclass(frozen=True)
class Catalog:
    """A catalog file, checked: what a PriceCatalogPublished event carries."""

    version: int
    currency: str
    entries: tuple[PriceEntry, ...]


@dataclass(frozen=True)
class Price:
    """The row in force for one moment, and the version it came from."""

    version: int
    currency: str
    micros: int
    """Per GPU-hour, in millionths of the currency."""
    effective_from: datetime
    region: str
    """The row's region ('' when it is the provider-wide row)."""

    @property
    def per_gpu_hour(self) -> str:
        """The price as exact decimal text, e.g. ``'3.400000'``."""
        return decimal_text(self.micros, PRICE_DECIMALS)


def decimal_text(units: int, places: int) -> str:
    """Integer ``units`` of 10^-places as exact decimal text (``1500, 3`` -> ``'1.500'``)."""
    whole, frac = divmod(units, 10**places)
    return f"{whole}.{frac:0{places}d}"


def money(nanos: int) -> str:
    """Nanos of the currency as exact decimal text with 9 places."""
    return decimal_text(nanos, 9)


def parse_price(value: object) -> int:
    """A price per GPU-hour as integer millionths; ValueError (TypeError) naming the rule."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(
            "must be decimal text such as '3.40' (quote it: a float is not exact) or an integer"
        )
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{str(value)[:40]!r} is not a decimal number, e.g. '3.40'") from None
    if not price.is_finite():
        raise ValueError("must be a finite decimal number, e.g. '3.40'")
    if price < 0:
        raise ValueError("must not be negative (0 is free)")
    if price > MAX_PRICE:
        raise ValueError(f"must be at most {MAX_PRICE} per GPU-hour")
    exponent = price.as_tuple().exponent
    assert isinstance(exponent, int)  # finite
    if exponent < -PRICE_DECIMALS and price != price.quantize(Decimal(1).scaleb(-PRICE_DECIMALS)):
        raise ValueError(f"has more than {PRICE_DECIMALS} decimal places")
    return int(price.scaleb(PRICE_DECIMALS))


def _time(value: object) -> datetime:
    if isinstance(value, str):
        text = value
        try:
            value = datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"{text[:40]!r} is not an ISO 8601 time, e.g. 2027-01-01T00:00:00Z"
            ) from None
    if not isinstance(value, datetime):
        raise TypeError("must be an ISO 8601 time, e.g. 2027-01-01T00:00:00Z")
    if value.tzinfo is None:
        raise ValueError("needs its zone (e.g. a trailing Z for UTC)")
    moment = value.astimezone(UTC)
    if moment.replace(minute=0, second=0, microsecond=0) != moment:
        raise ValueError(
            "must be a whole UTC hour (so each hour of usage has one price), "
            f"e.g. {moment.replace(minute=0, second=0, microsecond=0).isoformat()}"
        )
    return moment


def _text(value: object, required: bool) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise TypeError("must be text")
    if required and not value.strip():
        raise ValueError("must not be empty")
    if len(value) > MAX_TEXT:
        raise ValueError(f"must be at most {MAX_TEXT} characters")
    if _CONTROL.search(value):
        raise ValueError("must be one line without control characters")
    return value


def _unknown(where: str, data: Mapping[object, object], known: Sequence[str]) -> list[Problem]:
    return [
        (f"{where}{str(k)[:40]}", f"unknown field; the fields are {', '.join(known)}")
        for k in data
        if k not in known
    ]


def _entry(i: int, data: object, problems: list[Problem]) -> PriceEntry | None:
    where = f"prices[{i}]"
    if not isinstance(data, Mapping):
        problems.append((where, "must be a mapping of " + ", ".join(ENTRY_FIELDS)))
        return None
    found = _unknown(f"{where}.", data, ENTRY_FIELDS)
    found += [(f"{where}.{f}", "is required") for f in REQUIRED_ENTRY_FIELDS if f not in data]
    values: dict[str, object] = {}
    checks = {
        "provider": lambda v: _text(v, True),
        "gpu_model": lambda v: _text(v, True),
        "region": lambda v: _text(v, False),
        "per_gpu_hour": lambda v: decimal_text(parse_price(v), PRICE_DECIMALS),
        "effective_from": _time,
    }
    for name, check in checks.items():
        if name in data:
            try:
                values[name] = check(data[name])
            except (ValueError, TypeError) as exc:
                found.append((f"{where}.{name}", str(exc)))
    problems += found
    return None if found else PriceEntry.model_validate(values)


def parse_catalog(data: object) -> Catalog:
    """A catalog file's content (the mapping YAML or JSON gives), checked strictly.

    Raises CatalogError with every problem, each naming the entry and the field.
    """
    if not isinstance(data, Mapping):
        raise CatalogError([("(catalog)", "must be a mapping of " + ", ".join(CATALOG_FIELDS))])
    problems = _unknown("", data, CATALOG_FIELDS)
    problems += [(f, "is required") for f in CATALOG_FIELDS if f not in data]
    version = data.get("version")
    if "version" in data and (
        isinstance(version, bool) or not isinstance(version, int) or version < 1
    ):
        problems.append(("version", "must be a whole number from 1 on, above the latest one"))
    currency = data.get("currency")
    if "currency" in data and currency not in CURRENCIES:
        problems.append(
            ("currency", f"{str(currency)[:20]!r} is not an ISO 4217 code such as EUR or USD")
        )
    rows = data.get("prices")
    entries: list[PriceEntry] = []
    if "prices" in data:
        if not isinstance(rows, list) or not rows:
            problems.append(("prices", "must be a non-empty list of price rows"))
        elif len(rows) > MAX_ENTRIES:
            problems.append(("prices", f"{len(rows)} rows; at most {MAX_ENTRIES}"))
        else:
            entries = [e for i, row in enumerate(rows) if (e := _entry(i, row, problems))]
    if not problems:
        problems += entry_problems(entries)
    if problems:
        raise CatalogError(problems)
    assert isinstance(version, int) and isinstance(currency, str)
    return Catalog(version, currency, tuple(entries))


def _key(entry: PriceEntry) -> tuple[str, str, str]:
    return (entry.provider, entry.gpu_model, entry.region)


def entry_problems(entries: Sequence[PriceEntry]) -> list[Problem]:
    """Rows of one version that price the same key from the same moment (an overlap)."""
    first: dict[tuple[str, str, str, datetime], int] = {}
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        slot = (*_key(entry), entry.effective_from)
        if slot in first:
            problems.append(
                (
                    f"prices[{i}]",
                    f"prices the same provider, gpu_model, region and effective_from as "
                    f"prices[{first[slot]}]: give one price per key and moment",
                )
            )
        else:
            first[slot] = i
    return problems


@dataclass
class _Row:
    effective_from: datetime
    version: int
    micros: int


class PriceBook:
    """The prices in force, folded from PriceCatalogPublished events in their topic order.

    An event that breaks a rule (:func:`publication_problems`) is kept out, with the
    reason, in :attr:`refused`: the same events give the same book, whoever folds them.
    """

    def __init__(self, events: Iterable[PriceCatalogPublished] = ()) -> None:
        self.catalogs: list[PriceCatalogPublished] = []
        self.refused: list[tuple[PriceCatalogPublished, list[Problem]]] = []
        self._rows: dict[tuple[str, str, str], list[_Row]] = {}
        self._seen: set[str] = set()
        for event in events:
            self.apply(event)

    @property
    def version(self) -> int:
        """The latest version in the book (0 before the first)."""
        return self.catalogs[-1].version if self.catalogs else 0

    @property
    def currency(self) -> str:
        """The currency of every version ('' before the first)."""
        return self.catalogs[0].currency if self.catalogs else ""

    def apply(self, event: PriceCatalogPublished) -> list[Problem]:
        """Fold one event; its problems (then it changed nothing). Idempotent per event id."""
        if event.event_id in self._seen:
            return []
        self._seen.add(event.event_id)
        problems = publication_problems(self, event)
        if problems:
            self.refused.append((event, problems))
            return problems
        self.catalogs.append(event)
        for entry in event.entries:
            rows = self._rows.setdefault(_key(entry), [])
            rows.append(_Row(entry.effective_from, event.version, parse_price(entry.per_gpu_hour)))
            rows.sort(key=lambda r: (r.effective_from, r.version))
        return []

    def price_at(
        self, provider: str, gpu_model: str, region: str, moment: datetime
    ) -> Price | None:
        """The price of one GPU-hour at ``moment``, or None when no row is in force."""
        for row_region in dict.fromkeys((region, "")):
            rows = self._rows.get((provider, gpu_model, row_region))
            if not rows:
                continue
            i = bisect_right([r.effective_from for r in rows], moment)
            if i:
                row = rows[i - 1]
                return Price(row.version, self.currency, row.micros, row.effective_from, row_region)
        return None

    def in_force(self, moment: datetime) -> list[tuple[tuple[str, str, str], Price]]:
        """Every key's row in force at ``moment`` ((provider, gpu_model, region), price)."""
        out = []
        for key in sorted(self._rows):
            price = self.price_at(*key, moment)
            if price is not None and price.region == key[2]:
                out.append((key, price))
        return out


def publication_problems(book: PriceBook, event: PriceCatalogPublished) -> list[Problem]:
    """Why ``event`` may not join ``book``: an old version, another currency, a row that
    would change the price of a moment before the event's publication, or a bad row."""
    problems: list[Problem] = []
    if event.version <= book.version:
        problems.append(
            ("version", f"{event.version} is not above the latest version, {book.version}")
        )
    if book.currency and event.currency != book.currency:
        problems.append(
            (
                "currency",
                f"{event.currency!r} differs from the catalog's currency {book.currency!r}: "
                "every version is in one currency",
            )
        )
    elif event.currency not in CURRENCIES:
        problems.append(("currency", f"{event.currency[:20]!r} is not an ISO 4217 code"))
    for i, entry in enumerate(event.entries):
        try:
            _time(entry.effective_from)
            parse_price(entry.per_gpu_hour)
        except (ValueError, TypeError) as exc:
            problems.append((f"prices[{i}]", str(exc)))
            continue
        if entry.effective_from < event.occurred_at:
            problems.append(
                (
                    f"prices[{i}].effective_from",
                    f"{entry.effective_from.isoformat()} is before the publication time "
                    f"{event.occurred_at.isoformat()}: a price change never changes a past "
                    "period; give a whole UTC hour from then on",
                )
            )
    return problems + entry_problems(event.entries)


def cost_nanos(micros: int, gpu_us: int) -> int:
    """The cost of ``gpu_us`` GPU-microseconds at ``micros`` per GPU-hour, in nanos of the
    currency, rounded half to even."""
    quotient, rest = divmod(micros * gpu_us, _MICROS_US_PER_NANO)
    twice = 2 * rest
    if twice > _MICROS_US_PER_NANO or (twice == _MICROS_US_PER_NANO and quotient % 2):
        quotient += 1
    return quotient


@dataclass(frozen=True)
class PricedPiece:
    """One hourly usage piece and its money."""

    piece: UsagePiece
    price: Price | None
    """None: no row was in force (unpriced)."""
    billable_nanos: int
    credited_nanos: int


def price_piece(book: PriceBook, piece: UsagePiece) -> PricedPiece:
    """An hourly piece at the price in force at its hour (one price per hour: rows start
    on whole hours)."""
    price = book.price_at(piece.provider, piece.gpu_model, piece.region, piece.period_start)
    if price is None:
        return PricedPiece(piece, None, 0, 0)
    return PricedPiece(
        piece,
        price,
        cost_nanos(price.micros, piece.billable_gpu_us),
        cost_nanos(price.micros, piece.credited_gpu_us),
    )


def priced(
    book: PriceBook, record: AccountingRecord, ticks: Iterable[MeterTick] = ()
) -> list[PricedPiece]:
    """The record's usage split by hour, each piece priced. A job's cost is the sum of
    its pieces' (integers), so per-period costs sum exactly to it."""
    return [price_piece(book, p) for p in split(record, ticks, "hour")]
