"""``GET /v1/usage``: the tenant's usage lines by UTC period and group, a page at a time.

The sink stores each attempt's usage per UTC hour (``usage_lines``, from
``projections.usage.split``); an hour, a day or a month is the sum of its hours, in
whole microseconds, so every line is the exact sum of its jobs' pieces. Lines are
ordered by period start, then by the group's values (byte order), and a page starts
after the last line of the previous one (the cursor is that line's key, bound to
the query it came from).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from projections import usage
from services.api.queries import decode_token, encode_token, money_of

_SUMS = ("held_us", "gpu_us", "metered_gpu_us", "billable_gpu_us", "credited_gpu_us")
MONEY_SQL = (
    "sum(billable_cost_nanos)::bigint AS billable_cost_nanos, "
    "sum(credited_cost_nanos)::bigint AS credited_cost_nanos, "
    "coalesce(sum(gpu_us) FILTER (WHERE price_version IS NULL), 0)::bigint AS unpriced_gpu_us, "
    "coalesce(array_agg(DISTINCT price_version) FILTER (WHERE price_version IS NOT NULL), "
    "'{}') AS price_versions"
)
"""A group of usage_lines' money: the sums of its hours' costs (each hour at its price)."""
CURRENCY_SQL = "(SELECT currency FROM price_catalogs WHERE accepted ORDER BY seq LIMIT 1)"
"""The catalog's one currency (NULL before the first version)."""


def scope(period: str, by: Sequence[str], since: datetime | None, until: datetime | None) -> str:
    """What a cursor of this query is bound to: a page key means nothing for another one."""
    text = json.dumps(
        [
            "usage",
            period,
            list(by),
            since.isoformat() if since else None,
            until and until.isoformat(),
        ]
    )
    return "usage:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def decode_key(token: str, query_scope: str, dimensions: int) -> tuple[datetime, list[str]]:
    """The (period start, group values) after which a page starts; ValueError if not one."""
    key = decode_token(token, query_scope)
    if len(key) != dimensions + 1 or not all(isinstance(v, str) and "\x00" not in v for v in key):
        raise ValueError("not a cursor this API issued (wrong shape)")
    try:
        start = datetime.fromisoformat(key[0])
    except ValueError as exc:
        raise ValueError(f"not a cursor this API issued ({exc})") from exc
    if start.tzinfo is None:
        raise ValueError("not a cursor this API issued (a time without its zone)")
    return start, key[1:]


def _column(dimension: str, params: list[Any]) -> str:
    """The SQL of one dimension's value; a label's key becomes a parameter (appended to
    ``params``), never SQL text."""
    if dimension.startswith(usage.LABEL_DIMENSION):
        params.append(dimension[len(usage.LABEL_DIMENSION) :])
        return f"coalesce(labels->>${len(params)}::text, '') COLLATE \"C\""
    assert dimension in usage.DIMENSIONS  # checked by usage.parse_group_by
    return f'{dimension} COLLATE "C"'


async def page(
    pool: asyncpg.Pool,
    tenant: str,
    period: str,
    by: Sequence[str],
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of usage lines and the next page's cursor (None on the last page).

    ``by`` must come from :func:`projections.usage.parse_group_by`; ``cursor`` from an
    earlier page of the same query (ValueError otherwise).
    """
    query_scope = scope(period, by, since, until)
    after = decode_key(cursor, query_scope, len(by)) if cursor else None
    params: list[Any] = [tenant, period, since, until, limit + 1]
    dims = []
    for i, dimension in enumerate(by):
        dims.append(f"{_column(dimension, params)} AS d{i}")
    names = ["start", *(f"d{i}" for i in range(len(by)))]
    where_after = ""
    if after is not None:
        params.append(after[0])
        marks = [f"${len(params)}::timestamptz"]
        for value in after[1]:
            params.append(value)
            marks.append(f'${len(params)}::text COLLATE "C"')
        where_after = f"WHERE ({', '.join(names)}) > ({', '.join(marks)})"
    select = ", ".join(["date_trunc($2, period_start, 'UTC') AS start", *dims])
    sums = ", ".join(f"sum({c})::bigint AS {c}" for c in _SUMS)
    rows = await pool.fetch(
        f"SELECT * FROM (SELECT {select}, count(DISTINCT job_id) AS jobs, {sums}, "
        f"bool_and(final) AS final, {MONEY_SQL}, {CURRENCY_SQL} AS currency "
        "FROM usage_lines WHERE tenant = $1 "
        "AND ($3::timestamptz IS NULL OR period_start >= $3) "
        "AND ($4::timestamptz IS NULL OR period_start < $4) "
        f"GROUP BY {', '.join(str(i + 1) for i in range(len(names)))}) g "
        f"{where_after} ORDER BY {', '.join(names)} LIMIT $5",
        *params,
    )
    more = len(rows) > limit
    lines = [_line(r, period, by) for r in rows[:limit]]
    last = rows[limit - 1] if more else None
    next_cursor = (
        encode_token(query_scope, [last["start"].isoformat(), *(last[n] for n in names[1:])])
        if last is not None
        else None
    )
    return lines, next_cursor


def _line(row: asyncpg.Record, period: str, by: Sequence[str]) -> dict[str, Any]:
    start: datetime = row["start"]
    group = [(d, row[f"d{i}"]) for i, d in enumerate(by)]
    return {
        "line_id": usage.line_id(period, start, group),
        "period": period,
        "period_start": start.isoformat(),
        "period_end": usage.next_period(start, period).isoformat(),
        "group": dict(group),
        "jobs": row["jobs"],
        **{c: row[c] for c in _SUMS},
        "final": row["final"],
        **money_of(row),
    }
