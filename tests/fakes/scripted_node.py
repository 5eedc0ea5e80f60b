"""A scripted GPU node for tests and the fleet simulator: node facts and agent facts, no Docker.

It registers, sends NodeHeartbeats, reads its own partition of
``node-commands`` (filtered by key, like the real agent), and on request emits
the facts a real agent would for an attempt: AttemptAccepted, ComputeHeld,
ImageResolved, ContainerStarted, AttemptHeartbeats, CheckpointStored,
ProcessExited, OutputStored, MeterTicks and ComputeReleased. What happens,
and when, is up to the test::

    node = ScriptedNode(ledger, "node-a", gpus=2)
    await node.start()                       # NodeRegistered + heartbeats + command reader
    scheduled = await node.next_command(AttemptScheduled)
    run = await node.accept(scheduled)        # accepted, held, image, started, heartbeats
    await run.checkpoint("step-10")
    await run.finish(exit_code=0, outputs=["model.pt"])
    await node.stop()

``dup=True`` appends every fact twice (same event id), for idempotence tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
from datetime import datetime, timedelta
from typing import Any, TypeVar

from schemas.events import (
    AttemptAccepted,
    AttemptHeartbeat,
    AttemptScheduled,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    Event,
    ImageResolved,
    MeterTick,
    NodeHeartbeat,
    NodeRegistered,
    OutputStored,
    ProcessExited,
)
from schemas.types import GpuDevice
from services.agent.facts import agent_fact, node_fact
from services.clock import utcnow
from services.ledger import LedgerPort, compose

E = TypeVar("E", bound=Event)


class ScriptedAttempt:
    """One attempt the scripted node accepted; emits its facts on demand."""

    def __init__(self, node: ScriptedNode, scheduled: AttemptScheduled) -> None:
        self.node = node
        self.scheduled = scheduled
        self.job_id = scheduled.job_id
        self.attempt = scheduled.attempt
        self.held_at: datetime | None = None
        self.seq = 0
        self.stored = 0
        """Checkpoints stored so far: each one is a new fact, even under an old name."""
        self._beats: asyncio.Task[None] | None = None

    def _fact(self, cls: type[E], revision: object = None, **fields: Any) -> E:
        """A fact of this attempt, built and identified as the real agent builds it."""
        return agent_fact(
            cls, self.scheduled, self.node.node_id, utcnow(), revision=revision, **fields
        )

    async def start(self) -> ScriptedAttempt:
        s = self.scheduled
        held = self._fact(
            ComputeHeld,
            node_id=self.node.node_id,
            gpu_count=s.gpu_count,
            gpu_model=s.gpu_model,
            gpu_indices=s.gpu_indices,
        )
        self.held_at = held.occurred_at
        await self.node.emit(
            self._fact(AttemptAccepted, node_id=self.node.node_id),
            held,
            self._fact(ImageResolved, image=s.spec.image, image_id="sha256:scripted"),
            self._fact(
                ContainerStarted,
                container_id=f"c-{self.job_id[:8]}-{self.attempt}",
                node_id=self.node.node_id,
            ),
        )
        self.start_heartbeats()
        return self

    def start_heartbeats(self) -> None:
        if self._beats is None:
            self._beats = asyncio.create_task(self._beat_loop())

    async def stop_heartbeats(self) -> None:
        if self._beats is not None:
            self._beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beats
            self._beats = None

    async def _beat_loop(self) -> None:
        while True:
            await self.heartbeat()
            await asyncio.sleep(self.node.heartbeat_interval_s)

    async def heartbeat(self) -> None:
        self.seq += 1
        await self.node.emit(self._fact(AttemptHeartbeat, node_id=self.node.node_id, seq=self.seq))

    async def checkpoint(self, name: str, step: int | None = None) -> CheckpointStored:
        digest = hashlib.sha256(f"{self.job_id}/{self.attempt}/{name}".encode()).hexdigest()
        self.stored += 1
        event = self._fact(
            CheckpointStored,
            revision=self.stored,
            name=name,
            step=step,
            sha256=digest,
            bytes=1024,
            uri=f"file:///artifacts/{self.job_id}/{self.attempt}/{name}",
        )
        await self.node.emit(event)
        return event

    async def finish(
        self,
        exit_code: int = 0,
        last_log_lines: list[str] | None = None,
        outputs: list[str] | None = None,
        oom_killed: bool = False,
    ) -> None:
        """Process exit, outputs, meter ticks that cover the held time, then ComputeReleased."""
        await self.stop_heartbeats()
        runtime = (utcnow() - self.held_at).total_seconds() if self.held_at else 0.0
        await self.node.emit(
            self._fact(
                ProcessExited,
                exit_code=exit_code,
                oom_killed=oom_killed,
                runtime_s=runtime,
                last_log_lines=last_log_lines or [],
            )
        )
        for path in outputs or []:
            await self.node.emit(
                self._fact(
                    OutputStored,
                    path=path,
                    bytes=1,
                    sha256="0" * 64,
                    uri=f"file:///artifacts/{self.job_id}/{self.attempt}/{path}",
                )
            )
        await self.release("exited")

    async def release(self, reason: str) -> None:
        released = self._fact(ComputeReleased, node_id=self.node.node_id, reason=reason)
        await self.node.emit(*self.ticks_until(released.occurred_at))
        await self.node.emit(released)
        self.node.running.pop((self.job_id, self.attempt), None)

    def ticks_until(self, end: datetime) -> list[MeterTick]:
        """Meter ticks of ``tick_s`` covering [held_at, end), the last one partial and final."""
        assert self.held_at is not None
        tick_s = self.node.tick_s
        total = (end - self.held_at).total_seconds()
        count = max(1, math.ceil(total / tick_s))
        ticks = []
        for i in range(count):
            start = self.held_at + timedelta(seconds=i * tick_s)
            interval = min(tick_s, total - i * tick_s)
            ticks.append(
                self._fact(
                    MeterTick,
                    node_id=self.node.node_id,
                    tick_index=i,
                    interval_start=start,
                    interval_s=interval,
                    gpu_count=self.scheduled.gpu_count,
                    gpu_model=self.scheduled.gpu_model,
                    gpu_seconds=interval * self.scheduled.gpu_count,
                    final=i == count - 1,
                )
            )
        return ticks


class ScriptedNode:
    """A node that registers, heartbeats and reads its commands; see the module docstring."""

    def __init__(
        self,
        ledger: LedgerPort,
        node_id: str,
        gpus: int = 1,
        gpu_model: str = "A100-80GB",
        memory_gb: int = 80,
        provider: str = "",
        region: str = "",
        heartbeat_interval_s: float = 0.5,
        tick_s: float = 1.0,
        dup: bool = False,
    ) -> None:
        self.ledger = ledger
        self.node_id = node_id
        self.gpus = [
            GpuDevice(index=i, model=gpu_model, memory_total_mb=memory_gb * 1024)
            for i in range(gpus)
        ]
        self.provider, self.region = provider, region
        self.heartbeat_interval_s = heartbeat_interval_s
        self.tick_s = tick_s
        self.dup = dup
        self.free: list[int] | None = None
        """Free indices reported in heartbeats; None = every GPU not running an attempt."""
        self.running: dict[tuple[str, int], ScriptedAttempt] = {}
        self.commands: asyncio.Queue[Event] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = 0

    async def emit(self, *events: Event) -> None:
        batch = [e for e in events for _ in range(2 if self.dup else 1)]
        await self.ledger.append_many(batch)

    async def start(self, heartbeats: bool = True) -> ScriptedNode:
        await self.emit(
            node_fact(
                NodeRegistered,
                self.node_id,
                utcnow(),
                provider=self.provider,
                region=self.region,
                inventory_source="declared",
                inventory_note="scripted test node",
                gpus=self.gpus,
                heartbeat_interval_s=self.heartbeat_interval_s,
            )
        )
        self._tasks.append(asyncio.create_task(self._read_commands()))
        if heartbeats:
            self._tasks.append(asyncio.create_task(self._node_beats()))
        return self

    async def stop(self) -> None:
        """Stop everything: node heartbeats, attempt heartbeats, the command reader."""
        for attempt in list(self.running.values()):
            await attempt.stop_heartbeats()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _node_beats(self) -> None:
        while True:
            await self.node_heartbeat()
            await asyncio.sleep(self.heartbeat_interval_s)

    async def node_heartbeat(self) -> None:
        self._seq += 1
        busy = {i for a in self.running.values() for i in a.scheduled.gpu_indices}
        free = (
            self.free
            if self.free is not None
            else [g.index for g in self.gpus if g.index not in busy]
        )
        await self.emit(
            node_fact(
                NodeHeartbeat,
                self.node_id,
                utcnow(),
                seq=self._seq,
                free_gpu_indices=free,
                running_attempts=[f"{j}/{a}" for j, a in self.running],
            )
        )

    async def _read_commands(self) -> None:
        async for record in compose.follow(self.ledger, "node-commands", key=self.node_id):
            await self.commands.put(record.event)

    async def next_command(self, kind: type[E] = AttemptScheduled, timeout: float = 30.0) -> E:  # type: ignore[assignment]
        """The next command of ``kind`` for this node (others are skipped)."""
        async with asyncio.timeout(timeout):
            while True:
                command = await self.commands.get()
                if isinstance(command, kind):
                    return command

    async def accept(self, scheduled: AttemptScheduled) -> ScriptedAttempt:
        """Accept an attempt and start it (accepted, held, image, started, heartbeats)."""
        attempt = ScriptedAttempt(self, scheduled)
        self.running[(scheduled.job_id, scheduled.attempt)] = attempt
        return await attempt.start()
