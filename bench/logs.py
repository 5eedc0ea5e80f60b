"""Logs: print -> arrival latency at a ``logs -f`` client, against ``docker logs -f``.

The job (``gridledger/python``) prints ``<time.time()> <n>`` lines at 100 lines/s
(paced on absolute deadlines, flushed per line). The client follows the API's
live stream (``GET /v1/jobs/ID/logs?follow=true&format=ndjson``, what
``gridledger logs -f`` reads) and notes each line's arrival; latency = arrival -
the timestamp in the line (same machine clock). Baseline: the same container
under bare ``docker run -d`` followed by ``docker logs -f``.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid

from bench.common import Result, isolated, ratio, target
from bench.stack import BenchStack
from schemas.views import TERMINAL_STATUSES
from services.ops.specs import free_port
from services.settings import Settings
from services.stats import percentile, summary

IMAGE = "gridledger/python:latest"
RATE = 100


def program(seconds: float) -> list[str]:
    """The job's command: print timestamped lines at the benchmark's rate for ``seconds``."""
    code = (
        "import time,sys\n"
        f"n={int(seconds * RATE)}; t0=time.time()\n"
        "for i in range(n):\n"
        f"    d=t0+i/{RATE}-time.time()\n"
        "    if d>0: time.sleep(d)\n"
        "    sys.stdout.write(f'{time.time():.6f} {i}\\n'); sys.stdout.flush()\n"
    )
    return ["python3", "-u", "-c", code]


def latencies(lines: list[tuple[float, str]]) -> list[float]:
    """Arrival minus the timestamp printed in each line, in seconds."""
    out = []
    for arrived, line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            try:
                out.append(arrived - float(parts[0]))
            except ValueError:
                continue
    return out


def bare_docker(seconds: float) -> list[float]:
    """The baseline: the same program under ``docker run -d``, followed by ``docker logs -f``."""
    cid = subprocess.run(
        ["docker", "run", "-d", "--network", "none", IMAGE, *program(seconds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines: list[tuple[float, str]] = []
    try:
        follow = subprocess.Popen(["docker", "logs", "-f", cid], stdout=subprocess.PIPE, text=True)
        assert follow.stdout is not None
        for line in follow.stdout:
            lines.append((time.time(), line))
        follow.wait(timeout=30)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
    return latencies(lines)


def through_api(settings: Settings, seconds: float, result: Result) -> list[float]:
    """The program as a job, its log followed live through the API; the latencies."""
    stack = BenchStack(settings, f"bench-node-{uuid.uuid4().hex[:6]}").start()
    lines: list[tuple[float, str]] = []
    try:
        spec = {
            "name": "bench-logs",
            "image": IMAGE,
            "command": program(seconds),
            "resources": {"gpus": 1},
            "retry": {"max_attempts": 1},
        }
        job_id = stack.submit(spec)

        def follow() -> None:
            path = f"/v1/jobs/{job_id}/logs?follow=true&format=ndjson"
            for item in stack.client.stream(path):
                now = time.time()
                if item.get("end"):
                    return
                for line in str(item.get("data", "")).splitlines():
                    lines.append((now, line))

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        stack.wait(
            lambda: stack.client.get(f"/v1/jobs/{job_id}").get("status") in TERMINAL_STATUSES,
            seconds + 120,
            "the log job to end",
        )
        thread.join(timeout=settings.log_follow_grace_s + 10)
        result.peak_rss_mb.update(stack.rss())
    finally:
        stack.stop()
    return latencies(lines)


async def run(settings: Settings, quick: bool) -> Result:
    """The logs benchmark (see the module docstring)."""
    seconds = 3.0 if quick else 20.0
    result = Result("logs", quick, params={"lines_per_s": RATE, "seconds": seconds, "image": IMAGE})
    result.samples["docker_logs_f"] = await asyncio.to_thread(bare_docker, seconds)
    async with isolated(settings, api_port=free_port()) as scoped:
        result.samples["api_logs_f"] = await asyncio.to_thread(through_api, scoped, seconds, result)
    api, bare = result.samples["api_logs_f"], result.samples["docker_logs_f"]
    expected = int(seconds * RATE)
    result.figures["api_logs_f"] = {**summary(api), "lines_expected": expected}
    result.baseline["docker_logs_f"] = {**summary(bare), "lines_expected": expected}
    result.ratios["p50_over_docker"] = ratio(percentile(api, 50), percentile(bare, 50))
    result.ratios["p99_over_docker"] = ratio(percentile(api, 99), percentile(bare, 99))
    result.targets["log latency p99 (s)"] = target(percentile(api, 99), 0.25, at_least=False)
    return result
