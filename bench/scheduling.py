"""Placements per second: the pure decision core, and the scheduler service through Kafka.

Fleet: ``nodes`` 8-GPU nodes of five models, three providers; backlog: ``jobs``
queued jobs of 50 kinds (1-2 GPUs, 8-60 GiB, a provider preference on 30 %).
Pure: first pass (pre-flight + JobQueued + placements) and steady state (free
200 attempts, decide again, 20 rounds). Kafka: the real scheduler service
(:func:`services.scheduler.build_scheduler`) rebuilds from the topics and places
the backlog (decisions appended with acks=all), then a live phase frees
capacity with ComputeReleased events and times the placements that follow.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime, timedelta
from typing import Any

from bench.common import Result, isolated, self_peak_rss_mb, target
from schemas.events import (
    AttemptScheduled,
    ComputeReleased,
    Event,
    JobSubmitted,
    NodeHeartbeat,
    NodeRegistered,
)
from schemas.spec import JobSpec
from schemas.types import GpuDevice
from services.clock import utcnow
from services.ledger import Ledger
from services.scheduler import build_scheduler
from services.scheduler.core import SchedulerConfig, SchedulerState
from services.scheduler.inventory import FitChecker
from services.settings import Settings

MODELS = [("T4", 16), ("L4", 24), ("A100-40GB", 40), ("A100-80GB", 80), ("H100-80GB", 80)]


def fleet_events(nodes: int, at: datetime) -> list[Event]:
    """``nodes`` simulated 8-GPU nodes registered at ``at`` (five models, three providers)."""
    out: list[Event] = []
    for i in range(nodes):
        model, gb = MODELS[i % len(MODELS)]
        gpus = [GpuDevice(index=k, model=model, memory_total_mb=gb * 1024) for k in range(8)]
        out.append(
            NodeRegistered(
                node_id=f"n{i:05d}",
                occurred_at=at,
                inventory_source="declared",
                provider=f"p{i % 3}",
                region=f"r{i % 4}",
                gpus=gpus,
            )
        )
        out.append(
            NodeHeartbeat(
                node_id=f"n{i:05d}", occurred_at=at, seq=1, free_gpu_indices=list(range(8))
            )
        )
    return out


def job_events(jobs: int, at: datetime, prefix: str = "j") -> list[JobSubmitted]:
    """``jobs`` submissions of the benchmark's 50 kinds, reproducible (seeded)."""
    rnd = random.Random(1)
    kinds = [
        JobSpec(
            image="x",
            resources={"gpus": rnd.choice([1, 1, 2]), "min_vram_gb": rnd.choice([8, 16, 30, 60])},
            placement={"providers": [rnd.choice(["p0", "p1", "p2"])]} if rnd.random() < 0.3 else {},
        )
        for _ in range(50)
    ]
    return [
        JobSubmitted(job_id=f"{prefix}{i:06d}", occurred_at=at, tenant="bench", spec=kinds[i % 50])
        for i in range(jobs)
    ]


def pure(nodes: int, jobs: int, rounds: int = 20, free: int = 200) -> dict[str, Any]:
    """Placements per second of the pure decision core, first pass and steady state."""
    t0 = utcnow()
    s = SchedulerState(SchedulerConfig(), FitChecker())
    for e in fleet_events(nodes, t0):
        s.observe(e)
    for e in job_events(jobs, t0):
        s.observe(e)
    began = time.perf_counter()
    first = s.decide(t0)
    first_s = time.perf_counter() - began
    placed = [e for e in first if isinstance(e, AttemptScheduled)]
    total, spent = 0, 0.0
    for r in range(rounds):
        for e in placed[r * free : (r + 1) * free]:
            s.observe(
                ComputeReleased(job_id=e.job_id, attempt=1, node_id=e.node_id, occurred_at=t0)
            )
        began = time.perf_counter()
        out = s.decide(t0 + timedelta(seconds=1))
        spent += time.perf_counter() - began
        total += sum(isinstance(e, AttemptScheduled) for e in out)
    return {
        "first_pass_events": len(first),
        "first_pass_placements": len(placed),
        "first_pass_s": round(first_s, 4),
        "first_pass_placements_per_s": len(placed) / first_s if first_s else 0.0,
        "steady_placements": total,
        "steady_s": round(spent, 4),
        "steady_placements_per_s": total / spent if spent else 0.0,
        "still_queued": len(s.queue),
    }


