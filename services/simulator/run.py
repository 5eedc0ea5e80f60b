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
from dataclasses import dataclass, field
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


@dataclass
class _Tally:
    """What the simulator read back of the jobs it submitted."""

    wanted: set[str]
    submitted_at: float
    ends: dict[str, str] = field(default_factory=dict)
    """Job -> the type of its terminal event."""
    to_terminal: list[float] = field(default_factory=list)
    classes: Counter[str] = field(default_factory=Counter)
    seen: set[str] = field(default_factory=set)
    lifecycle: int = 0

    def note(self, key: str, event: object) -> None:
        """Count one job-event read back (of a job it submitted; others are ignored)."""
        if key not in self.wanted:
            return
        self.lifecycle += 1
        if isinstance(event, FailureClassified) and event.event_id not in self.seen:
            self.seen.add(event.event_id)  # re-processing appends duplicates
            self.classes[event.failure_class] += 1
        if isinstance(event, TERMINAL_EVENTS) and key not in self.ends:
            self.ends[key] = type(event).__name__
            self.to_terminal.append(time.monotonic() - self.submitted_at)

    def summary(self, fleet: SimFleet, nodes: int, jobs: int, elapsed: float) -> dict[str, Any]:
        """The run's summary (see the module's docstring)."""
        return {
            "nodes": nodes,
            "gpus": fleet.gpu_count,
            "jobs": jobs,
            "terminal": len(self.ends),
            "elapsed_s": round(elapsed, 2),
            "jobs_per_s": round(len(self.ends) / elapsed, 1) if elapsed else 0.0,
            "time_to_terminal_s": {
                q: round(v, 2)
                for q, v in summary(self.to_terminal).items()
                if q in ("p50", "p99", "max")
            },
            "outcomes": dict(Counter(self.ends.values())),
            "failure_classes": dict(self.classes),
            "attempts_accepted": fleet.stats.accepted,
            "attempt_ends": fleet.stats.finished,
            "lost_nodes": fleet.stats.lost_nodes,
            "facts_emitted": fleet.stats.emitted,
            "facts_failed": fleet.stats.failed,
            "job_events_seen": self.lifecycle,
        }


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
            tally = _Tally({e.job_id for e in submitted}, time.monotonic())
            next_report = began + 5
            while len(tally.ends) < len(tally.wanted) and time.monotonic() - began < timeout_s:
                batch = await consumer.getmany(timeout_ms=500, max_records=5000)
                for raws in batch.values():
                    for raw in raws:
                        record = await ledger.decode(raw, "simulator")
                        if record is not None:
                            tally.note(record.key, record.value)
                if time.monotonic() >= next_report:
                    say(
                        f"  {time.monotonic() - began:5.0f} s: {len(tally.ends)}/{jobs} terminal, "
                        f"{fleet.stats.accepted} attempts accepted, {fleet.stats.emitted} facts"
                    )
                    next_report += 5
            elapsed = time.monotonic() - began
        finally:
            await consumer.stop()
            await fleet.stop()
    return tally.summary(fleet, nodes, jobs, elapsed)


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
