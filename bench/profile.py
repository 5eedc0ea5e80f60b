"""Profile the hot paths that miss their targets (pyinstrument; ``pip install pyinstrument``).

    python -m bench.profile replay|sink|processors|scheduler [EVENTS]

Writes ``bench/results/profiles/<name>.txt`` (a call tree, CPU time) and prints it.
Not part of ``gridledger bench``: profiling slows the code it measures.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from bench.common import RESULTS, isolated
from bench.load import encode, histories, load
from services.ledger import Ledger
from services.settings import load_settings


async def profile_replay(events: int) -> object:
    """Profile a replay of ``events`` events."""
    from bench.replay import replay

    async with isolated(load_settings()) as s, Ledger(s, "profile") as ledger:
        await load(ledger, events)
        return await _profiled(replay(ledger))


async def profile_sink(events: int) -> object:
    """Profile the sink applying ``events`` events."""
    from bench.sink import drain
    from services.sink import db
    from services.sink.consumer import build_sink

    async with isolated(load_settings()) as s, Ledger(s, "profile") as ledger:
        await load(ledger, events)
        pool = await db.create_pool(s)
        try:
            sink = await build_sink(s, ledger, pool, consumer_name="profile")
            return await _profiled(drain(sink))
        finally:
            await pool.close()


async def profile_processors(events: int) -> object:
    """Profile a processors worker over ``events`` events."""
    from services.processors import build_processors

    async with isolated(load_settings()) as s, Ledger(s, "profile") as ledger:
        records = encode(ledger, histories(events))
        for r in records:
            await ledger.producer.send(r.topic, value=r.value, key=r.key, headers=r.headers)
        await ledger.producer.flush()
        processors = build_processors(s)

        async def drain() -> None:
            await processors.start()
            target = {"job-state": sum(r.last for r in records)}
            began = time.monotonic()
            # Until every job has a view: count job-state records (one or more per job).
            while time.monotonic() - began < 300:
                ends = await _ends(ledger, s.topic("job-state"))
                if ends >= target["job-state"] * 2:
                    break
                await asyncio.sleep(0.5)

        try:
            return await _profiled(drain())
        finally:
            await processors.stop()


async def profile_scheduler(events: int) -> object:
    """Profile the scheduler placing a backlog through Kafka."""
    from bench.scheduling import through_kafka

    async with isolated(load_settings()) as s:
        return await _profiled(through_kafka(s, 1000, 10_000, 2000))


async def _ends(ledger: Ledger, topic: str) -> int:
    from aiokafka import TopicPartition

    consumer = ledger.consumer()
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(await ledger.partitions(topic))]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


async def _profiled(coro: object) -> object:
    from pyinstrument import Profiler

    profiler = Profiler(async_mode="enabled", interval=0.002)
    profiler.start()
    try:
        await coro  # type: ignore[misc]
    finally:
        profiler.stop()
    return profiler


def main() -> None:
    """``python -m bench.profile NAME [EVENTS]``: print where one path spends its time."""
    name = sys.argv[1]
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    runner = {
        "replay": profile_replay,
        "sink": profile_sink,
        "processors": profile_processors,
        "scheduler": profile_scheduler,
    }
    profiler: Any = asyncio.run(runner[name](events))
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    flat = profiler.output_text(unicode=False, color=False, flat=True, time="percent_of_total")
    text += "\n--- flat: self time per function, % of the total ---\n" + "\n".join(
        flat.splitlines()[:60]
    )
    out = RESULTS / "profiles" / f"{name}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
