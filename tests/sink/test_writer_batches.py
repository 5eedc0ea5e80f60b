"""The batched writer: how records are split into batches never changes a row."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from schemas.events import LogChunk, MeterTick, NodeEvent
from services.replay.compare import COMPARED_TABLES
from services.settings import Settings
from services.sink.tables import TABLES
from services.sink.writer import ReadModelWriter
from tests.sink.pg import private_schema
from tests.sink.scenario import node_facts, run_facts

pytestmark = pytest.mark.integration


def stream(seed: int) -> list[Any]:
    """Interleaved jobs (some ticks before the job's first event), nodes, many duplicates."""
    rnd = random.Random(seed)
    queues = []
    for i in range(8):
        s = run_facts(
            f"job-{i}", start=i * 37, exit_code=rnd.choice([0, 1]), ticks=rnd.randint(0, 3)
        )
        first: list[list[Any]] = (
            [s.meter_ticks, s.job_events] if i % 3 == 0 else [s.job_events, s.meter_ticks]
        )
        queues.append([e for part in [*first, s.log_chunks] for e in part])
    out: list[Any] = [*node_facts("node-a"), *node_facts("node-b")]
    while any(queues):
        out.append(rnd.choice([q for q in queues if q]).pop(0))  # per-job order kept
    out += [e for e in out if rnd.random() < 0.3]  # redelivered later
    for _ in range(20):
        j = rnd.randrange(len(out))
        out.insert(j + 1, out[j])  # twice in a row (same batch)
    return out


def topic(settings: Settings, event: Any) -> str:
    if isinstance(event, LogChunk):
        return settings.topic("log-chunks")
    if isinstance(event, MeterTick):
        return settings.topic("meter-ticks")
    if isinstance(event, NodeEvent):
        return settings.topic("node-events")
    return settings.topic("job-events")


async def build(
    settings: Settings, events: list[Any], sizes: list[int], **writer_options: Any
) -> dict[str, list[str]]:
    """Apply ``events`` in batches of the given sizes (cycled); every table's rows as text."""
    async with private_schema(settings) as (scoped, pool):
        writer = ReadModelWriter(scoped, **writer_options)
        records: list[Any] = [
            SimpleNamespace(topic=topic(scoped, e), value=e, partition=0, offset=i)
            for i, e in enumerate(events)
        ]
        i = 0
        for n in sizes * len(records):
            if i >= len(records):
                break
            async with pool.acquire() as conn, conn.transaction():
                await writer.apply(conn, records[i : i + n])
            i += n
        return await tables(pool)


async def tables(pool: asyncpg.Pool) -> dict[str, list[str]]:
    """Every compared table's rows as text, in key order."""
    out = {}
    async with pool.acquire() as conn:
        for table, key in COMPARED_TABLES.items():
            columns = ", ".join(TABLES[table].names)  # not what Postgres assigns (a position)
            sql = f"SELECT ROW({columns})::text FROM {table} ORDER BY {', '.join(key)}"
            out[table] = [r[0] for r in await conn.fetch(sql)]
    return out


@pytest.mark.parametrize("seed", [1, 2])
async def test_batch_boundaries_change_no_row(pg: tuple[Settings, asyncpg.Pool], seed: int) -> None:
    settings, _ = pg
    events = stream(seed)
    one_by_one = await build(settings, events, [1])
    assert one_by_one["job_events"] and one_by_one["nodes"] and one_by_one["failures"]
    assert await build(settings, events, [len(events)]) == one_by_one
    assert await build(settings, events, [3, 50, 7, 500, 1]) == one_by_one
