"""Sink: events per second into the Postgres read models, first pass and duplicate pass.

Loads simulated job histories (job-events, log-chunks, meter-ticks, heartbeats)
into bench topics, runs the real :class:`services.sink.consumer.Sink` (batches of
``sink_batch_max`` records, rows and offsets in one transaction) into a bench
schema until it has committed the end offsets. Then a second sink with another
consumer name re-reads every record into the same tables: every record is a
duplicate and must change nothing (idempotence), which the row counts confirm.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from bench.common import Result, deep_size, isolated, self_peak_rss_mb, target
from bench.load import load
from services.gc_tuning import tuned_gc
from services.ledger import Ledger
from services.settings import Settings
from services.sink import db
from services.sink.consumer import Sink, build_sink
from services.sink.tables import DERIVED_TABLES

TABLES = tuple(DERIVED_TABLES)


async def counts(pool: Any) -> dict[str, int]:
    async with pool.acquire() as conn:
        return {t: int(await conn.fetchval(f"SELECT count(*) FROM {t}")) for t in TABLES}


async def drain(sink: Sink) -> tuple[float, int, float]:
    """Run ``sink`` until it has committed every record present now.

    Returns (seconds, records, CPU seconds of this process meanwhile): the sink runs
    in-process, so CPU well below the wall time means it waited for Postgres.
    """
    ends = await sink.end_offsets()
    records = sum(ends.values())
    # The collector's settings of `gridledger sink` (services.sink.consumer.serve).
    with tuned_gc():
        began, cpu = time.perf_counter(), time.process_time()
        task = asyncio.create_task(sink.run())
        try:
            await sink.wait_until(ends, timeout=600)
            return time.perf_counter() - began, records, time.process_time() - cpu
        finally:
            sink.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)


async def run(settings: Settings, quick: bool) -> Result:
    size = 5_000 if quick else 60_000
    result = Result("sink", quick, params={"events_requested": size})
    async with isolated(settings) as scoped, Ledger(scoped, "bench-sink") as ledger:
        loaded = await load(ledger, size)
        result.params.update(
            events=loaded.events, jobs=loaded.jobs, batch_max=scoped.sink_batch_max
        )
        pool = await db.create_pool(scoped)
        try:
            sink = await build_sink(scoped, ledger, pool, consumer_name="bench")
            seconds, records, cpu = await drain(sink)
            first = await counts(pool)
            result.figures["first_pass"] = {
                "records": records,
                "s": round(seconds, 3),
                "cpu_s": round(cpu, 3),
                "cpu_us_per_record": round(cpu / records * 1e6, 1),
                "events_per_s": records / seconds,
                "batches": sink.applied_batches,
            }
            held = sink.writer.cache.held()
            size = deep_size(held)
            result.figures["memory_held"] = {
                "jobs_held": len(held),
                "capacity_jobs": sink.writer.cache.capacity,
                "mib": round(size / 2**20, 1),
                "kib_per_job": round(size / max(1, len(held)) / 1024, 1),
                "bound_mib": round(size / max(1, len(held)) * sink.writer.cache.capacity / 2**20),
            }
            dup = Sink(scoped, ledger, pool, consumer_name="bench-dup")
            seconds, records, cpu = await drain(dup)
            second = await counts(pool)
            result.figures["duplicate_pass"] = {
                "records": records,
                "s": round(seconds, 3),
                "cpu_s": round(cpu, 3),
                "events_per_s": records / seconds,
                "rows_changed": {t: second[t] - first[t] for t in TABLES if second[t] != first[t]},
            }
            result.figures["rows"] = second
        finally:
            await pool.close()
    result.peak_rss_mb["bench process (sink in-process)"] = self_peak_rss_mb()
    result.targets["sink events/s (first pass)"] = target(
        result.figures["first_pass"]["events_per_s"], 50_000, at_least=True
    )
    result.notes.append(
        "node-events are not part of the load (no nodes); heartbeats are not "
        "consumed by the sink, so records = job-events + log-chunks + meter-ticks"
    )
    return result
