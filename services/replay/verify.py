"""``gridledger replay --verify``: rebuild every projection from offset 0 and compare.

1. Wait (bounded) for the live sink to reach the ledger's current end offsets.
2. In one REPEATABLE READ transaction, read the sink's committed offsets and copy
   the live tables into a scratch schema (``live_<table>``): a consistent snapshot.
3. Read every consumed topic from offset 0 (``Ledger.read_partitions``) and apply
   the records below the snapshot offsets to fresh tables in the scratch schema
   with the sink's own writer (the same pure functions: job_state, accounting).
4. Compare rebuilt and live tables row by row (SQL ``EXCEPT`` both ways).
5. Rebuild every job in memory (:func:`services.replay.rebuild.rebuild`, one
   worker process per core, each on whole partitions): compare the compacted
   job-state topic with the fold of each job's history, and re-derive the
   decisions with ``projections.decisions.react_all`` to report where they
   differ from the recorded ones ("decision drift": informational unless
   ``strict``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from schemas.topics import STORED_TOPICS
from services.ledger import TopicPartition, compose
from services.ledger.client import Ledger, LedgerRecord
from services.replay.compare import COMPARED_TABLES, RowDifference, compare_table
from services.replay.decisions import DecisionDrift
from services.replay.rebuild import NOT_A_VIEW, Options, Rebuilt, rebuild
from services.settings import Settings
from services.sink import db
from services.sink.consumer import CONSUMER_NAME, Sink, store_offsets, stored_offsets
from services.sink.migrate import apply_migrations
from services.sink.writer import ReadModelWriter

CHUNK = 1000


@dataclass
class VerifyReport:
    """Everything ``replay --verify`` found; ``ok`` decides the exit code."""

    records: int = 0
    jobs: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    """'topic/partition' -> records the live sink had not committed when the snapshot was taken."""
    table_counts: dict[str, int] = field(default_factory=dict)
    """Differing keys per table."""
    differences: list[RowDifference] = field(default_factory=list)
    job_state_differences: list[str] = field(default_factory=list)
    job_state_notes: list[str] = field(default_factory=list)
    drift: list[DecisionDrift] = field(default_factory=list)
    strict: bool = False

    @property
    def ok(self) -> bool:
        """Whether the live read models equal the ones rebuilt from the ledger (and none lags)."""
        return not (
            self.lag
            or any(self.table_counts.values())
            or self.job_state_differences
            or (self.strict and self.drift)
        )

    def lines(self) -> list[str]:
        """The report for people: what was replayed, then every lag and difference found."""
        out = [f"replayed {self.records} records, {self.jobs} jobs"]
        for where, behind in sorted(self.lag.items()):
            out.append(f"LAG {where}: the live sink has not committed {behind} record(s)")
        for table in COMPARED_TABLES:
            count = self.table_counts.get(table, 0)
            out.append(f"{'DIFF' if count else 'ok  '} {table}: {count} differing row(s)")
        out += [f"  {d.line()}" for d in self.differences]
        if self.job_state_differences:
            out.append(f"DIFF job-state topic: {len(self.job_state_differences)} job(s)")
            out += [f"  {line}" for line in self.job_state_differences]
        else:
            out.append("ok   job-state topic")
        out += [f"  note: {line}" for line in self.job_state_notes]
        label = "DRIFT" if self.strict else "drift"
        if self.drift:
            out.append(
                f"{label} decisions: {len(self.drift)} difference(s) between the recorded "
                "decisions and the current rules" + ("" if self.strict else " (informational)")
            )
            out += [f"  {d.line()}" for d in self.drift]
        else:
            out.append("ok   decisions: the recorded decisions are the ones the rules imply")
        out.append("VERIFIED" if self.ok else "FAILED")
        return out


async def verify(
    settings: Settings,
    ledger: Ledger,
    *,
    live_schema: str | None = None,
    consumer: str = CONSUMER_NAME,
    strict: bool = False,
    catch_up_s: float = 10.0,
    keep_scratch: bool = False,
    workers: int | None = None,
) -> VerifyReport:
    """Rebuild the read models from the ledger and compare them with ``live_schema``.

    ``workers``: processes for the in-memory rebuild (default one per core; 1: in-process).
    """
    live = db.check_schema(live_schema or settings.pg_schema)
    scratch = f"replay_{secrets.token_hex(4)}"
    report = VerifyReport(strict=strict)
    live_pool = await db.create_pool(settings, live)
    scratch_pool = await db.create_pool(settings, scratch)
    try:
        if await live_pool.fetchval("SELECT to_regclass($1)", f"{live}.consumer_offsets") is None:
            raise db.ReadModelError(
                f"Postgres schema {live!r} holds no read models: start `gridledger sink` "
                "(or pass --schema with the sink's schema)"
            )
        sink = Sink(settings, ledger, live_pool, consumer_name=consumer)
        ends = await sink.end_offsets()
        with contextlib.suppress(TimeoutError):  # reported as lag below
            await sink.wait_until(ends, catch_up_s)
        async with scratch_pool.acquire() as conn:
            await apply_migrations(conn, scratch)
        snapshot = await _snapshot(live_pool, live, scratch, consumer)
        for tp, end in ends.items():
            if snapshot.get(tp, 0) < end:
                report.lag[f"{tp.topic}/{tp.partition}"] = end - snapshot.get(tp, 0)

        writer = ReadModelWriter(settings)
        for suffix in STORED_TOPICS:
            topic = settings.topic(suffix)
            pending: list[LedgerRecord] = []
            async for record in compose.read_partitions(ledger, topic, consumer_name="replay"):
                if record.offset < snapshot.get(TopicPartition(topic, record.partition), 0):
                    pending.append(record)
                    report.records += 1
                if len(pending) >= CHUNK:
                    await _apply(scratch_pool, writer, pending)
                    pending = []
            await _apply(scratch_pool, writer, pending)

        async with scratch_pool.acquire() as conn:
            for table in COMPARED_TABLES:
                count, diffs = await compare_table(conn, table, f"live_{table}", table)
                report.table_counts[table] = count
                report.differences += diffs

        options = Options(decisions=True, compare_published=True, keep_models=False)
        rebuilt = await rebuild(settings, options, workers=workers)
        report.jobs = len(rebuilt.statuses)
        _compare_job_state(rebuilt, report)
        report.drift = rebuilt.all_drift()
    finally:
        await live_pool.close()
        await scratch_pool.close()
        if not keep_scratch:
            await db.drop_schema(settings, scratch)
    return report


async def _snapshot(
    pool: asyncpg.Pool, live: str, scratch: str, consumer: str
) -> dict[TopicPartition, int]:
    """Offsets and a copy of every live table, from one consistent snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        offsets = await stored_offsets(conn, consumer)
        for table in COMPARED_TABLES:
            await conn.execute(
                f"CREATE TABLE {scratch}.live_{table} AS SELECT * FROM {live}.{table}"
            )
    return offsets


