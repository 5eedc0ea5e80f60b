"""The sink against the real broker and Postgres: rows, duplicates, crashes and restarts."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import pytest

from schemas.events import Event
from services.ledger import Ledger
from services.settings import Settings
from services.sink.consumer import Sink, build_sink, stored_offsets
from services.sink.db import ReadModelError
from services.sink.migrate import apply_migrations, migration_files
from tests.sink.pg import dump, private_schema
from tests.sink.scenario import node_facts, run_facts

pytestmark = pytest.mark.integration


def facts() -> list[Event]:
    """Three jobs (one failed, one still running) and a node: every table gets rows."""
    ok = run_facts("job-ok", start=0)
    bad = run_facts("job-bad", start=100, exit_code=1)
    running = run_facts("job-run", start=200, exited=False, ticks=2)
    return [*node_facts(), *ok.all(), *bad.all(), *running.all()]


@contextlib.asynccontextmanager
async def running(sink: Sink) -> Any:
    task = asyncio.create_task(sink.run())
    try:
        yield task
    finally:
        sink.stop()
        await asyncio.wait_for(task, 10)


async def test_a_job_lands_in_every_table(pg: tuple[Settings, asyncpg.Pool]) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(facts())
        sink = await build_sink(settings, ledger, pool)
        async with running(sink):
            await sink.catch_up()
    tables = await dump(pool)
    jobs = {j["job_id"]: j for j in tables["jobs"]}
    assert jobs["job-ok"]["status"] == "succeeded" and jobs["job-ok"]["terminal"]
    assert jobs["job-bad"]["status"] == "failed"
    assert jobs["job-bad"]["failure_class"] == "missing_module"
    assert jobs["job-bad"]["attribution"] == "user"
    assert jobs["job-run"]["status"] == "running"
    assert [e["type"] for e in tables["job_events"] if e["job_id"] == "job-ok"] != []
    seqs = sorted(e["seq"] for e in tables["job_events"] if e["job_id"] == "job-ok")
    assert seqs == list(range(1, len(seqs) + 1))
    assert {(a["job_id"], a["attempt"]) for a in tables["attempts"]} == {
        ("job-ok", 1),
        ("job-bad", 1),
        ("job-run", 1),
    }
    assert [f["failure_class"] for f in tables["failures"]] == ["missing_module"]
    acc = {a["job_id"]: a for a in tables["accounting_records"]}
    assert acc["job-ok"]["final"] and not acc["job-run"]["final"]
    assert acc["job-ok"]["metered_gpu_seconds"] == pytest.approx(30.0)
    assert acc["job-ok"]["billable_gpu_seconds"] > 0
    assert len(tables["accounting_attempts"]) == 3
    assert len(tables["log_chunks"]) == 3 + 4 + 3
    assert len(tables["meter_ticks"]) == 3 + 3 + 2
    (node,) = tables["nodes"]
    assert node["status"] == "ready" and node["last_heartbeat_seq"] == 1
    assert node["running_attempts"] == ["job-1/1"]
    assert len(tables["node_events"]) == 3


async def test_every_event_twice_changes_nothing(pg: tuple[Settings, asyncpg.Pool]) -> None:
    settings, pool = pg
    events = facts()
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(events)
        sink = await build_sink(settings, ledger, pool)
        async with running(sink):
            await sink.catch_up()
            once = await dump(pool)
            await ledger.append_many(events)  # every event a second time, later in the log
            await sink.catch_up()
            assert await dump(pool) == once
        # A second sink reading the doubled log from offset 0 builds the same tables.
        async with private_schema(settings) as (other_settings, other_pool):
            other = await build_sink(other_settings, ledger, other_pool)
            async with running(other):
                await other.catch_up()
            assert await dump(other_pool) == once


class CrashingSink(Sink):
    """Writes half of batch ``crash_at``'s rows, then hangs until the test kills it."""

    def __init__(self, *args: Any, crash_at: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crash_at = crash_at
        self.crashing = asyncio.Event()

    async def apply_records(self, conn: asyncpg.Connection, records: list[Any]) -> None:
        if self.applied_batches + 1 == self.crash_at:
            await super().apply_records(conn, records[: len(records) // 2])
            self.crashing.set()
            await asyncio.sleep(3600)
        await super().apply_records(conn, records)


@pytest.mark.parametrize("crash_at", [1, 4])
async def test_killed_mid_batch_then_restarted_gives_identical_tables(
    pg: tuple[Settings, asyncpg.Pool], crash_at: int
) -> None:
    settings, pool = pg
    small = settings.model_copy(update={"sink_batch_max": 7})
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(facts())
        reference = await build_sink(small, ledger, pool)
        async with running(reference):
            await reference.catch_up()
        expected = await dump(pool)

        async with private_schema(settings) as (crash_settings, crash_pool):
            crash_settings = crash_settings.model_copy(update={"sink_batch_max": 7})
            crashing = CrashingSink(crash_settings, ledger, crash_pool, crash_at=crash_at)
            task = asyncio.create_task(crashing.run())
            await asyncio.wait_for(crashing.crashing.wait(), 20)
            task.cancel()  # the open transaction (rows + offsets) is rolled back
            with contextlib.suppress(asyncio.CancelledError):
                await task
            async with crash_pool.acquire() as conn:
                committed = await stored_offsets(conn, "sink")
            # Only the batches before the crash are committed; the crashed one is not.
            assert sum(committed.values()) <= 7 * (crash_at - 1)
            assert (sum(committed.values()) > 0) == (crash_at > 1)
            restarted = Sink(crash_settings, ledger, crash_pool)
            async with running(restarted):
                await restarted.catch_up()
            assert await dump(crash_pool, offsets=True) == {
                **expected,
                "consumer_offsets": (await dump(pool, offsets=True))["consumer_offsets"],
            }
            assert await dump(crash_pool) == expected


async def test_migrations_are_recorded_and_applied_once(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    async with pool.acquire() as conn:
        assert await apply_migrations(conn, settings.pg_schema) == []
        versions = await conn.fetch(
            f"SELECT version FROM {settings.pg_schema}.schema_migrations ORDER BY version"
        )
    assert [v["version"] for v in versions] == [p.stem for p in migration_files()]


async def test_an_undecodable_record_is_dead_lettered_and_the_sink_moves_on(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    script = run_facts("job-ok")
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(script.job_events[:3])
        await ledger.send_raw(settings.topic("job-events"), b"job-ok", b"\xc3\x01 garbage", [])
        await ledger.append_many(script.job_events[3:])
        sink = await build_sink(settings, ledger, pool)
        async with running(sink):
            await sink.catch_up()
        consumer = ledger.consumer(settings.topic("dead-letter"))
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=5000)
        finally:
            await consumer.stop()
    dead = [r for records in batch.values() for r in records]
    assert [r.value for r in dead] == [b"\xc3\x01 garbage"]
    tables = await dump(pool)
    assert [j["status"] for j in tables["jobs"]] == ["succeeded"]
    assert len(tables["job_events"]) == len(script.job_events)


@pytest.mark.parametrize("second_name", ["sink", "another-consumer"])
async def test_a_second_sink_on_the_same_schema_refuses_to_start(
    pg: tuple[Settings, asyncpg.Pool], second_name: str
) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        first = await build_sink(settings, ledger, pool)
        async with running(first):
            await first.catch_up()
            impatient = settings.model_copy(update={"sink_lock_wait_s": 0.5})
            # Whatever its consumer name: the writer's in-memory states need one writer.
            with pytest.raises(ReadModelError, match="already writing schema"):
                await Sink(impatient, ledger, pool, consumer_name=second_name).run()
