"""Sink: events per second into the Postgres read models, first pass and duplicate pass.

Loads simulated job histories (job-events, log-chunks, meter-ticks, heartbeats)
into bench topics, runs the real :class:`services.sink.consumer.Sink` (batches of
``sink_batch_max`` records, rows and offsets in one transaction) into a bench
schema until it has committed the end offsets. Then a second sink with another
consumer name re-reads every record into the same tables: every record is a
duplicate and must change nothing (idempotence), which the row counts confirm.
The baseline reads the same records with a plain consumer, decodes each body with
fastavro and COPYs them into one table without indexes (:func:`raw_baseline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from typing import Any

import fastavro

from bench.common import Result, deep_size, isolated, self_peak_rss_mb, target
from bench.load import load
from schemas import codec
from services.gc_tuning import tuned_gc
from services.ledger import Ledger
from services.settings import Settings
from services.sink import db
from services.sink.consumer import Sink, build_sink
from services.sink.tables import DERIVED_TABLES

TABLES = tuple(DERIVED_TABLES)


async def counts(pool: Any) -> dict[str, int]:
    """Rows per table of the sink's schema."""
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


async def raw_baseline(sink: Sink, pool: Any) -> dict[str, Any]:
    """The same records with none of gridledger's work: what the bytes cost.

    A plain consumer on the sink's partitions, ``fastavro.schemaless_reader`` of each
    body with its writer schema, and a binary COPY of (topic, partition, offset,
    event_id, body) into one table without indexes, one transaction per batch of the
    sink's size: no models, no folds, no accounting, no keys to check.
    """
    writers = codec.registry().writers
    ends = await sink.end_offsets()
    tps = list(ends)
    count = 0
    async with pool.acquire() as conn:
        await conn.execute(
            "CREATE TABLE raw_baseline (topic text, partition integer, "
            "record_offset bigint, event_id text, body bytea)"
        )
        assert isinstance(sink.ledger, Ledger), "the bench reads the broker's raw records"
        consumer = sink.ledger.consumer()
        await consumer.start()
        try:
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            began, cpu = time.perf_counter(), time.process_time()
            pending = {tp for tp in tps if ends[tp] > 0}
            while pending:
                batch = await consumer.getmany(
                    *pending, timeout_ms=1000, max_records=sink.settings.sink_batch_max
                )
                rows = []
                for tp, raws in batch.items():
                    for raw in raws:
                        schema = writers[int.from_bytes(raw.value[2:10], "little")].parsed
                        body: Any = fastavro.schemaless_reader(io.BytesIO(raw.value[10:]), schema)
                        event_id = body.get("envelope", body).get("event_id", "")
                        rows.append((raw.topic, raw.partition, raw.offset, event_id, raw.value))
                    if raws and raws[-1].offset + 1 >= ends[tp]:
                        pending.discard(tp)
                async with conn.transaction():
                    await conn.copy_records_to_table("raw_baseline", records=rows)
                count += len(rows)
            seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        finally:
            await consumer.stop()
    return {
        "records": count,
        "s": round(seconds, 3),
        "cpu_us_per_record": round(cpu / max(1, count) * 1e6, 1),
        "events_per_s": count / seconds,
    }


async def run(settings: Settings, quick: bool) -> Result:
    """The sink benchmark (see the module docstring)."""
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
            result.baseline["raw_consume_decode_copy"] = await raw_baseline(sink, pool)
        finally:
            await pool.close()
    result.peak_rss_mb["bench process (sink in-process)"] = self_peak_rss_mb()
    raw = result.baseline["raw_consume_decode_copy"]["events_per_s"]
    first_pass = result.figures["first_pass"]["events_per_s"]
    result.ratios["raw_over_sink"] = round(raw / first_pass, 2) if first_pass else None
    result.targets["sink events/s (first pass)"] = target(
        result.figures["first_pass"]["events_per_s"], 50_000, at_least=True
    )
    result.notes.append(
        "node-events are not part of the load (no nodes); heartbeats are not "
        "consumed by the sink, so records = job-events + log-chunks + meter-ticks"
    )
    return result
