"""How the platform grows with the fleet: a simulated 2,000-node fleet through the real services.

``gridledger simulate --with-services`` as a benchmark: 2,000 simulated 8-GPU nodes
(16,000 GPUs, :mod:`services.simulator`) register and heartbeat every 2 s, 3,000
jobs of 2-5 s are submitted at once with the default outcome mix (70 % success,
10 % user error, 10 % OOM, 10 % node lost, whose retries succeed), and a real
scheduler and processors worker (subprocesses, short watchdog timings) take them
to their ends. Figures: jobs ended per second and each job's time from
submission to its terminal event as the simulator read it back. There is no
raw baseline for a whole platform; the figure is for comparing runs (before and
after a change, on the same machine).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.common import Result, isolated, self_peak_rss_mb, target
from services.settings import Settings
from services.simulator.mix import DEFAULT_MIX, JobMix
from services.simulator.run import run_with_services, simulate

DURATION = "2-5"
HEARTBEAT_S = 2.0
QUICK_MIX = "success=80,user_error=10,oom=10"


async def run(settings: Settings, quick: bool) -> Result:
    """The simulation benchmark (see the module docstring)."""
    nodes, jobs = (100, 150) if quick else (2000, 3000)
    # Quick (CI) leaves node losses out: a lost node's undispatched attempts wait the
    # 30 s dispatch timeout, which would triple the quick run.
    mix_text = QUICK_MIX if quick else DEFAULT_MIX
    result = Result(
        "simulation",
        quick,
        params={
            "nodes": nodes,
            "gpus_per_node": 8,
            "jobs": jobs,
            "mix": mix_text,
            "duration_s": DURATION,
            "heartbeat_s": HEARTBEAT_S,
        },
    )
    mix = JobMix.parse(mix_text, DURATION)

    def go(scoped: Settings) -> Any:
        return simulate(
            scoped,
            nodes,
            jobs,
            mix,
            timeout_s=300.0,
            heartbeat_interval_s=HEARTBEAT_S,
            tick_s=HEARTBEAT_S,
            say=lambda line: None,
        )

    async with isolated(settings) as scoped:
        logs = settings.home / "bench" / scoped.topic_prefix.rstrip(".") / "logs"
        summary = await asyncio.to_thread(run_with_services, scoped, logs, go)
    result.figures["simulation"] = summary
    result.peak_rss_mb["bench process (the simulated fleet)"] = self_peak_rss_mb()
    result.targets["every job terminal"] = target(
        summary["terminal"] / summary["jobs"] if summary["jobs"] else 1.0, 1.0, at_least=True
    )
    result.notes.append(
        "time_to_terminal_s runs from the one append of every submission to reading the "
        "job's terminal event back; it includes the job's own 2-5 s (and a retry's, for the "
        "node-lost 10 %), the watchdog's silence and lost-after waits (3 s each) and "
        "the scheduler's backoff for retries"
    )
    return result
