"""Replay: rebuild every job's state and accounting from the ledger, events per second.

The gridledger path is the one ``gridledger replay --verify`` runs before it
compares anything: :func:`services.replay.rebuild.rebuild`, which reads the
topics the folds take (job-events and meter-ticks; heartbeats and log chunks are
inputs of no fold) with :meth:`Ledger.read_partitions`, decodes with the one
codec, and per job calls ``projections.job_state.project`` and the accounting
processor's ``account``. ``replay`` runs one worker process per core (partition
p of every job-keyed topic holds whole jobs) that send back only each job's
status, as ``--verify`` uses them (sending every JobView and AccountingRecord
back costs more than rebuilding them); ``serial`` is one worker in-process
keeping every model (the scaling is judged against it), and
``with_decisions`` adds the decision re-derivation ``--verify`` also does.
The baselines read the same records with a plain aiokafka consumer and decode
each body with ``fastavro.schemaless_reader`` and its writer schema
only (no models, no folds), on one core: over the folded topics (the records
the replay reads) and over all four job topics (the figure of earlier runs).

``python -m bench.replay --growth 100000,300000,1000000`` measures how the cost
grows instead: it fills one ledger step by step up to each size (loading in
chunks, so the bench process stays small) and runs the 2-worker rebuild at each,
reporting time, records/s and each worker's peak RSS; saved as
``bench/results/replay-growth.json``. Not part of ``gridledger bench`` (loading a
million events takes minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import time
from typing import Any

import fastavro
from aiokafka import TopicPartition

from bench.common import RESULTS, Result, isolated, self_peak_rss_mb, target
from bench.load import load
from schemas import codec
from schemas.topics import BY_SUFFIX, FOLDED_TOPICS, HISTORY_TOPICS
from schemas.views import TERMINAL_STATUSES
from services.ledger import Ledger
from services.replay.rebuild import Options, default_workers, rebuild
from services.settings import Settings

ALL_TOPICS = tuple(t for t in HISTORY_TOPICS if BY_SUFFIX[t].key == "job")


async def replay(
    ledger: Ledger, workers: int = 1, ledger_events: int = 0, options: Options | None = None
) -> dict[str, Any]:
    """One rebuild of every job; ``ledger_events``: all events of the job topics."""
    options = options or Options()
    began = time.perf_counter()
    rebuilt = await rebuild(ledger.settings, options, workers=workers)
    total_s = time.perf_counter() - began
    cpu_s = rebuilt.cpu_s  # in the worker(s), start-up excluded; total_s includes it
    figures: dict[str, Any] = {
        "workers": rebuilt.workers,
        "models_returned": options.keep_models,
        "events": rebuilt.events,
        "records_by_topic": rebuilt.records,
        "jobs": len(rebuilt.statuses),
        "terminal_jobs": sum(s in TERMINAL_STATUSES for s in rebuilt.statuses.values()),
        "total_s": round(total_s, 3),
        "events_per_s": rebuilt.events / total_s,
        "cpu_s": round(cpu_s, 3),
        "cpu_us_per_event": round(cpu_s / rebuilt.events * 1e6, 1) if rebuilt.events else None,
        "peak_rss_mb_per_worker": round(rebuilt.peak_rss_mb, 1),
    }
    if options.decisions:
        figures["jobs_with_drift"] = len(rebuilt.drift)
    if ledger_events:
        figures["ledger_events"] = ledger_events
        figures["ledger_events_per_s"] = ledger_events / total_s
    return figures


async def raw_baseline(ledger: Ledger, topics: tuple[str, ...]) -> dict[str, Any]:
    """The baseline: read and decode the same topics with nothing else done."""
    writers = codec.registry().writers
    count = 0
    began = time.perf_counter()
    consumer = ledger.consumer()
    await consumer.start()
    try:
        for suffix in topics:
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
    return {
        "topics": list(topics),
        "events": count,
        "total_s": round(elapsed, 3),
        "events_per_s": count / elapsed,
    }


async def run(settings: Settings, quick: bool) -> Result:
    """The replay benchmark (see the module docstring)."""
    size = 20_000 if quick else 300_000
    workers = default_workers()
    result = Result("replay", quick, params={"events_requested": size, "workers": workers})
    async with isolated(settings) as scoped, Ledger(scoped, "bench-replay") as ledger:
        began = time.perf_counter()
        loaded = await load(ledger, size)
        result.params.update(
            events=loaded.events,
            jobs=loaded.jobs,
            by_topic={t.removeprefix(scoped.topic_prefix): n for t, n in loaded.by_topic.items()},
            load_s=round(time.perf_counter() - began, 2),
        )
        # Serial first, then parallel, then serial again: the machine is shared, so the
        # scaling is judged against the serial run nearer in time as well.
        summary = Options(keep_models=False)
        result.figures["serial"] = await replay(ledger, 1, loaded.events)
        result.figures["replay"] = await replay(ledger, workers, loaded.events, summary)
        result.figures["serial_again"] = await replay(ledger, 1, loaded.events)
        result.figures["with_decisions"] = await replay(
            ledger, workers, loaded.events, Options(decisions=True, keep_models=False)
        )
        result.baseline["raw_fastavro"] = await raw_baseline(ledger, FOLDED_TOPICS)
        result.baseline["raw_fastavro_all_topics"] = await raw_baseline(ledger, ALL_TOPICS)
    g = result.figures["replay"]["events_per_s"]
    b = result.baseline["raw_fastavro"]["events_per_s"]
    serial = max(result.figures[k]["events_per_s"] for k in ("serial", "serial_again"))
    result.ratios["raw_over_replay"] = round(b / g, 2) if g else None
    result.ratios["parallel_over_best_serial"] = round(g / serial, 2) if serial else None
    result.targets["replay events/s"] = target(g, 100_000, at_least=True)
    result.peak_rss_mb["bench process (replay in-process)"] = self_peak_rss_mb()
    result.notes.append(
        "events_per_s counts the records the replay reads and decodes (job-events and "
        "meter-ticks); ledger_events_per_s counts every event of the four job topics, "
        "including the heartbeats and log chunks that no fold takes and replay does not read"
    )
    if not quick:
        result.notes.append(
            "sized at 300,000 events instead of 1,000,000 to fit a few minutes on the shared "
            "2-core machine (loading costs more than replaying); events/s is size-independent "
            "beyond a few thousand events per partition"
        )
    return result


GROWTH_CHUNK = 100_000
"""Events encoded and sent at a time while filling the growth ledger."""


async def growth(settings: Settings, sizes: list[int], workers: int) -> Result:
    """The rebuild at each size of one ledger filled step by step (``--growth``)."""
    result = Result("replay-growth", False, params={"sizes": sizes, "workers": workers})
    async with isolated(settings) as scoped, Ledger(scoped, "bench-replay") as ledger:
        events, jobs, chunk, load_s = 0, 0, 0, 0.0
        for size in sorted(sizes):
            began = time.perf_counter()
            while events < size:
                loaded = await load(ledger, min(GROWTH_CHUNK, size - events), f"job-c{chunk:03d}")
                events, jobs, chunk = events + loaded.events, jobs + loaded.jobs, chunk + 1
            load_s += time.perf_counter() - began
            figures = await replay(ledger, workers, events, Options(keep_models=False))
            result.figures[f"{size:,} events"] = {
                "jobs": jobs,
                "load_s": round(load_s, 1),
                **figures,
            }
            print(f"{events:,} events: {_fmt_growth(figures)}", flush=True)
    result.peak_rss_mb["bench process (loading, workers excluded)"] = self_peak_rss_mb()
    result.notes.append(
        "each size is the same ledger grown; peak_rss_mb_per_worker is the largest worker's "
        "VmHWM (ru_maxrss) for a rebuild that keeps every history of its partitions in memory"
    )
    return result


def _fmt_growth(figures: dict[str, Any]) -> str:
    return (
        f"{figures['total_s']} s, {figures['events_per_s']:,.0f} records/s "
        f"({figures.get('ledger_events_per_s', 0):,.0f} ledger events/s), "
        f"{figures['cpu_us_per_event']} us CPU/record, "
        f"worker peak RSS {figures['peak_rss_mb_per_worker']} MiB"
    )


def main() -> None:
    """``python -m bench.replay``: the benchmark from the command line."""
    from services.settings import load_settings

    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__)
    parser.add_argument(
        "--growth", required=True, help="comma-separated ledger sizes, e.g. 100000,1000000"
    )
    parser.add_argument("--workers", type=int, default=default_workers())
    args = parser.parse_args()
    sizes = [int(n) for n in args.growth.replace("_", "").split(",")]
    began = time.perf_counter()
    result = asyncio.run(growth(load_settings(), sizes, args.workers))
    result.elapsed_s = time.perf_counter() - began
    print("\n".join(result.lines()))
    print(f"  saved {result.save(RESULTS)}")


if __name__ == "__main__":
    main()
