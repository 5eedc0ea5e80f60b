"""Whole-system fault tests: the real services as processes, real agents, real Docker.

Each test gets a :class:`System`: its own topics, Postgres schema, API port and
home, with `gridledger sink`, `api`, `scheduler` and `processors` started as
child processes (``services.ops.supervisor.Supervisor``, nothing restarted: a
service that dies fails the test) and agents
added as the test needs them. Deadlines are short (:data:`TIMINGS`) so a
fault plays out in well under a minute; every wait is on a condition.

What the tests assert is what a user sees through the API (status, failure
class, attempts, billed and credited GPU-seconds, the event history) and the
ledger's invariants (:meth:`System.check_invariants`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from projections.bounds import Thresholds, terminal_bound_s
from schemas.events import TERMINAL_EVENTS as TERMINAL_TYPES
from schemas.spec import JobSpec
from schemas.views import TERMINAL_STATUSES
from services.agent.runtime import LABEL_NODE
from services.cli.client import ApiClient, base_url, resolve_token
from services.ledger.topics import delete_topics, ensure_topics
from services.ops.specs import LOCAL_AGENT_ENV, ServiceSpec, free_port, tail
from services.ops.supervisor import Supervisor
from services.settings import Settings, load_settings
from tests.agent.conftest import remove_node_containers

BUSYBOX = "gridledger/busybox:latest"
PYTHON = "gridledger/python:latest"

TIMINGS: dict[str, Any] = {
    "watchdog_silence_s": 4.0,
    "watchdog_lost_after_s": 6.0,
    "watchdog_lag_threshold_s": 1.5,
    "watchdog_finishing_timeout_s": 60.0,
    "watchdog_tick_s": 0.25,
    "scheduler_node_timeout_s": 8.0,
    "scheduler_dispatch_timeout_s": 30.0,
    "scheduler_retry_fallback_s": 2.0,
    "processors_session_timeout_s": 6.0,
    "processors_heartbeat_interval_s": 1.0,
}
"""Short deadlines: a lost node is declared within ~10 s of its last heartbeat."""

AGENT_ENV = {**LOCAL_AGENT_ENV, "GRIDLEDGER_AGENT_STOP_GRACE_S": "2"}

TERMINAL_EVENTS = {cls.__name__ for cls in TERMINAL_TYPES}
"""The terminal event types by name, as the records read back from the topics give them."""

TERMINAL = set(TERMINAL_STATUSES)


def gpus(count: int = 2, model: str = "NVIDIA A10G") -> list[dict[str, Any]]:
    return [{"index": i, "model": model, "memory_total_mb": 24576} for i in range(count)]


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class System:
    """One isolated installation: services, agents, an API client, invariant checks."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        self.services = Supervisor(settings, log_dir=workdir / "logs", policy=None)
        self.client: ApiClient | None = None
        self.nodes: list[str] = []

    # ------------------------------------------------------------------ processes

    def start(self) -> System:
        self.services.start(ServiceSpec("sink", ["sink"]))
        self.services.start(
            ServiceSpec(
                "api",
                ["api", "--host", self.settings.api_host, "--port", str(self.settings.api_port)],
            )
        )
        self.services.start(ServiceSpec("scheduler", ["scheduler"]))
        self.services.start(ServiceSpec("processors", ["processors"]))
        self.services.wait_for_api(120)
        self.client = ApiClient(base_url(self.settings, None), resolve_token(self.settings, None))
        return self

    def agent_args(self, node_id: str, provider: str, count: int = 2) -> list[str]:
        inventory = self.workdir / f"{node_id}.inventory.json"
        inventory.write_text(
            json.dumps({"provider": provider, "region": "local", "gpus": gpus(count)})
        )
        return ["agent", "--node-id", node_id, "--provider", provider, "--region", "local",
                "--inventory", str(inventory)]  # fmt: skip

    def start_agent(
        self,
        node_id: str,
        provider: str = "acme",
        count: int = 2,
        wrapper: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """A real agent process (``wrapper`` runs it under, e.g., ``faketime``; ``env`` adds
        settings to :data:`AGENT_ENV`)."""
        args = self.agent_args(node_id, provider, count)
        env = {**AGENT_ENV, **(env or {})}
        self.services.start(ServiceSpec(f"agent-{node_id}", args, env, wrapper=wrapper or []))
        if node_id not in self.nodes:
            self.nodes.append(node_id)
        self.wait_for(lambda: self.node_ready(node_id), 90, f"agent {node_id} to register")

    def node_ready(self, node_id: str) -> bool:
        nodes = self.api.get("/v1/nodes").get("nodes", [])
        return any(n.get("node_id") == node_id and n.get("last_heartbeat_at") for n in nodes)

    def kill_node(self, node_id: str) -> None:
        """The node disappears: its agent is SIGKILLed and its containers with it."""
        self.services.kill(f"agent-{node_id}", signal.SIGKILL)
        remove_node_containers(node_id)

    def signal_agent(self, node_id: str, sig: int) -> None:
        pid = self.services.children[f"agent-{node_id}"].pid
        assert pid is not None, f"agent {node_id} is not running"
        os.killpg(pid, sig)

    def stop(self) -> None:
        for node_id in self.nodes:
            child = self.services.children.get(f"agent-{node_id}")
            if child is not None and child.alive() and child.pid is not None:
                # A stopped (SIGSTOP) agent cannot act on SIGTERM until it is continued.
                os.killpg(child.pid, signal.SIGCONT)
        self.services.stop()
        for node_id in self.nodes:
            remove_node_containers(node_id)

    def log(self, name: str) -> str:
        return (self.workdir / "logs" / f"{name}.log").read_text(errors="replace")

    # ------------------------------------------------------------------ the API

    @property
    def api(self) -> ApiClient:
        assert self.client is not None, "System.start() first"
        return self.client

    def submit(self, spec: dict[str, Any]) -> str:
        reply = self.api.post("/v1/jobs", json.dumps(spec).encode())
        return str(reply["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get(f"/v1/jobs/{job_id}")
        return doc

    def events(self, job_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.api.get(f"/v1/jobs/{job_id}/events")["events"]
        return events

    def accounting(self, job_id: str) -> dict[str, Any]:
        record: dict[str, Any] = self.api.get(f"/v1/jobs/{job_id}/accounting")
        return record

    def wait_for(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.services.check_alive()
            try:
                if check():
                    return
            except Exception:  # the API may be briefly unable to answer during a fault
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:.0f} s waiting for {what}\n"
                    + "\n".join(
                        f"--- {name}\n{tail(c.log_path, 15)}"
                        for name, c in self.services.children.items()
                    )
                )
            time.sleep(0.5)

    def status(self, job_id: str) -> str:
        return str(self.job(job_id)["status"])

    def wait_status(self, job_ids: list[str], statuses: set[str], timeout_s: float) -> None:
        self.wait_for(
            lambda: all(self.status(j) in statuses for j in job_ids),
            timeout_s,
            f"{job_ids} to reach one of {sorted(statuses)}",
        )

    def wait_terminal(self, job_ids: list[str], timeout_s: float) -> None:
        """Terminal in the read model, accounting final and the sink caught up."""
        self.wait_for(
            lambda: all(
                self.status(j) in TERMINAL and self.accounting(j).get("final") for j in job_ids
            ),
            timeout_s,
            f"{job_ids} to end",
        )

    # ------------------------------------------------------------------ invariants

    def check_invariants(self, job_id: str, bound: float) -> dict[str, Any]:
        """Exactly one terminal event, within ``bound`` seconds of the submission; a final
        accounting record with billable + credited = held for the job and each attempt."""
        events = self.events(job_id)
        terminals = {e["event_id"]: e for e in events if e["type"] in TERMINAL_EVENTS}
        assert len(terminals) == 1, (job_id, [e["type"] for e in events])
        (terminal,) = terminals.values()
        submitted = next(e for e in events if e["type"] == "JobSubmitted")
        took = (
            parse_time(terminal["occurred_at"]) - parse_time(submitted["occurred_at"])
        ).total_seconds()
        assert took <= bound, f"{job_id} ended after {took:.1f} s, bound {bound:.0f} s"
        record = self.accounting(job_id)
        assert record["final"] is True
        total = record["billable_gpu_seconds"] + record["credited_gpu_seconds"]
        assert total == pytest.approx(record["gpu_seconds"], abs=1e-6)
        for line in record["attempts"]:
            both = line["billable_gpu_seconds"] + line["credited_gpu_seconds"]
            assert both == pytest.approx(line["gpu_seconds"], abs=1e-6), line
        return record


def bound_s(spec: dict[str, Any], settings: Settings, deaf_s: float = 0.0) -> float:
    """The job's bound (``projections.bounds``, from its spec and the settings), plus the
    time the platform could not hear (``deaf_s``), which the bound does not count."""
    return terminal_bound_s(JobSpec(**spec), Thresholds.of(settings)) + deaf_s


def system_settings(base: Settings, home: Path, **overrides: Any) -> Settings:
    tag = uuid.uuid4().hex[:8]
    return base.model_copy(
        update={
            **TIMINGS,
            "home": home,
            "tokens_file": base.tokens_path,
            "topic_prefix": f"sys-{tag}.",
            "pg_schema": f"sys_{tag}",
            "api_port": free_port(),
            "processors_app_id": f"sys-processors-{tag}",
            **overrides,
        }
    )


async def _drop_schema(settings: Settings) -> None:
    conn = await asyncpg.connect(settings.dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')
    finally:
        await conn.close()


def workdir() -> Path:
    # Not pytest's tmp_path: the agents' spool and artifacts must be readable by them.
    path = Path(tempfile.mkdtemp(prefix="gl-system-"))
    path.chmod(0o755)
    return path


def run_system(settings: Settings, work: Path) -> Iterator[System]:
    asyncio.run(ensure_topics(settings))
    system = System(settings, work)
    try:
        yield system.start()
    finally:
        system.stop()
        asyncio.run(delete_topics(settings))
        asyncio.run(_drop_schema(settings))


@pytest.fixture
def system() -> Iterator[System]:
    """A started installation on the shared broker and Postgres (own topics and schema)."""
    work = workdir()
    settings = system_settings(load_settings(), work)
    yield from run_system(settings, work)


def sh(script: str, **fields: Any) -> dict[str, Any]:
    """A busybox job spec running ``script``."""
    spec: dict[str, Any] = {
        "image": BUSYBOX,
        "command": ["sh", "-c", script],
        "resources": {"gpus": 1, "memory_gb": 0.25},
    }
    spec.update(fields)
    return spec


def docker_ps(node_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label={LABEL_NODE}={node_id}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.split()