async def _apply(pool: asyncpg.Pool, writer: ReadModelWriter, records: list[LedgerRecord]) -> None:
    if not records:
        return
    offsets: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
    async with pool.acquire() as conn, conn.transaction():
        await writer.apply(conn, records)
        await store_offsets(conn, "replay", offsets)


def _compare_job_state(rebuilt: Rebuilt, report: VerifyReport) -> None:
    """The job-state topic's latest view per job against the fold of the job's history."""
    if not rebuilt.published:
        if rebuilt.statuses:
            report.job_state_notes.append(
                "the job-state topic is empty: no state processor has run on this ledger"
            )
        return
    behind = 0
    for job_id, verdict in rebuilt.published.items():
        if verdict == "behind":
            behind += 1
        elif verdict not in ("equal", NOT_A_VIEW):
            report.job_state_differences.append(f"{job_id}: {verdict}")
    missing = sorted(set(rebuilt.statuses) - set(rebuilt.published))
    if missing:
        report.job_state_notes.append(
            f"{len(missing)} job(s) have no view on the job-state topic yet (processor lag): "
            + ", ".join(missing[:5])
        )
    if behind:
        report.job_state_notes.append(
            f"{behind} view(s) match an earlier point of their history (processor lag)"
        )


def run(settings: Settings, **kwargs: Any) -> VerifyReport:
    """Verify against the ledger from synchronous code (the CLI)."""

    async def main() -> VerifyReport:
        async with Ledger(settings, "replay") as ledger:
            return await verify(settings, ledger, **kwargs)

    return asyncio.run(main())
