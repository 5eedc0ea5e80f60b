"""The chaos workload: concurrent submitters posting a mix of jobs through the real API.

Jobs go to two kinds of nodes, told apart by GPU model: the simulated agents
(:data:`SIM_MODEL`, outcomes from the simulator's mix) and the real Docker
agents (:data:`DOCKER_MODEL`, busybox containers that sleep and exit 0 or 1).
Some jobs carry an ``Idempotency-Key`` and are posted by several submitters at
once: every answer must name the same job. A submitter retries what the API
could not take (connection refused, 5xx) with the same key, like a careful
client; what it saw acknowledged goes to :class:`.invariants.Acks`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from services.chaos.invariants import Acks
from services.clock import utcnow

SIM_MODEL = "SIM-A100"
DOCKER_MODEL = "CHAOS-DOCKER-GPU"
DOCKER_IMAGE = "gridledger/busybox:latest"


@dataclass(frozen=True)
class Planned:
    """One submission to make: the spec, and the idempotency key if it has one."""

    spec: dict[str, Any]
    key: str = ""


def plan(jobs: int, docker_share: float, keyed_share: float, seed: int, tag: str) -> list[Planned]:
    """``jobs`` submissions; keyed ones appear two or three times (the same key and spec)."""
    rnd = random.Random(seed)
    planned: list[Planned] = []
    for i in range(jobs):
        if rnd.random() < docker_share:
            seconds = rnd.choice((1, 2, 3))
            code = 1 if rnd.random() < 0.15 else 0
            spec: dict[str, Any] = {
                "name": f"chaos-docker-{i}",
                "image": DOCKER_IMAGE,
                "command": ["sh", "-c", f"echo start; sleep {seconds}; echo done; exit {code}"],
                "resources": {"gpus": 1, "gpu_models": [DOCKER_MODEL], "memory_gb": 1},
                "limits": {"max_runtime_s": 120, "queue_timeout_s": 600},
                "retry": {"backoff_s": 1, "backoff_cap_s": 5},
            }
        else:
            spec = {
                "name": f"chaos-sim-{i}",
                "image": "sim/train:latest",
                "command": ["python", "train.py"],
                "resources": {"gpus": 1, "gpu_models": [SIM_MODEL]},
                "limits": {"max_runtime_s": 120, "queue_timeout_s": 600},
                "retry": {"backoff_s": 1, "backoff_cap_s": 5},
            }
        if rnd.random() < keyed_share:
            key = f"chaos-{tag}-{i}"
            planned += [Planned(spec, key)] * rnd.choice((2, 3))
        else:
            planned.append(Planned(spec))
    rnd.shuffle(planned)
    return planned


@dataclass
class Submissions:
    """What the load's submissions got: acknowledgements, answers by status, retries."""

    acks: Acks = field(default_factory=Acks)
    statuses: Counter[str] = field(default_factory=Counter)
    """HTTP status (or ``connection``) -> answers, every try counted."""
    by_key: dict[str, set[str]] = field(default_factory=dict)
    """Idempotency key -> the job ids the API answered with (must be one)."""
    non_json_errors: list[str] = field(default_factory=list)
    """Error answers that were not ``application/problem+json`` (status and body head)."""
    retries: int = 0
    gave_up: int = 0

    def summary(self) -> dict[str, Any]:
        """The figures as the report's JSON holds them."""
        return {
            "acknowledged_jobs": len(self.acks.jobs),
            "answers": dict(sorted(self.statuses.items())),
            "retries": self.retries,
            "gave_up": self.gave_up,
            "idempotency_keys": len(self.by_key),
            "keys_with_more_than_one_job": sorted(k for k, v in self.by_key.items() if len(v) > 1),
            "non_problem_json_errors": self.non_json_errors[:10],
        }


class Workload:
    """``submitters`` concurrent clients draining a queue of planned submissions."""

    def __init__(self, base_url: str, token: str, submitters: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.submitters = submitters
        self.queue: asyncio.Queue[Planned] = asyncio.Queue()
        self.result = Submissions()
        self.retry_for_s = 180.0
        """A submission the API cannot take is retried this long, then given up."""

    def feed(self, planned: list[Planned]) -> None:
        """Queue jobs for the submitters."""
        for p in planned:
            self.queue.put_nowait(p)

    async def run(self, stop: asyncio.Event) -> None:
        """Submit until ``stop`` is set and the queue is empty."""
        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=self.submitters)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(
                *(self._submitter(session, n, stop) for n in range(self.submitters))
            )

    async def _submitter(self, session: aiohttp.ClientSession, n: int, stop: asyncio.Event) -> None:
        while True:
            try:
                planned = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                if stop.is_set():
                    return
                await asyncio.sleep(0.2)
                continue
            await self._submit(session, n, planned)

    async def _submit(self, session: aiohttp.ClientSession, n: int, planned: Planned) -> None:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "X-Gridledger-Submitter": f"chaos-{n}",
        }
        if planned.key:
            headers["Idempotency-Key"] = planned.key
        body = json.dumps(planned.spec).encode()
        began = time.monotonic()
        pause = 0.5
        while True:
            try:
                async with session.post(
                    f"{self.base_url}/v1/jobs", data=body, headers=headers
                ) as r:
                    self.result.statuses[str(r.status)] += 1
                    text = await r.text()
                    if r.status in (200, 201, 202):
                        self._acknowledged(planned, json.loads(text))
                        return
                    if r.status >= 500 and "problem+json" not in r.content_type:
                        self.result.non_json_errors.append(
                            f"{r.status} {r.content_type}: {text[:120]}"
                        )
                    if r.status < 500 and r.status != 429:
                        self.result.gave_up += 1  # the spec is refused: not something to retry
                        return
            except (aiohttp.ClientError, TimeoutError, OSError):
                self.result.statuses["connection"] += 1
            if time.monotonic() - began > self.retry_for_s:
                self.result.gave_up += 1
                return
            self.result.retries += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    def _acknowledged(self, planned: Planned, body: dict[str, Any]) -> None:
        job_id = str(body["job_id"])
        self.result.acks.jobs.setdefault(job_id, utcnow())
        if body.get("event_id"):
            self.result.acks.event_ids.add(str(body["event_id"]))
        if planned.key:
            self.result.by_key.setdefault(planned.key, set()).add(job_id)
