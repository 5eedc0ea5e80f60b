"""The sink's Postgres session dies under it: the sink reconnects, re-locks and catches up.

``pg_terminate_backend`` on the sink's own connection is what a server restart
does to it, without touching the shared server: every later statement on that
connection fails as a lost connection. (tests/system/test_postgres_outage.py
kills a whole private Postgres under a running set.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
import pytest

from services.ledger import Ledger
from services.settings import Settings
from services.sink.consumer import Sink, build_sink
from tests.sink.pg import dump, private_schema
from tests.sink.scenario import node_facts, run_facts
from tests.sink.test_sink import running
from tests.waiting import eventually

pytestmark = pytest.mark.integration


async def test_a_killed_session_is_replaced_and_the_tables_end_as_without_it(
    pg: tuple[Settings, asyncpg.Pool], caplog: pytest.LogCaptureFixture
) -> None:
    settings, pool = pg
    first = [*node_facts(), *run_facts("job-a").all()]
    second = [*run_facts("job-b", start=100).all(), *run_facts("job-c", start=200).all()]
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(first)
        sink = await build_sink(settings, ledger, pool)
        with caplog.at_level(logging.INFO, logger="gridledger.outage"):
            async with running(sink) as task:
                await sink.catch_up()
                assert sink._conn is not None
                victim = sink._conn.get_server_pid()
                async with pool.acquire() as admin:
                    assert await admin.fetchval("SELECT pg_terminate_backend($1)", victim)
                await ledger.append_many(second)
                await sink.catch_up(timeout=60)
                assert not task.done(), "the sink must ride the lost session out"
                assert sink._conn is not None and sink._conn.get_server_pid() != victim

                async def relocked() -> bool:
                    async with pool.acquire() as conn:
                        holders = await conn.fetch(
                            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                        )
                    assert sink._conn is not None
                    return sink._conn.get_server_pid() in {r["pid"] for r in holders}

                await eventually(relocked, "the new session to hold the schema lock")
        lines = [r.getMessage() for r in caplog.records]
        assert sum("is unreachable" in line for line in lines) == 1, lines
        assert sum("is back after" in line for line in lines) == 1, lines

        # The same ledger applied by a sink that never lost anything: the same tables.
        async with private_schema(settings) as (calm_settings, calm_pool):
            calm = await build_sink(calm_settings, ledger, calm_pool)
            async with running(calm):
                await calm.catch_up()
            assert await dump(pool) == await dump(calm_pool)


async def test_after_a_lost_session_a_lock_still_held_is_waited_for_not_fatal(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    # Slow retries and a short lock wait: the test takes the lock between the two sessions.
    patient = settings.model_copy(update={"reconnect_initial_s": 2.0, "sink_lock_wait_s": 0.3})
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many([*node_facts(), *run_facts("job-a").all()])
        sink = await build_sink(patient, ledger, pool)
        async with running(sink) as task, pool.acquire() as holder:
            await sink.catch_up()
            assert sink._conn is not None
            victim = sink._conn.get_server_pid()
            assert await holder.fetchval("SELECT pg_terminate_backend($1)", victim)
            # Blocks until the terminated session is gone, then holds what it held.
            lock = f"sink:{settings.pg_schema}"
            await holder.execute("SELECT pg_advisory_lock(hashtext($1))", lock)
            tries = sink.pg_outage.tries
            await ledger.append_many(run_facts("job-b", start=100).all())
            await eventually(
                lambda: sink.pg_outage.tries >= tries + 2, "two sessions refused the lock", 60
            )
            assert not task.done(), "a lock held after a reconnect must not end the sink"
            await holder.execute("SELECT pg_advisory_unlock(hashtext($1))", lock)
            await sink.catch_up(timeout=60)
        rows = await pool.fetch("SELECT job_id, status FROM jobs")
    jobs = {r["job_id"]: r["status"] for r in rows}
    assert jobs == {"job-a": "succeeded", "job-b": "succeeded"}


class BuggySink(Sink):
    async def apply_records(self, conn: asyncpg.Connection, records: list[Any]) -> None:
        raise ValueError("a bug in a fold")


async def test_a_bug_with_postgres_up_ends_the_run_instead_of_retrying(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(run_facts("job-a").all())
        with pytest.raises(ValueError, match="a bug in a fold"):
            await asyncio.wait_for(BuggySink(settings, ledger, pool).run(), 60)
