"""The sink's pure-step-plus-write: apply a batch of ledger records to the read models.

Called inside one transaction together with the offset update (see
:mod:`services.sink.consumer`), and by the replay tool on a scratch schema, so
the live tables and the rebuilt ones come from the same code.

Idempotence: job and node events are stored once per ``event_id`` and only a
newly stored event is folded; log chunks and meter ticks are stored once per
natural key. A record delivered twice therefore changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import asyncpg

from projections import accounting, job_state
from projections.accounting import AccountingPolicy
from schemas.events import Event, LogChunk, MeterTick, NodeEvent
from schemas.views import AccountingRecord, JobView
from services.ledger.client import LedgerRecord
from services.settings import Settings
from services.sink import rows
from services.sink.rows import Row

_T = TypeVar("_T")

CONSUMED_TOPICS = ("job-events", "log-chunks", "meter-ticks", "node-events")
"""Topic suffixes the sink reads."""


# Column types of the read-model tables (services/sink/migrations), in row order: a batch
# of rows goes to Postgres as one array per column and is expanded by ``unnest``.
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
}


def _unnest_sql(table: str, cols: Sequence[str]) -> tuple[str, str]:
    """``(column list, SELECT ... FROM unnest(...))`` for one array parameter per column."""
    types = _TYPES[table]
    arrays = ", ".join(f"${i}::{types[c]}[]" for i, c in enumerate(cols, 1))
    return ", ".join(cols), f"SELECT * FROM unnest({arrays})"


def _columns(table_rows: Sequence[Row]) -> tuple[list[str], list[list[Any]]]:
    cols = list(table_rows[0])
    return cols, [[row[c] for row in table_rows] for c in cols]


async def insert_ignore(
    conn: asyncpg.Connection,
    table: str,
    table_rows: Sequence[Row],
    conflict: Sequence[str],
    returning: str = "1",
) -> list[asyncpg.Record]:
    """Insert ``table_rows`` in one statement, skipping rows whose ``conflict`` key exists.

    Returns one record (``returning``) per inserted row. Naming the conflict columns makes
    any other unique violation (e.g. a job's ``seq``) an error rather than a skipped row.
    Rows of one call must not share a key (callers de-duplicate, keeping the first).
    """
    if not table_rows:
        return []
    cols, arrays = _columns(table_rows)
    names, select = _unnest_sql(table, cols)
    sql = (
        f"INSERT INTO {table} ({names}) {select} "
        f"ON CONFLICT ({', '.join(conflict)}) DO NOTHING RETURNING {returning}"
    )
    return list(await conn.fetch(sql, *arrays))


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
        _, arrays = _columns(table_rows)
        await conn.execute(f"INSERT INTO {table} ({names}) {select} {conflict}", *arrays)
        return
    # Tables with array columns (accounting_attempts, nodes): unnest would flatten them,
    # so send one pipelined statement per row.
    params = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    await conn.executemany(
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({params}) {conflict}",
        [[row[c] for c in cols] for row in table_rows],
    )


def default_policy() -> AccountingPolicy:
    """The accounting policy the sink applies: the current one of projections.accounting."""
    return accounting.DEFAULT_POLICY


def new_view(job_id: str) -> JobView | None:
    """The fold's starting point for a job the read models have not seen (``evolve`` takes None)."""
    return None


def account(
    history: list[Event],
    ticks: list[MeterTick],
    policy: AccountingPolicy,
    view: JobView | None = None,
) -> AccountingRecord:
    """``projections.accounting.account`` (one name for the sink and the replay tool).

    ``view`` is the job's view folded from exactly ``history``; it saves a re-fold.
    """
    return accounting.account(history, ticks, policy, view=view)


class ReadModelWriter:
    """Applies decoded ledger records to the read-model tables of the connection's schema."""

    def __init__(self, settings: Settings, policy: AccountingPolicy | None = None) -> None:
        self.settings = settings
        self.policy = policy if policy is not None else default_policy()
        self._suffix = {settings.topic(s): s for s in CONSUMED_TOPICS}

    def consumed_topics(self) -> list[str]:
        return list(self._suffix)

    async def apply(self, conn: asyncpg.Connection, records: Iterable[LedgerRecord]) -> None:
        """Apply ``records`` (in their Kafka order) inside the caller's transaction."""
        job_events: list[Event] = []
        chunks: list[LogChunk] = []
        ticks: list[MeterTick] = []
        node_events: list[NodeEvent] = []
        for record in records:
            suffix = self._suffix.get(record.topic)
            value = record.value
            if suffix == "job-events" and isinstance(value, Event):
                job_events.append(value)
            elif suffix == "log-chunks" and isinstance(value, LogChunk):
                chunks.append(value)
            elif suffix == "meter-ticks" and isinstance(value, MeterTick):
                ticks.append(value)
            elif suffix == "node-events" and isinstance(value, NodeEvent):
                node_events.append(value)
        batch = _Batch(conn)
        await batch.job_events(job_events)
        await batch.log_chunks(chunks)
        await batch.meter_ticks(ticks)
        await batch.node_events(node_events)
        await batch.flush(self.policy)


def _first_per_key(items: Iterable[_T], key: Callable[[_T], Hashable]) -> list[_T]:
    """``items`` in order without the ones whose key an earlier item had."""
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


class _Batch:
    """One batch's writes: each table's rows in one statement, folds only of new events.

    Events of one job (node) are numbered and folded in their Kafka order, exactly as if
    they were applied one by one; an event already stored (or earlier in the batch) is
    skipped before it gets a ``seq``.
    """

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.views: dict[str, JobView] = {}
        self.prior_seq: dict[str, int] = {}
        self.new_history: dict[str, list[tuple[str, str]]] = {}
        self.failures: list[Row] = []
        self.nodes: dict[str, Row] = {}
        self.accounting_due: set[str] = set()

    async def _new_only(self, table: str, ids: list[str]) -> set[str]:
        stored = await self.conn.fetch(
            f"SELECT event_id FROM {table} WHERE event_id = ANY($1::text[])", ids
        )
        return set(ids) - {r["event_id"] for r in stored}

    async def _max_seq(self, table: str, key: str, ids: Iterable[str]) -> dict[str, int]:
        wanted = sorted(set(ids))
        found = {
            r[0]: r[1]
            for r in await self.conn.fetch(
                f"SELECT {key}, max(seq) FROM {table} WHERE {key} = ANY($1::text[]) GROUP BY {key}",
                wanted,
            )
        }
        return {k: found.get(k, 0) for k in wanted}

    async def job_events(self, events: list[Event]) -> None:
        events = _first_per_key(events, lambda e: e.event_id)
        if not events:
            return
        fresh = await self._new_only("job_events", [e.event_id for e in events])
        events = [e for e in events if e.event_id in fresh]
        if not events:
            return
        self.prior_seq = await self._max_seq("job_events", "job_id", (e.job_id for e in events))
        seq = dict(self.prior_seq)
        event_rows = []
        for event in events:
            seq[event.job_id] += 1
            row = rows.job_event_row(event, seq[event.job_id])
            event_rows.append(row)
            self.new_history.setdefault(event.job_id, []).append((row["type"], row["payload"]))
        inserted = await insert_ignore(self.conn, "job_events", event_rows, ["event_id"])
        if len(inserted) != len(event_rows):
            raise RuntimeError("job_events changed under the sink (is a second writer running?)")
        stored = await self.conn.fetch(
            "SELECT job_id, view FROM jobs WHERE job_id = ANY($1::text[])", sorted(seq)
        )
        views: dict[str, JobView | None] = {
            r["job_id"]: JobView.model_validate_json(r["view"]) for r in stored if r["view"]
        }
        for event in events:
            job_id = event.job_id
            view = views[job_id] if job_id in views else new_view(job_id)
            evolved = job_state.evolve(view, event)
            if evolved.failure is not None and evolved.failure != (view.failure if view else None):
                failure = rows.failure_row(evolved, event)
                if failure is not None:
                    self.failures.append(failure)
            views[job_id] = evolved
            self.views[job_id] = evolved
            self.accounting_due.add(job_id)

    async def log_chunks(self, chunks: list[LogChunk]) -> None:
        chunk_rows = _first_per_key(
            (rows.log_chunk_row(c) for c in chunks),
            lambda r: (r["job_id"], r["attempt"], r["stream"], r["seq"]),
        )
        await insert_ignore(
            self.conn, "log_chunks", chunk_rows, ["job_id", "attempt", "stream", "seq"]
        )

    async def meter_ticks(self, ticks: list[MeterTick]) -> None:
        tick_rows = _first_per_key(
            (rows.meter_tick_row(t) for t in ticks),
            lambda r: (r["job_id"], r["attempt"], r["tick_index"]),
        )
        inserted = await insert_ignore(
            self.conn,
            "meter_ticks",
            tick_rows,
            ["job_id", "attempt", "tick_index"],
            returning="job_id",
        )
        self.accounting_due.update(r["job_id"] for r in inserted)

    async def node_events(self, events: list[NodeEvent]) -> None:
        events = _first_per_key(events, lambda e: e.event_id)
        if not events:
            return
        fresh = await self._new_only("node_events", [e.event_id for e in events])
        events = [e for e in events if e.event_id in fresh]
        if not events:
            return
        seq = await self._max_seq("node_events", "node_id", (e.node_id for e in events))
        event_rows = []
        for event in events:
            seq[event.node_id] += 1
            event_rows.append(rows.node_event_row(event, seq[event.node_id]))
        inserted = await insert_ignore(self.conn, "node_events", event_rows, ["event_id"])
        if len(inserted) != len(event_rows):
            raise RuntimeError("node_events changed under the sink (is a second writer running?)")
        for stored in await self.conn.fetch(
            "SELECT * FROM nodes WHERE node_id = ANY($1::text[])", sorted(seq)
        ):
            row = dict(stored)
            for col in ("gpus", "gpu_usage"):
                # Normalise jsonb text so an unchanged node compares equal after the fold.
                row[col] = json.dumps(json.loads(row[col]), sort_keys=True)
            self.nodes[row["node_id"]] = row
        for event in events:
            node_id = event.node_id
            row = self.nodes.get(node_id) or rows.new_node_row(node_id)
            self.nodes[node_id] = rows.evolve_node(row, event)

    async def flush(self, policy: AccountingPolicy) -> None:
        await insert_ignore(self.conn, "failures", self.failures, ["event_id"])
        await upsert(self.conn, "jobs", [rows.job_row(v) for v in self.views.values()], ["job_id"])
        await upsert(
            self.conn,
            "attempts",
            [rows.attempt_row(v.job_id, a) for v in self.views.values() for a in v.attempts],
            ["job_id", "attempt"],
        )
        await upsert(self.conn, "nodes", list(self.nodes.values()), ["node_id"])
        await self._account(sorted(self.accounting_due), policy)

    async def _account(self, job_ids: list[str], policy: AccountingPolicy) -> None:
        if not job_ids:
            return
        # A job's history is what was stored before this batch plus what the batch added.
        # Jobs first seen in this batch need no read: the batch holds their whole history.
        histories: dict[str, list[tuple[str, str]]] = {}
        unknown = [j for j in job_ids if j not in self.prior_seq]
        prior = {**self.prior_seq, **await self._max_seq("job_events", "job_id", unknown)}
        stored_before = [j for j in job_ids if prior.get(j, 0) > 0]
        for r in await self.conn.fetch(
            "SELECT job_id, type, payload FROM job_events WHERE job_id = ANY($1::text[]) "
            "ORDER BY job_id, seq",
            stored_before,
        ):
            histories.setdefault(r["job_id"], []).append((r["type"], r["payload"]))
        for job_id in job_ids:
            if prior.get(job_id, 0) == 0 and job_id in self.new_history:
                histories[job_id] = self.new_history[job_id]
        # Ticks before the job's first event are accounted once JobSubmitted arrives.
        due = [j for j in job_ids if histories.get(j)]
        ticks: dict[str, list[MeterTick]] = {}
        for r in await self.conn.fetch(
            "SELECT job_id, payload FROM meter_ticks WHERE job_id = ANY($1::text[]) "
            "ORDER BY job_id, attempt, tick_index",
            due,
        ):
            ticks.setdefault(r["job_id"], []).append(MeterTick.model_validate_json(r["payload"]))
        records = [
            account(
                [rows.event_from_payload(t, p) for t, p in histories[job_id]],
                ticks.get(job_id, []),
                policy,
                # Folded from the stored view plus this batch's events: the whole history.
                view=self.views.get(job_id),
            )
            for job_id in due
        ]
        await upsert(
            self.conn, "accounting_records", [rows.accounting_row(r) for r in records], ["job_id"]
        )
        await upsert(
            self.conn,
            "accounting_attempts",
            [line for r in records for line in rows.accounting_attempt_rows(r)],
            ["job_id", "attempt"],
        )
