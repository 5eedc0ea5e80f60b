"""Run a simulation: a fleet, a batch of submitted jobs, wait until every job is terminal.

The summary says how fast the platform got through them: jobs ended per second of
the run and each job's time to terminal, from its submission (all are submitted
at once) to the moment the simulator read its terminal event back from the ledger.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from schemas.events import TERMINAL_EVENTS, FailureClassified, JobSubmitted
from schemas.spec import JobSpec
from services.clock import utcnow
from services.ledger import Ledger, TopicPartition
from services.settings import Settings
from services.simulator.fleet import SimFleet
from services.simulator.mix import JobMix
from services.stats import summary

SHORT_TIMINGS = {
    # So node losses are detected within seconds (the watchdog and scheduler read these).
    "GRIDLEDGER_WATCHDOG_SILENCE_S": "3",
    "GRIDLEDGER_WATCHDOG_LOST_AFTER_S": "3",
    "GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S": "10",
    "GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S": "30",
}


def sim_spec(gpus: int) -> JobSpec:
    """The spec of a simulated job: nothing runs it, so only its GPU count matters."""
    return JobSpec(
        name="sim",
        image="sim/train:latest",
        command=["python", "train.py"],
        resources={"gpus": gpus},
        retry={"backoff_s": 0.5, "backoff_cap_s": 2.0},
    )


async def simulate(
    settings: Settings,
    nodes: int,
    jobs: int,
    mix: JobMix,
    *,
    timeout_s: float = 300.0,
    heartbeat_interval_s: float = 1.0,
    tick_s: float = 1.0,
    gpus_per_node: int = 8,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Start the fleet, submit ``jobs`` jobs, wait for their terminal events; a summary."""
    terminal_names = {cls.__name__ for cls in TERMINAL_EVENTS}
    async with Ledger(settings, "simulator") as ledger:
        fleet = SimFleet(
            ledger,
            nodes,
            mix,
            gpus_per_node=gpus_per_node,
            heartbeat_interval_s=heartbeat_interval_s,
            tick_s=tick_s,
        )
        topic = settings.topic("job-events")
        tps = [TopicPartition(topic, p) for p in range(await ledger.partitions(topic))]
        consumer = ledger.consumer()
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
            await fleet.start()
            say(f"fleet: {nodes} nodes, {fleet.gpu_count} GPUs; submitting {jobs} jobs")
            began = time.monotonic()
            submitted = [
                JobSubmitted(
                    job_id=f"sim-{began:.0f}-{i:06d}",
                    occurred_at=utcnow(),
                    producer="simulator",
                    tenant="sim",
                    submitter="simulator",
                    spec=sim_spec(mix.gpu_count(i)),
                )
                for i in range(jobs)
            ]
            await fleet.emit(submitted)
            submitted_at = time.monotonic()
            wanted = {e.job_id for e in submitted}
            ends: dict[str, str] = {}
            to_terminal: list[float] = []
            classes: Counter[str] = Counter()
            seen: set[str] = set()
            lifecycle = 0
            next_report = began + 5
            while len(ends) < len(wanted) and time.monotonic() - began < timeout_s:
                batch = await consumer.getmany(timeout_ms=500, max_records=5000)
                for raws in batch.values():
                    for raw in raws:
                        record = await ledger.decode(raw, "simulator")
                        if record is None or record.key not in wanted:
                            continue
                        lifecycle += 1
                        event = record.value
                        if isinstance(event, FailureClassified) and event.event_id not in seen:
                            seen.add(event.event_id)  # re-processing appends duplicates
                            classes[event.failure_class] += 1
                        if type(event).__name__ in terminal_names and record.key not in ends:
                            ends[record.key] = type(event).__name__
                            to_terminal.append(time.monotonic() - submitted_at)
                if time.monotonic() >= next_report:
                    say(
                        f"  {time.monotonic() - began:5.0f} s: {len(ends)}/{jobs} terminal, "
                        f"{fleet.stats.accepted} attempts accepted, {fleet.stats.emitted} facts"
                    )
                    next_report += 5
            elapsed = time.monotonic() - began
        finally:
            await consumer.stop()
            await fleet.stop()
    return {
        "nodes": nodes,
        "gpus": fleet.gpu_count,
        "jobs": jobs,
        "terminal": len(ends),
        "elapsed_s": round(elapsed, 2),
        "jobs_per_s": round(len(ends) / elapsed, 1) if elapsed else 0.0,
        "time_to_terminal_s": {
            q: round(v, 2) for q, v in summary(to_terminal).items() if q in ("p50", "p99", "max")
        },
        "outcomes": dict(Counter(ends.values())),
        "failure_classes": dict(classes),
        "attempts_accepted": fleet.stats.accepted,
        "attempt_ends": fleet.stats.finished,
        "lost_nodes": fleet.stats.lost_nodes,
        "facts_emitted": fleet.stats.emitted,
        "facts_failed": fleet.stats.failed,
        "job_events_seen": lifecycle,
    }


def run_with_services(
    settings: Settings, log_dir: Any, coro_factory: Callable[[Settings], Any]
) -> Any:
    """Start a scheduler and a processors worker on ``settings`` around ``coro_factory``."""
    from services.ops.specs import ServiceSpec
    from services.ops.supervisor import Supervisor

    services = Supervisor(settings, log_dir=log_dir)
    try:
        services.start(ServiceSpec("scheduler", ["scheduler"], SHORT_TIMINGS))
        services.start(ServiceSpec("processors", ["processors"], SHORT_TIMINGS))
        return asyncio.run(coro_factory(settings))
    finally:
        services.stop()
