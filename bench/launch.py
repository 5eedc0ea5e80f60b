"""Launch: a no-op job through the API to a real agent, against bare ``docker run``.

``submit -> running`` is from the POST (wall clock before the request) to the
agent's ContainerStarted fact (its ``occurred_at``, same machine clock);
``submit -> terminal`` is until a client polling ``GET /v1/jobs/ID`` every 20 ms
sees a terminal status, i.e. through scheduler, dispatch, agent, docker,
classifier, state and the sink. Baseline: ``docker run --rm --network none
gridledger/busybox:latest true`` on the same daemon, timed by wall clock.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from datetime import datetime
from typing import Any

from bench.common import Result, isolated, ratio, target
from bench.stack import BenchStack
from schemas.views import TERMINAL_STATUSES
from services.ops.specs import free_port
from services.settings import Settings
from services.stats import summary

IMAGE = "gridledger/busybox:latest"
SPEC = {
    "name": "bench-noop",
    "image": IMAGE,
    "command": ["true"],
    "resources": {"gpus": 1},
    "retry": {"max_attempts": 1},
}


def bare_docker(n: int) -> list[float]:
    """The baseline: ``n`` bare ``docker run`` of a no-op container, each timed by wall clock."""
    out = []
    for _ in range(n):
        began = time.perf_counter()
        subprocess.run(
            ["docker", "run", "--rm", "--network", "none", IMAGE, "true"],
            check=True,
            capture_output=True,
        )
        out.append(time.perf_counter() - began)
    return out


def one_job(stack: BenchStack) -> dict[str, Any]:
    """One no-op job through the stack: submit -> running and submit -> terminal, in seconds."""
    submitted_at = time.time()
    job_id = stack.submit(SPEC)
    doc: dict[str, Any] = {}

    def done() -> bool:
        nonlocal doc
        doc = stack.client.get(f"/v1/jobs/{job_id}")
        return doc.get("status") in TERMINAL_STATUSES

    stack.wait(done, 120, f"job {job_id} to end", every=0.02)
    terminal_s = time.time() - submitted_at
    events = stack.client.get(f"/v1/jobs/{job_id}/events")["events"]
    started = next((e for e in events if e.get("type") == "ContainerStarted"), None)
    running_s = (
        datetime.fromisoformat(started["occurred_at"]).timestamp() - submitted_at
        if started
        else None
    )
    return {
        "job_id": job_id,
        "status": doc.get("status"),
        "running_s": running_s,
        "terminal_s": terminal_s,
    }


def measure(settings: Settings, n: int, result: Result) -> None:
    """The baseline, then ``n`` jobs through a bench stack, into ``result``."""
    result.samples["docker_run"] = bare_docker(n)
    stack = BenchStack(settings, f"bench-node-{uuid.uuid4().hex[:6]}").start()
    try:
        one_job(stack)  # warm-up: first-use costs (connections, group joins) are not launches
        jobs = [one_job(stack) for _ in range(n)]
        result.peak_rss_mb.update(stack.rss())
    finally:
        stack.stop()
    result.samples["submit_to_running"] = [j["running_s"] for j in jobs if j["running_s"]]
    result.samples["submit_to_terminal"] = [j["terminal_s"] for j in jobs]
    result.figures["statuses"] = {
        s: sum(j["status"] == s for j in jobs) for s in {j["status"] for j in jobs}
    }


async def run(settings: Settings, quick: bool) -> Result:
    """The launch benchmark (see the module docstring)."""
    n = 3 if quick else 50
    result = Result("launch", quick, params={"jobs": n, "image": IMAGE, "spec": SPEC})
    async with isolated(settings, api_port=free_port()) as scoped:
        await asyncio.to_thread(measure, scoped, n, result)
    s = result.samples
    result.figures["submit_to_running"] = summary(s["submit_to_running"])
    result.figures["submit_to_terminal"] = summary(s["submit_to_terminal"])
    result.baseline["docker_run_rm"] = summary(s["docker_run"])
    term, bare = result.figures["submit_to_terminal"], result.baseline["docker_run_rm"]
    result.ratios["terminal_p50_over_docker"] = ratio(term["p50"], bare["p50"])
    result.ratios["terminal_p99_over_docker"] = ratio(term["p99"], bare["p99"])
    overhead = term["p99"] - bare["p99"]
    result.figures["overhead_p99_s"] = overhead
    result.targets["launch overhead p99 over bare docker (s)"] = target(
        overhead, 0.5, at_least=False
    )
    result.notes.append("one warm-up job runs first and is not counted; jobs run one at a time")
    return result