async def through_kafka(settings: Settings, nodes: int, jobs: int, free: int) -> dict[str, Any]:
    """Placements per second of the scheduler service, backlog then live, through Kafka."""
    t0 = utcnow()
    async with Ledger(settings, "bench-scheduling") as ledger:
        await ledger.append_many(fleet_events(nodes, t0))
        submitted = job_events(jobs, t0)
        for i in range(0, len(submitted), 2000):
            await ledger.append_many(submitted[i : i + 2000])
        scheduler = build_scheduler(settings)
        placed: list[AttemptScheduled] = []
        passes: list[int] = []  # one entry per decision pass; only the leader decides
        real_decide = scheduler.state.decide

        def decide(now: datetime) -> list[Event]:
            out = real_decide(now)
            placed.extend(e for e in out if isinstance(e, AttemptScheduled))
            passes.append(len(out))
            return out

        scheduler.state.decide = decide  # type: ignore[method-assign]
        began = time.perf_counter()
        await scheduler.start()
        try:
            await scheduler.wait_ready(timeout=300)
            # Ready is caught up; the backlog is placed by the first pass after the
            # scheduler claimed the lead, which may come after ready.
            acked_by = time.perf_counter() + 300
            while not passes:
                if time.perf_counter() > acked_by:
                    raise TimeoutError("the scheduler did not lead and decide within 300 s")
                await asyncio.sleep(0.005)
            # Placements count once the broker acknowledged them.
            while scheduler.placements < len(placed):
                if time.perf_counter() > acked_by:
                    raise TimeoutError("the backlog's placements were not acknowledged in 300 s")
                await asyncio.sleep(0.005)
            backlog_s = time.perf_counter() - began
            backlog = scheduler.placements
            # Live: free capacity, time until the scheduler has appended the new placements.
            releases = [
                ComputeReleased(
                    job_id=e.job_id,
                    attempt=1,
                    node_id=e.node_id,
                    occurred_at=utcnow(),
                    reason="exited",
                )
                for e in placed[:free]
            ]
            before = scheduler.placements
            began = time.perf_counter()
            await ledger.append_many(releases)
            # Not every freed GPU fits a queued job: wait until placements stop for 1 s.
            last, last_at, deadline = before, began, began + 60
            while time.perf_counter() < deadline and (
                last == before or time.perf_counter() - last_at < 1.0
            ):
                await asyncio.sleep(0.005)
                if scheduler.placements != last:
                    last, last_at = scheduler.placements, time.perf_counter()
            live_s = last_at - began
            live = scheduler.placements - before
            skipped = scheduler.skipped_own
        finally:
            await scheduler.stop()
    return {
        "backlog_placements": backlog,
        "backlog_s": round(backlog_s, 3),
        "backlog_placements_per_s": backlog / backlog_s if backlog_s else 0.0,
        "live_placements": live,
        "live_s": round(live_s, 3),
        "live_placements_per_s": live / live_s if live_s else 0.0,
        "own_decisions_skipped_unread": skipped,
    }


async def run(settings: Settings, quick: bool) -> Result:
    """The scheduling benchmark (see the module docstring)."""
    nodes, jobs = (100, 1000) if quick else (1000, 10_000)
    free = 200 if quick else 2000
    result = Result(
        "scheduling",
        quick,
        params={"nodes": nodes, "gpus_per_node": 8, "jobs": jobs, "freed_live": free},
    )
    result.figures["pure"] = await asyncio.to_thread(pure, nodes, jobs, 5 if quick else 20)
    async with isolated(settings) as scoped:
        result.figures["kafka"] = await through_kafka(scoped, nodes, jobs, free)
    result.peak_rss_mb["bench process (scheduler in-process)"] = self_peak_rss_mb()
    result.targets["pure steady placements/s"] = target(
        result.figures["pure"]["steady_placements_per_s"], 2000, at_least=True
    )
    result.targets["kafka live placements/s"] = target(
        result.figures["kafka"]["live_placements_per_s"], 5000, at_least=True
    )
    result.notes.append(
        "backlog_s includes the scheduler's rebuild from offset 0 (reading every node and job "
        "event), its claim of the lead and the acks=all appends of its decisions"
    )
    result.notes.append(
        "live_s includes the bench producing the releases in the scheduler's process, and the "
        "scheduler reading back the backlog's decisions (skipped unread by key and type: "
        "own_decisions_skipped_unread)"
    )
    return result
