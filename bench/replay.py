"""Replay: rebuild every job's state and accounting from the ledger, events per second.

The gridledger path is what ``gridledger replay`` does before it touches
Postgres: :meth:`Ledger.read_partitions` over job-events, heartbeats, meter-ticks
and log-chunks (decode with the one codec: Avro with writer->reader schema
resolution, then pydantic), then per job ``projections.job_state.project`` and
``projections.accounting.account``. The baseline reads the same records with a
plain aiokafka consumer and decodes each body with ``fastavro.schemaless_reader``
and its writer schema only (no resolution, no models, no folds).
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from typing import Any

import fastavro
from aiokafka import TopicPartition

from bench.common import Result, isolated, self_peak_rss_mb, target
from bench.load import load
from projections.accounting import account
from projections.job_state import project
from schemas import codec
from schemas.events import Event, MeterTick
from services.ledger import Ledger
from services.settings import Settings

TOPICS = ("job-events", "heartbeats", "meter-ticks", "log-chunks")


async def replay(ledger: Ledger) -> dict[str, Any]:
    histories: dict[str, list[Event]] = defaultdict(list)
    ticks: dict[str, list[MeterTick]] = defaultdict(list)
    count = 0
    began = time.perf_counter()
    for suffix in TOPICS:
        async for record in ledger.read_partitions(ledger.settings.topic(suffix)):
            count += 1
            value = record.value
            if isinstance(value, MeterTick):
                ticks[record.key].append(value)
            elif suffix == "job-events" and isinstance(value, Event):
                histories[record.key].append(value)
    read_s = time.perf_counter() - began
    terminal = 0
    for job_id, history in histories.items():
        view = project(history)
        account(history, ticks.get(job_id, []), view=view)
        terminal += view is not None and view.terminal_at is not None
    total_s = time.perf_counter() - began
    return {
        "events": count,
        "jobs": len(histories),
        "read_decode_s": round(read_s, 3),
        "read_decode_events_per_s": count / read_s,
        "total_s": round(total_s, 3),
        "events_per_s": count / total_s,
        "folded_jobs": len(histories),
    }


async def raw_baseline(ledger: Ledger) -> dict[str, Any]:
    writers = codec.registry().writers
    count = 0
    began = time.perf_counter()
    consumer = ledger.consumer()
    await consumer.start()
    try:
        for suffix in TOPICS:
            topic = ledger.settings.topic(suffix)
            tps = [TopicPartition(topic, p) for p in range(await ledger.partitions(topic))]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            await consumer.seek_to_beginning(*tps)
            pending = {tp for tp in tps if ends[tp] > 0}
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=5000)
                for tp, raws in batch.items():
                    for raw in raws:
                        schema = writers[int.from_bytes(raw.value[2:10], "little")].parsed
                        fastavro.schemaless_reader(io.BytesIO(raw.value[10:]), schema)
                        count += 1
                    if raws and raws[-1].offset + 1 >= ends[tp]:
                        pending.discard(tp)
    finally:
        await consumer.stop()
    elapsed = time.perf_counter() - began
    return {"events": count, "total_s": round(elapsed, 3), "events_per_s": count / elapsed}


async def run(settings: Settings, quick: bool) -> Result:
    size = 20_000 if quick else 300_000
    result = Result("replay", quick, params={"events_requested": size})
    async with isolated(settings) as scoped, Ledger(scoped, "bench-replay") as ledger:
        began = time.perf_counter()
        loaded = await load(ledger, size)
        result.params.update(
            events=loaded.events, jobs=loaded.jobs, load_s=round(time.perf_counter() - began, 2)
        )
        result.figures["replay"] = await replay(ledger)
        result.baseline["raw_fastavro"] = await raw_baseline(ledger)
    g = result.figures["replay"]["events_per_s"]
    b = result.baseline["raw_fastavro"]["events_per_s"]
    result.ratios["raw_over_replay"] = round(b / g, 2) if g else None
    result.targets["replay events/s"] = target(g, 100_000, at_least=True)
    result.peak_rss_mb["bench process (replay in-process)"] = self_peak_rss_mb()
    if not quick:
        result.notes.append(
            "sized at 300,000 events instead of 1,000,000 to fit a few minutes on the shared "
            "2-core machine (loading costs more than replaying); events/s is size-independent "
            "beyond a few thousand events per partition"
        )
    return result
