"""Set-based statements on the read-model tables: one statement per table per batch.

A batch of rows goes to Postgres as one array per column and is expanded by
``unnest``, so a batch costs one round trip per table whatever its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from services.sink.rows import Row

# Column types of the read-model tables (services/sink/migrations), in row order.
_TYPES: dict[str, dict[str, str]] = {
    "job_events": {
        "event_id": "text",
        "job_id": "text",
        "seq": "int4",
        "attempt": "int4",
        "type": "text",
        "occurred_at": "timestamptz",
        "producer": "text",
        "causation_id": "text",
        "schema_version": "int4",
        "payload": "jsonb",
    },
    "node_events": {
        "event_id": "text",
        "node_id": "text",
        "seq": "int4",
        "type": "text",
        "occurred_at": "timestamptz",
        "payload": "jsonb",
    },
    "failures": {
        "event_id": "text",
        "job_id": "text",
        "attempt": "int4",
        "failure_class": "text",
        "attribution": "text",
        "retryable": "bool",
        "summary": "text",
        "advice": "text",
        "rule_id": "text",
        "classifier_version": "text",
        "evidence": "jsonb",
        "occurred_at": "timestamptz",
    },
    "log_chunks": {
        "job_id": "text",
        "attempt": "int4",
        "stream": "text",
        "seq": "int4",
        "event_id": "text",
        "first_line": "int4",
        "line_count": "int4",
        "data": "text",
        "truncated": "bool",
        "occurred_at": "timestamptz",
    },
    "meter_ticks": {
        "job_id": "text",
        "attempt": "int4",
        "tick_index": "int4",
        "event_id": "text",
        "node_id": "text",
        "interval_start": "timestamptz",
        "interval_s": "float8",
        "gpu_count": "int4",
        "gpu_model": "text",
        "gpu_seconds": "float8",
        "final": "bool",
        "occurred_at": "timestamptz",
        "payload": "jsonb",
    },
    "jobs": {
        "job_id": "text",
        "tenant": "text",
        "name": "text",
        "status": "text",
        "terminal": "bool",
        "attempt": "int4",
        "image": "text",
        "gpus": "int4",
        "submitted_at": "timestamptz",
        "updated_at": "timestamptz",
        "terminal_at": "timestamptz",
        "terminal_event": "text",
        "failure_class": "text",
        "attribution": "text",
        "retryable": "bool",
        "summary": "text",
        "advice": "text",
        "event_count": "int4",
        "view": "jsonb",
    },
    "attempts": {
        "job_id": "text",
        "attempt": "int4",
        "status": "text",
        "node_id": "text",
        "provider": "text",
        "region": "text",
        "gpu_count": "int4",
        "gpu_model": "text",
        "scheduled_at": "timestamptz",
        "accepted_at": "timestamptz",
        "held_from": "timestamptz",
        "released_at": "timestamptz",
        "started_at": "timestamptz",
        "exited_at": "timestamptz",
        "exit_code": "int4",
        "signal": "int4",
        "oom_killed": "bool",
        "runtime_s": "float8",
        "failure_class": "text",
        "attribution": "text",
        "view": "jsonb",
    },
    "accounting_records": {
        "job_id": "text",
        "tenant": "text",
        "status": "text",
        "final": "bool",
        "policy_version": "text",
        "held_seconds": "float8",
        "gpu_seconds": "float8",
        "metered_gpu_seconds": "float8",
        "billable_gpu_seconds": "float8",
        "credited_gpu_seconds": "float8",
        "reconciled": "bool",
        "updated_at": "timestamptz",
        "record": "jsonb",
    },
    "accounting_attempts": {
        "job_id": "text",
        "attempt": "int4",
        "node_id": "text",
        "held_from": "timestamptz",
        "released_at": "timestamptz",
        "held_seconds": "float8",
        "gpu_count": "int4",
        "gpu_model": "text",
        "gpu_seconds": "float8",
        "metered_gpu_seconds": "float8",
        "tick_count": "int4",
        "missing_ticks": "int4[]",
        "attribution": "text",
        "failure_class": "text",
        "billable_gpu_seconds": "float8",
        "credited_gpu_seconds": "float8",
        "reconciled": "bool",
    },
}


def _int_array_literal(values: Sequence[int] | None) -> str | None:
    """``{1,2,3}``: an int array as text, so ``unnest`` does not flatten it into the rows."""
    if values is None:
        return None
    return "{" + ",".join(str(int(v)) for v in values) + "}"


def _unnest_sql(table: str, cols: Sequence[str]) -> tuple[str, str]:
    """``(column list, SELECT ... FROM unnest(...))`` for one array parameter per column.

    An ``int4[]`` column travels as one text literal per row and is cast back in the SELECT.
    """
    types = _TYPES[table]
    arrays = []
    select = []
    for i, c in enumerate(cols, 1):
        if types[c] == "int4[]":
            arrays.append(f"${i}::text[]")
            select.append(f"u.{c}::int4[]")
        else:
            arrays.append(f"${i}::{types[c]}[]")
            select.append(f"u.{c}")
    names = ", ".join(cols)
    return names, f"SELECT {', '.join(select)} FROM unnest({', '.join(arrays)}) AS u({names})"


def _columns(table: str, table_rows: Sequence[Row]) -> tuple[list[str], list[list[Any]]]:
    cols = list(table_rows[0])
    types = _TYPES[table]
    arrays = []
    for c in cols:
        column = [row[c] for row in table_rows]
        if types[c] == "int4[]":
            column = [_int_array_literal(v) for v in column]
        arrays.append(column)
    return cols, arrays


async def insert_ignore(
    conn: asyncpg.Connection,
    table: str,
    table_rows: Sequence[Row],
    conflict: Sequence[str],
    returning: str | None = "1",
) -> list[asyncpg.Record]:
    """Insert ``table_rows`` in one statement, skipping rows whose ``conflict`` key exists.

    Returns one record (``returning``) per inserted row; with ``returning=None`` nothing
    comes back (the cheaper statement when the caller does not need to know).
    Naming the conflict columns makes any other unique violation (e.g. a job's ``seq``)
    an error rather than a skipped row. Rows of one call must not share a key (callers
    de-duplicate, keeping the first).
    """
    if not table_rows:
        return []
    cols, arrays = _columns(table, table_rows)
    names, select = _unnest_sql(table, cols)
    sql = f"INSERT INTO {table} ({names}) {select} ON CONFLICT ({', '.join(conflict)}) DO NOTHING"
    if returning is None:
        await conn.execute(sql, *arrays)
        return []
    return list(await conn.fetch(f"{sql} RETURNING {returning}", *arrays))


async def upsert(
    conn: asyncpg.Connection, table: str, table_rows: Sequence[Row], key: Sequence[str]
) -> None:
    """Insert ``table_rows`` or overwrite the rows with the same ``key`` columns (one statement).

    Rows with the same key collapse to the last one, as successive upserts would.
    """
    if not table_rows:
        return
    last = {tuple(row[k] for k in key): row for row in table_rows}
    table_rows = list(last.values())
    cols = list(table_rows[0])
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in key)
    conflict = f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    if table in _TYPES:
        names, select = _unnest_sql(table, cols)
        _, arrays = _columns(table, table_rows)
        await conn.execute(f"INSERT INTO {table} ({names}) {select} {conflict}", *arrays)
        return
    # nodes (text[] and int4[] columns, a few rows per batch): one pipelined statement per row.
    params = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    await conn.executemany(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({params}) {conflict}",
        [[row[c] for c in cols] for row in table_rows],
    )
