"""An agent per test on the real broker and Docker daemon, with its own node id and home."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest_asyncio

from schemas import codec
from schemas.events import AttemptScheduled, CancelRequested, Event, LogChunk
from schemas.spec import JobSpec, Resources
from services.agent.agent import Agent
from services.agent.bootstrap import bootstrap
from services.agent.runtime import LABEL_NODE, removal_settled
from services.agent.settings import AgentSettings
from services.ledger import Ledger, compose
from services.settings import Settings
from tests.objectstore import PrivateStore

TENANT = "dev"
"""A tenant the object store has credentials for (``dev up`` writes dev and other)."""
BUSYBOX = "gridledger/busybox:latest"
PYTHON = "gridledger/python:latest"


def write_inventory(home: Path) -> Path:
    path = home / "inventory.json"
    path.write_text(
        json.dumps(
            {"gpus": [{"index": i, "model": "L4", "memory_total_mb": 23034} for i in (0, 1)]}
        )
    )
    return path


@dataclass
class Harness:
    """One node: its settings, its agent (when started) and a ledger to talk to it."""

    settings: Settings
    agent_settings: AgentSettings
    ledger: Ledger
    agent: Agent | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def node_id(self) -> str:
        return self.agent_settings.node_id

    async def start(self, **kwargs: Any) -> Agent:
        self.agent = await bootstrap(self.settings, self.agent_settings, **kwargs).start()
        return self.agent

    async def stop(self) -> None:
        if self.agent is not None:
            await self.agent.stop()
            self.agent = None

    async def command(self, event: Event) -> None:
        await self.ledger.send_raw(
            self.settings.topic("node-commands"),
            self.node_id.encode(),
            codec.encode(event),
            codec.headers(event),
        )

    async def schedule(
        self, spec: JobSpec, *, gpu_count: int = 1, **fields: Any
    ) -> AttemptScheduled:
        now = datetime.now(UTC)
        scheduled = AttemptScheduled(
            job_id=fields.pop("job_id", f"job-{uuid.uuid4().hex[:8]}"),
            attempt=fields.pop("attempt", 1),
            occurred_at=now,
            producer="test/scheduler",
            node_id=self.node_id,
            gpu_count=gpu_count,
            gpu_model="L4",
            dispatch_deadline=now + timedelta(minutes=5),
            spec=spec,
            tenant=fields.pop("tenant", TENANT),
            **fields,
        )
        await self.command(scheduled)
        return scheduled

    async def cancel(self, scheduled: AttemptScheduled) -> None:
        await self.command(
            CancelRequested(
                job_id=scheduled.job_id,
                attempt=scheduled.attempt,
                occurred_at=datetime.now(UTC),
                producer="test/api",
                node_id=self.node_id,
                requested_by="tester",
                reason="test cancel",
            )
        )

    async def facts(self, job_id: str, topic: str = "job-events") -> list[Event]:
        """The job's events on ``topic``, duplicates (same event id) dropped."""
        seen: set[str] = set()
        out = []
        for event in await compose.history(self.ledger, job_id, topic):
            if event.event_id not in seen:
                seen.add(event.event_id)
                out.append(event)
        return out

    async def wait_for(
        self, job_id: str, type_name: str, timeout: float = 60.0, topic: str = "job-events"
    ) -> list[Event]:
        """Poll the topic until an event of ``type_name`` arrived; return the job's events."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            events = await self.facts(job_id, topic)
            if any(e.type == type_name for e in events):
                if self.agent is not None and type_name == "ComputeReleased":
                    # Lanes are independent: logs may still be on their way; let them land.
                    assert await self.agent.ctx.spool.drain(30), "spool did not drain"
                return events
            if asyncio.get_running_loop().time() > deadline:
                dump_tasks()
                raise AssertionError(
                    f"no {type_name} for {job_id} in {timeout} s; got {[e.type for e in events]}"
                )
            await asyncio.sleep(0.3)

    async def run(self, spec: JobSpec, timeout: float = 90.0, **fields: Any) -> list[Event]:
        """Schedule a job and return its job-events once compute is released."""
        scheduled = await self.schedule(spec, **fields)
        return await self.wait_for(scheduled.job_id, "ComputeReleased", timeout)


def dump_tasks() -> None:
    """Print where the agent's tasks wait (diagnostics for a test that timed out)."""
    import sys

    for task in asyncio.all_tasks():
        if "attempt" in task.get_name() or ":" in task.get_name():
            print(f"--- task {task.get_name()}", file=sys.stderr)
            task.print_stack(limit=12, file=sys.stderr)


def only(events, cls):
    return [e for e in events if isinstance(e, cls)]


def sh(script: str, **kwargs) -> JobSpec:
    kwargs.setdefault("resources", Resources(gpus=1, memory_gb=0.25))
    return JobSpec(image=BUSYBOX, command=["sh", "-c", script], **kwargs)


def stream_text(chunks: list[LogChunk], stream: str) -> str:
    mine = sorted((c for c in chunks if c.stream == stream), key=lambda c: c.seq)
    assert [c.seq for c in mine] == list(range(len(mine))), f"{stream} seq has gaps"
    for before, after in zip(mine, mine[1:], strict=False):
        assert after.first_line == before.first_line + before.line_count
    return "".join(c.data for c in mine)


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def remove_node_containers(node_id: str) -> None:
    client = docker.from_env()
    try:
        for c in client.containers.list(all=True, filters={"label": f"{LABEL_NODE}={node_id}"}):
            try:
                c.remove(force=True)
            except docker.errors.APIError as exc:
                # The agent may be removing it at the same moment: gone or going is fine.
                if not removal_settled(exc):
                    raise
    finally:
        client.close()


def make_agent_settings(home: Path, **overrides: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "node_id": f"node-{uuid.uuid4().hex[:8]}",
        "provider": "test",
        "region": "local",
        "inventory_file": write_inventory(home),
        "heartbeat_interval_s": 1.0,
        "node_heartbeat_interval_s": 1.0,
        "meter_interval_s": 1.0,
        "stop_grace_s": 2.0,
        "checkpoint_poll_s": 0.3,
    }
    values.update(overrides)
    return AgentSettings(**values)


@pytest_asyncio.fixture
async def idle_node(
    topics: Settings, tmp_path: Path, object_store: PrivateStore
) -> AsyncIterator[Harness]:
    """A node's settings and home, its agent not started yet (``await harness.start()``)."""
    settings = object_store.service_settings(topics, home=tmp_path)
    harness = Harness(settings, make_agent_settings(tmp_path), Ledger(settings, "agent-test"))
    await harness.ledger.start()
    try:
        yield harness
    finally:
        try:
            await harness.stop()
        finally:
            await harness.ledger.stop()
            remove_node_containers(harness.node_id)


@pytest_asyncio.fixture
async def node(idle_node: Harness) -> Harness:
    """A started agent with its own node id and home (spool, journal, artifacts)."""
    await idle_node.start()
    return idle_node
