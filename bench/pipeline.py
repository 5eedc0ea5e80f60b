"""Pipeline: simulated agent load through the processors; throughput and projection lag.

A processors worker (all five processors, one process, started like in
production with ``gridledger processors``) consumes simulated job histories
(:mod:`services.simulator.histories`: scheduler + agent facts, heartbeats, log
chunks and meter ticks) that are offered at a fixed rate. Per job, the lag is
from the append of its last fact (ComputeReleased) until both its JobView on
``job-state`` is terminal (the classifier's decision folded in) and its
AccountingRecord on ``accounting`` is final. The baseline sends the same
pre-encoded records at the same rate with a raw aiokafka producer and times
them to a raw aiokafka consumer on the same broker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.common import Result, isolated, peak_rss_mb, target
from bench.load import Encoded, encode, histories
from schemas import codec
from schemas.topics import COMPACTED_TOPICS
from schemas.views import AccountingRecord, JobView
from services.ledger import Ledger
from services.ops.specs import ServiceSpec
from services.ops.supervisor import Supervisor
from services.settings import Settings
from services.stats import summary

SLICE_S = 0.01


async def offer(
    producer: AIOKafkaProducer, records: list[Encoded], rate: float, sent_at: dict[str, float]
) -> tuple[float, float]:
    """Send ``records`` at ``rate`` per second; note when each job's last record went out."""
    per_slice = max(1, round(rate * SLICE_S))
    began = time.perf_counter()
    for i in range(0, len(records), per_slice):
        for r in records[i : i + per_slice]:
            await producer.send(r.topic, value=r.value, key=r.key, headers=r.headers)
            if r.last:
                sent_at[r.job_id] = time.perf_counter()
        due = began + (i + per_slice) / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await producer.flush()
    return began, time.perf_counter()


async def watch(
    settings: Settings, jobs: set[str], seen: dict[str, float], stop: asyncio.Event
) -> None:
    """Note when each job is terminal on job-state and final on accounting (both)."""
    state_at: dict[str, float] = {}
    account_at: dict[str, float] = {}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [
            TopicPartition(settings.topic(t), p)
            for t in sorted(COMPACTED_TOPICS)
            for p in range(settings.job_partitions)
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100, max_records=5000)
            now = time.perf_counter()
            for raws in batch.values():
                for raw in raws:
                    key = raw.key.decode()
                    if key not in jobs or raw.value is None or key in seen:
                        continue
                    value = codec.decode(raw.value)
                    if isinstance(value, JobView) and value.terminal_at is not None:
                        state_at.setdefault(key, now)
                    elif isinstance(value, AccountingRecord) and value.final:
                        account_at.setdefault(key, now)
                    if key in state_at and key in account_at:
                        seen[key] = max(state_at[key], account_at[key])
    finally:
        await consumer.stop()


async def through_processors(
    settings: Settings, records: list[Encoded], warm: list[Encoded], rate: float, result: Result
) -> dict[str, Any]:
    """Offer ``records`` at ``rate`` to a processors worker; throughput and per-job lag."""
    services = Supervisor(settings, log_dir=settings.home / "bench" / settings.pg_schema)
    services.start(ServiceSpec("processors", ["processors"]))
    try:
        async with Ledger(settings, "bench-pipeline") as ledger:
            jobs = {r.job_id for r in records} | {r.job_id for r in warm}
            seen: dict[str, float] = {}
            sent_at: dict[str, float] = {}
            stop = asyncio.Event()
            watcher = asyncio.create_task(watch(settings, jobs, seen, stop))
            # Warm up: the worker joins its groups; wait until a first batch is visible.
            warm_jobs = {r.job_id for r in warm}
            await offer(ledger.producer, warm, rate, sent_at)
            deadline = time.perf_counter() + 120
            while not warm_jobs <= set(seen) and time.perf_counter() < deadline:
                services.check_alive()
                await asyncio.sleep(0.1)
            timed = {r.job_id for r in records}
            began, sent = await offer(ledger.producer, records, rate, sent_at)
            deadline = time.perf_counter() + 300
            while not timed <= set(seen) and time.perf_counter() < deadline:
                services.check_alive()
                await asyncio.sleep(0.05)
            stop.set()
            await watcher
        result.peak_rss_mb["processors"] = peak_rss_mb(services.children["processors"].pids[-1])
    finally:
        services.stop()
    done = [j for j in timed if j in seen]
    lags = [seen[j] - sent_at[j] for j in done]
    last = max((seen[j] for j in done), default=sent)
    result.samples["pipeline_lag"] = lags
    job_events = sum(1 for r in records if r.topic == settings.topic("job-events"))
    return {
        "offered_events_per_s": rate,
        "events": len(records),
        "job_events": job_events,
        "jobs": len(timed),
        "jobs_visible": len(done),
        "send_s": round(sent - began, 3),
        "achieved_send_events_per_s": len(records) / (sent - began),
        "drain_s": round(last - began, 3),
        "events_per_s": len(records) / (last - began),
        "lifecycle_events_per_s": job_events / (last - began),
        "lag": summary(lags),
    }


