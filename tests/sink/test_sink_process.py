"""``gridledger sink`` as a process: SIGKILL it part-way, restart it, and get identical tables."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import asyncpg
import pytest

from services.ledger import Ledger
from services.settings import Settings
from services.sink.consumer import Sink, build_sink, stored_offsets
from tests.sink.pg import dump, private_schema
from tests.sink.scenario import node_facts, run_facts

pytestmark = pytest.mark.integration


async def sink_process(settings: Settings, schema: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "GRIDLEDGER_TOPIC_PREFIX": settings.topic_prefix,
        "GRIDLEDGER_SINK_BATCH_MAX": "1",  # many small transactions: the kill lands between two
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "sink",
        "--schema",
        schema,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def committed(pool: asyncpg.Pool) -> int:
    async with pool.acquire() as conn:
        return sum((await stored_offsets(conn, "sink")).values())


async def test_sigkill_between_batches_then_restart_gives_identical_tables(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    events = [*node_facts()]
    for i in range(12):
        events += run_facts(f"job-{i:02d}", start=i * 100, exit_code=i % 2).all()
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(events)
        reference = await build_sink(settings, ledger, pool)
        task = asyncio.create_task(reference.run())
        await reference.catch_up()
        reference.stop()
        await task
        expected = await dump(pool)

        async with private_schema(settings) as (other, other_pool):
            process = await sink_process(settings, other.pg_schema)
            try:
                for _ in range(1000):
                    if await committed(other_pool) >= 50:
                        break
                    await asyncio.sleep(0.01)
            finally:
                process.send_signal(signal.SIGKILL)
                await process.wait()
            progress = await committed(other_pool)
            assert 0 < progress < len(events), "the kill must land part-way through"
            restarted = Sink(other, ledger, other_pool)
            task = asyncio.create_task(restarted.run())
            await restarted.catch_up()
            restarted.stop()
            await task
            assert await dump(other_pool) == expected
