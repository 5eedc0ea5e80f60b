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
from collections.abc import Iterable, Sequence

import asyncpg

from projections import accounting, job_state
from projections.accounting import AccountingPolicy
from schemas.events import Event, LogChunk, MeterTick, NodeEvent
from schemas.views import AccountingRecord, JobView
from services.ledger.client import LedgerRecord
from services.settings import Settings
from services.sink import rows
from services.sink.rows import Row

CONSUMED_TOPICS = ("job-events", "log-chunks", "meter-ticks", "node-events")
"""Topic suffixes the sink reads."""


async def insert_ignore(
    conn: asyncpg.Connection, table: str, row: Row, conflict: Sequence[str] = ()
) -> bool:
    """Insert ``row`` unless its key (``conflict`` columns, default any) exists; True if inserted.

    Naming the columns makes any other unique violation (e.g. a job's ``seq``) an error
    rather than a silently skipped row.
    """
    cols = list(row)
    target = f"({', '.join(conflict)}) " if conflict else ""
    sql = (
        f"INSERT INTO {table} ({', '.join(cols)}) "
        f"VALUES ({', '.join(f'${i}' for i in range(1, len(cols) + 1))}) "
        f"ON CONFLICT {target}DO NOTHING RETURNING 1"
    )
    return await conn.fetchval(sql, *row.values()) is not None


async def upsert(conn: asyncpg.Connection, table: str, row: Row, key: Sequence[str]) -> None:
    """Insert ``row`` or overwrite the row with the same ``key`` columns."""
    cols = list(row)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in key)
    sql = (
        f"INSERT INTO {table} ({', '.join(cols)}) "
        f"VALUES ({', '.join(f'${i}' for i in range(1, len(cols) + 1))}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )
    await conn.execute(sql, *row.values())


def default_policy() -> AccountingPolicy:
    """The accounting policy the sink applies: the current one of projections.accounting."""
    return accounting.DEFAULT_POLICY


def new_view(job_id: str) -> JobView | None:
    """The fold's starting point for a job the read models have not seen (``evolve`` takes None)."""
    return None


def account(
    history: list[Event], ticks: list[MeterTick], policy: AccountingPolicy
) -> AccountingRecord:
    """``projections.accounting.account`` (one name for the sink and the replay tool)."""
    return accounting.account(history, ticks, policy)


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
        batch = _Batch(conn)
        for record in records:
            suffix = self._suffix.get(record.topic)
            value = record.value
            if suffix == "job-events" and isinstance(value, Event):
                await batch.job_event(value)
            elif suffix == "log-chunks" and isinstance(value, LogChunk):
                await insert_ignore(conn, "log_chunks", rows.log_chunk_row(value))
            elif suffix == "meter-ticks" and isinstance(value, MeterTick):
                if await insert_ignore(conn, "meter_ticks", rows.meter_tick_row(value)):
                    batch.accounting_due.add(value.job_id)
            elif suffix == "node-events" and isinstance(value, NodeEvent):
                await batch.node_event(value)
        await batch.flush(self.policy)


class _Batch:
    """Per-transaction caches so a job touched by many records is written once."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.views: dict[str, JobView] = {}
        self.job_seq: dict[str, int] = {}
        self.nodes: dict[str, Row] = {}
        self.node_seq: dict[str, int] = {}
        self.accounting_due: set[str] = set()

    async def job_event(self, event: Event) -> None:
        job_id = event.job_id
        if job_id not in self.job_seq:
            self.job_seq[job_id] = await self.conn.fetchval(
                "SELECT coalesce(max(seq), 0) FROM job_events WHERE job_id = $1", job_id
            )
        row = rows.job_event_row(event, self.job_seq[job_id] + 1)
        if not await insert_ignore(self.conn, "job_events", row, ["event_id"]):
            return  # seen before: folding it again would change nothing
        self.job_seq[job_id] += 1
        view = self.views[job_id] if job_id in self.views else await self._load_view(job_id)
        evolved = job_state.evolve(view, event)
        if evolved.failure is not None and evolved.failure != (view.failure if view else None):
            failure = rows.failure_row(evolved, event)
            if failure is not None:
                await insert_ignore(self.conn, "failures", failure, ["event_id"])
        self.views[job_id] = evolved
        self.accounting_due.add(job_id)

    async def _load_view(self, job_id: str) -> JobView | None:
        stored = await self.conn.fetchval("SELECT view FROM jobs WHERE job_id = $1", job_id)
        return JobView.model_validate_json(stored) if stored else new_view(job_id)

    async def node_event(self, event: NodeEvent) -> None:
        node_id = event.node_id
        if node_id not in self.node_seq:
            self.node_seq[node_id] = await self.conn.fetchval(
                "SELECT coalesce(max(seq), 0) FROM node_events WHERE node_id = $1", node_id
            )
        row = rows.node_event_row(event, self.node_seq[node_id] + 1)
        if not await insert_ignore(self.conn, "node_events", row, ["event_id"]):
            return
        self.node_seq[node_id] += 1
        row = self.nodes.get(node_id) or await self._load_node(node_id)
        self.nodes[node_id] = rows.evolve_node(row, event)

    async def _load_node(self, node_id: str) -> Row:
        stored = await self.conn.fetchrow("SELECT * FROM nodes WHERE node_id = $1", node_id)
        if stored is None:
            return rows.new_node_row(node_id)
        row = dict(stored)
        for col in ("gpus", "gpu_usage"):
            # Normalise jsonb text so an unchanged node compares equal after the fold.
            row[col] = json.dumps(json.loads(row[col]), sort_keys=True)
        return row

    async def flush(self, policy: AccountingPolicy) -> None:
        for view in self.views.values():
            await upsert(self.conn, "jobs", rows.job_row(view), ["job_id"])
            for attempt in view.attempts:
                await upsert(
                    self.conn,
                    "attempts",
                    rows.attempt_row(view.job_id, attempt),
                    ["job_id", "attempt"],
                )
        for row in self.nodes.values():
            await upsert(self.conn, "nodes", row, ["node_id"])
        for job_id in sorted(self.accounting_due):
            await self._account(job_id, policy)

    async def _account(self, job_id: str, policy: AccountingPolicy) -> None:
        history = [
            rows.event_from_payload(r["type"], r["payload"])
            for r in await self.conn.fetch(
                "SELECT type, payload FROM job_events WHERE job_id = $1 ORDER BY seq", job_id
            )
        ]
        if not history:
            return  # ticks before the job's first event: accounted once JobSubmitted arrives
        ticks = [
            MeterTick.model_validate_json(r["payload"])
            for r in await self.conn.fetch(
                "SELECT payload FROM meter_ticks WHERE job_id = $1 ORDER BY attempt, tick_index",
                job_id,
            )
        ]
        record = account(history, ticks, policy)
        await upsert(self.conn, "accounting_records", rows.accounting_row(record), ["job_id"])
        for line in rows.accounting_attempt_rows(record):
            await upsert(self.conn, "accounting_attempts", line, ["job_id", "attempt"])
