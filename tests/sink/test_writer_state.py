"""The writer's in-memory job states: never a different row than reading the tables back."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from projections.accounting import account
from projections.history import is_job_event, unique
from schemas.events import Event, JobSubmitted, MeterTick
from schemas.spec import JobSpec
from services.settings import Settings
from services.sink.tables import upsert
from services.sink.writer import ReadModelWriter
from tests.sink.pg import private_schema
from tests.sink.scenario import at, run_facts
from tests.sink.test_writer_batches import build, stream, tables, topic

pytestmark = pytest.mark.integration


class RollbackError(Exception):
    """Raised inside a transaction to roll it back."""


def records(settings: Settings, events: list[Any]) -> list[Any]:
    return [
        SimpleNamespace(topic=topic(settings, e), value=e, partition=0, offset=i)
        for i, e in enumerate(events)
    ]


@pytest.mark.parametrize("seed", [3, 4])
async def test_states_kept_in_memory_give_the_rows_of_states_read_back(
    pg: tuple[Settings, asyncpg.Pool], seed: int
) -> None:
    settings, _ = pg
    events = stream(seed)
    sizes = [3, 50, 7, 500, 1]
    # cache_jobs=0: every batch reads the states it needs back from the tables.
    assert await build(settings, events, sizes, cache_jobs=0) == await build(
        settings, events, sizes
    )


async def test_a_rolled_back_batch_leaves_nothing_in_memory(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, _ = pg
    events = stream(5)
    third = len(events) // 3
    parts = [events[:third], events[third : 2 * third], events[2 * third :]]
    expected = await build(settings, events, [third])
    async with private_schema(settings) as (scoped, pool):
        writer = ReadModelWriter(scoped)
        async with pool.acquire() as conn, conn.transaction():
            await writer.apply(conn, records(scoped, parts[0]))
        # The second part is applied, then its transaction rolls back (a crash mid-batch) ...
        with pytest.raises(RollbackError):
            async with pool.acquire() as conn, conn.transaction():
                await writer.apply(conn, records(scoped, parts[1]))
                raise RollbackError
        assert len(writer.cache) > 0
        # ... and is delivered again, in two batches of one transaction, with the rest.
        async with pool.acquire() as conn, conn.transaction():
            await writer.apply(conn, records(scoped, parts[1][:5]))
            await writer.apply(conn, records(scoped, parts[1][5:]))
        async with pool.acquire() as conn, conn.transaction():
            await writer.apply(conn, records(scoped, parts[2]))
        assert await tables(pool) == expected


async def test_a_writer_moved_to_another_schema_forgets_what_it_knew(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, _ = pg
    events = stream(6)
    half = len(events) // 2
    expected = await build(settings, events, [half])
    writer = ReadModelWriter(settings)
    async with (
        private_schema(settings) as (scoped, pool),
        pool.acquire() as conn,
        conn.transaction(),
    ):
        await writer.apply(conn, records(scoped, events[:half]))
    async with private_schema(settings) as (scoped, pool):
        for part in (events[:half], events[half:]):
            async with pool.acquire() as conn, conn.transaction():
                await writer.apply(conn, records(scoped, part))
        assert await tables(pool) == expected


async def test_accounting_rows_are_the_account_of_the_whole_history(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, _ = pg
    events = stream(7)
    async with private_schema(settings) as (scoped, pool):
        writer = ReadModelWriter(scoped)
        for i in range(0, len(events), 9):
            async with pool.acquire() as conn, conn.transaction():
                await writer.apply(conn, records(scoped, events[i : i + 9]))
        async with pool.acquire() as conn:
            stored = {
                r["job_id"]: json.loads(r["record"])
                for r in await conn.fetch("SELECT job_id, record FROM accounting_records")
            }
    histories: dict[str, list[Event]] = {}
    ticks: dict[str, list[MeterTick]] = {}
    for e in unique(events):
        if isinstance(e, MeterTick):
            ticks.setdefault(e.job_id, []).append(e)
        elif is_job_event(e):
            histories.setdefault(e.job_id, []).append(e)
    assert stored and set(stored) == set(histories)
    for job_id, history in histories.items():
        expected = account(history, ticks.get(job_id, []))
        assert stored[job_id] == expected.model_dump(mode="json"), job_id


async def test_int_array_columns_survive_the_batched_upsert(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    _, pool = pg
    line = {
        "job_id": "job-x",
        "attempt": 1,
        "node_id": "",
        "held_from": None,
        "released_at": None,
        "held_seconds": 1.0,
        "gpu_count": 1,
        "gpu_model": "",
        "gpu_seconds": 1.0,
        "metered_gpu_seconds": 1.0,
        "tick_count": 2,
        "missing_ticks": [1, 3],
        "attribution": "",
        "failure_class": "",
        "billable_gpu_seconds": 1.0,
        "credited_gpu_seconds": 0.0,
        "reconciled": True,
        "provider": "aws",
        "region": "eu-west-1",
    }
    async with pool.acquire() as conn:
        await upsert(
            conn,
            "accounting_attempts",
            [line, {**line, "attempt": 2, "missing_ticks": []}],
            ["job_id", "attempt"],
        )
        got = await conn.fetch(
            "SELECT attempt, missing_ticks FROM accounting_attempts ORDER BY attempt"
        )
    assert [(r["attempt"], r["missing_ticks"]) for r in got] == [(1, [1, 3]), (2, [])]


def test_job_event_payloads_are_the_models_json() -> None:
    from services.sink.rows import dump

    for event in run_facts("job-1", exit_code=1).all():
        assert json.loads(dump(event)) == event.model_dump(mode="json")


async def test_a_second_job_submitted_is_kept_out_of_the_first_jobs_rows(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, _ = pg
    script = run_facts("job-resubmitted")
    events = script.all()
    intruder = JobSubmitted(
        job_id="job-resubmitted",
        occurred_at=at(1.5),
        producer="api/x",
        tenant="other",
        spec=JobSpec(image="gridledger/python:latest", env={"THEIRS": "1"}),
    )
    clean = await build(settings, events, [len(events)])
    attacked = await build(settings, [events[0], intruder, *events[1:], intruder], [2, 5])
    for table in ("job_events", "attempts", "accounting_records", "failures"):
        assert attacked[table] == clean[table], table
    (row,) = attacked["jobs"]
    assert "THEIRS" not in row and '"tenant": "other"' not in row
    assert "a second JobSubmitted for this job id; ignored" in row and intruder.event_id in row