async def raw(settings: Settings, records: list[Encoded], rate: float) -> dict[str, Any]:
    """The same bytes at the same rate: raw aiokafka producer -> raw consumer."""
    topic = settings.topic("job-events")
    n = len(records)
    remap = [Encoded(topic, r.key, r.value, r.headers, r.job_id, r.last) for r in records]
    lat: list[float] = []
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True, linger_ms=2
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await producer.start()
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(settings.job_partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        last = 0.0

        async def consume() -> None:
            nonlocal got, last
            while got < n:
                batch = await consumer.getmany(timeout_ms=100, max_records=5000)
                now = time.time()
                for raws in batch.values():
                    for r in raws:
                        lat.append(now - r.timestamp / 1000)
                        got += 1
                last = time.perf_counter()

        task = asyncio.create_task(consume())
        began, sent = await offer(producer, remap, rate, {})
        await asyncio.wait_for(task, 120)
    finally:
        await producer.stop()
        await consumer.stop()
    return {
        "events": n,
        "events_per_s": n / (last - began),
        "achieved_send_events_per_s": n / (sent - began),
        "lag": summary(lat),
    }


LAG_PHASES = (("processors_below_capacity", 500.0, 20.0), ("processors_at_10000", 10_000.0, 4.0))
"""(figure key, offered events/s, seconds) of the full run's fixed-rate lag phases. The
saturated phase's lag is a backlog's (records wait for the worker), so the lag goal is
judged at these rates instead."""


KEEP_SETTLED = 500
"""``processors_keep_settled`` of the full run's bounded-store phase (the default keeps
4,096 settled jobs, more than the saturated phase's 3,862)."""


async def run(settings: Settings, quick: bool) -> Result:
    """The pipeline benchmark (see the module docstring)."""
    rate, seconds = (2_000.0, 3.0) if quick else (20_000.0, 4.0)
    result = Result("pipeline", quick, params={"offered_events_per_s": rate, "seconds": seconds})
    async with isolated(settings) as scoped, Ledger(scoped, "bench-pipeline-encode") as ledger:
        warm = encode(ledger, histories(200, "warm"))
        records = encode(ledger, histories(int(rate * seconds), "job"))
        result.params.update(events=len(records), jobs=sum(r.last for r in records))
        result.figures["processors"] = await through_processors(scoped, records, warm, rate, result)
    if not quick:
        # The same worker at fixed offered rates: the lag a user sees when it keeps up (500/s)
        # and at the rate the lag goal is set for (10,000/s).
        for key, offered, secs in LAG_PHASES:
            async with isolated(settings) as scoped, Ledger(scoped, f"bench-{key}") as ledger:
                warm = encode(ledger, histories(200, "warm"))
                light = encode(ledger, histories(int(offered * secs), key))
                sub = Result(f"pipeline-{key}", quick)
                result.figures[key] = await through_processors(scoped, light, warm, offered, sub)
                result.samples[f"pipeline_lag_{key}"] = sub.samples["pipeline_lag"]
        # The saturated load again with a worker that keeps only KEEP_SETTLED settled jobs:
        # what a bounded store costs in throughput and saves in peak memory.
        async with (
            isolated(settings, processors_keep_settled=KEEP_SETTLED) as scoped,
            Ledger(scoped, "bench-pipeline-keep") as ledger,
        ):
            warm = encode(ledger, histories(200, "warm"))
            again = encode(ledger, histories(int(rate * seconds), "keep"))
            sub = Result("pipeline-keep", quick)
            kept = await through_processors(scoped, again, warm, rate, sub)
            kept["keep_settled"] = KEEP_SETTLED
            kept["peak_rss_mb"] = sub.peak_rss_mb["processors"]
            result.figures["processors_keep_settled"] = kept
            kept["default_peak_rss_mb"] = result.peak_rss_mb["processors"]
    async with isolated(settings) as scoped:
        result.baseline["raw_aiokafka"] = await raw(scoped, records, rate)
    f, b = result.figures["processors"], result.baseline["raw_aiokafka"]
    result.ratios["lag_p99_over_raw"] = (
        round(f["lag"]["p99"] / b["lag"]["p99"], 2) if b["lag"]["p99"] else None
    )
    result.ratios["raw_over_processors_events_per_s"] = round(
        b["events_per_s"] / f["events_per_s"], 2
    )
    result.targets["events/s"] = target(f["events_per_s"], 20_000, at_least=True)
    for key, offered, _ in LAG_PHASES:
        if key in result.figures:
            p99 = result.figures[key]["lag"]["p99"]
            result.targets[f"lag p99 at {offered:,.0f}/s (s)"] = target(p99, 1.0, at_least=False)
    result.notes.append(
        "events = all simulated records (job-events, heartbeats, log-chunks, meter-ticks); "
        "lifecycle_events_per_s counts job-events only. Lag per job: last fact appended -> "
        "terminal JobView and final AccountingRecord both visible"
    )
    return result
