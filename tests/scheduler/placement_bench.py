"""Placement throughput of the scheduler's pure core (not a test; run it by hand).

    python -m tests.scheduler.placement_bench [nodes] [jobs]

Registers ``nodes`` 8-GPU nodes of five models, queues ``jobs`` jobs of 50
kinds (1-2 GPUs, 8-60 GiB, a provider preference on 30 %), runs the first
pass (pre-flight + JobQueued + placements), then frees 200 attempts at a time
and measures steady-state placements per second. Kafka is not involved: this
is the decision cost only (see the issue-5 report for end-to-end numbers).
"""

from __future__ import annotations

import random
import sys
import time
from datetime import UTC, datetime, timedelta

from schemas.events import AttemptScheduled, ComputeReleased, JobSubmitted, NodeRegistered
from schemas.spec import JobSpec
from schemas.types import GpuDevice
from services.scheduler.core import SchedulerConfig, SchedulerState
from services.scheduler.inventory import FitChecker

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MODELS = [("T4", 16), ("L4", 24), ("A100-40GB", 40), ("A100-80GB", 80), ("H100-80GB", 80)]


def main(nodes: int = 1000, jobs: int = 10_000) -> None:
    rnd = random.Random(1)
    s = SchedulerState(SchedulerConfig(), FitChecker())
    for i in range(nodes):
        model, gb = MODELS[i % len(MODELS)]
        gpus = [GpuDevice(index=k, model=model, memory_total_mb=gb * 1024) for k in range(8)]
        s.observe(
            NodeRegistered(
                node_id=f"n{i}",
                occurred_at=T0,
                inventory_source="declared",
                provider=f"p{i % 3}",
                region=f"r{i % 4}",
                gpus=gpus,
            )
        )
    kinds = [
        JobSpec(
            image="x",
            resources={"gpus": rnd.choice([1, 1, 2]), "min_vram_gb": rnd.choice([8, 16, 30, 60])},
            placement={"providers": [rnd.choice(["p0", "p1", "p2"])]} if rnd.random() < 0.3 else {},
        )
        for _ in range(50)
    ]
    for i in range(jobs):
        s.observe(JobSubmitted(job_id=f"j{i}", occurred_at=T0, tenant="t", spec=kinds[i % 50]))
    began = time.perf_counter()
    first = s.decide(T0)
    placed = [e for e in first if isinstance(e, AttemptScheduled)]
    print(
        f"first pass: {len(first)} events ({len(placed)} placements) in "
        f"{time.perf_counter() - began:.2f} s; {len(s.queue)} still queued"
    )
    total, spent = 0, 0.0
    for r in range(20):
        for e in placed[r * 200 : (r + 1) * 200]:
            s.observe(
                ComputeReleased(job_id=e.job_id, attempt=1, node_id=e.node_id, occurred_at=T0)
            )
        began = time.perf_counter()
        out = s.decide(T0 + timedelta(seconds=1))
        spent += time.perf_counter() - began
        total += sum(isinstance(e, AttemptScheduled) for e in out)
    print(f"steady state: {total} placements in {spent:.3f} s = {total / spent:.0f}/s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
