"""Thousands of simulated GPU nodes in one asyncio process, speaking the agent protocol.

One producer and one consumer serve the whole fleet: every node registers and
sends NodeHeartbeats (spread over the interval), one reader follows every
partition of ``node-commands`` and hands each AttemptScheduled / CancelRequested
to the node named by its key (what each real agent does on its own partition).
Each accepted attempt is a task that emits :class:`.facts.AttemptFacts` over
time: start facts, then per heartbeat interval an AttemptHeartbeat, a log chunk
and the meter ticks that ended, then the exit facts of its :class:`.facts.Outcome`.
A ``node_lost`` outcome silences the whole node (no node or attempt heartbeats,
no more facts), so the watchdog declares its attempts lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas import codec
from schemas.events import (
    AttemptCancelled,
    AttemptScheduled,
    CancelRequested,
    Event,
    NodeHeartbeat,
    NodeRegistered,
)
from schemas.types import GpuDevice
from services.agent.facts import node_fact
from services.clock import utcnow
from services.ledger import Ledger, TopicPartition
from services.simulator.facts import AttemptFacts, Outcome
from services.simulator.mix import JobMix

log = logging.getLogger(__name__)


@dataclass
class SimNode:
    """A simulated node: its GPUs, and which of them attempts hold."""

    node_id: str
    provider: str
    region: str
    gpus: list[GpuDevice]
    busy: dict[int, str] = field(default_factory=dict)
    """GPU index -> attempt key."""
    lost: bool = False
    seq: int = 0

    def free(self) -> list[int]:
        """The GPU indices no attempt holds."""
        return [g.index for g in self.gpus if g.index not in self.busy]


@dataclass
class FleetStats:
    """What the simulated fleet did: facts emitted and acknowledged, attempts accepted ..."""

    emitted: int = 0
    acked: int = 0
    failed: int = 0
    accepted: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    lost_nodes: int = 0


class SimFleet:
    """A simulated fleet; ``await start()``, let it run, ``await stop()``."""

    def __init__(
        self,
        ledger: Ledger,
        nodes: int,
        mix: JobMix,
        *,
        gpus_per_node: int = 8,
        gpu_model: str = "A100-80GB",
        memory_gb: int = 80,
        heartbeat_interval_s: float = 2.0,
        tick_s: float = 2.0,
        prefix: str = "sim",
        providers: Sequence[str] = ("sim-a", "sim-b", "sim-c"),
        on_ack: Callable[[Event], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.on_ack = on_ack
        """Called with each event the broker acknowledged (the chaos suite's proof list)."""
        self.mix = mix
        self.heartbeat_interval_s = heartbeat_interval_s
        self.tick_s = tick_s
        self.nodes: dict[str, SimNode] = {}
        for i in range(nodes):
            provider = providers[i % len(providers)]
            node_id = f"{prefix}-{i:05d}"
            gpus = [
                GpuDevice(index=k, model=gpu_model, memory_total_mb=memory_gb * 1024)
                for k in range(gpus_per_node)
            ]
            self.nodes[node_id] = SimNode(node_id, provider, f"{provider}-r{i % 2}", gpus)
        self.attempts: dict[str, asyncio.Task[None]] = {}
        self.facts: dict[str, AttemptFacts] = {}
        self.stats = FleetStats()
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.Event()

    def failure(self) -> BaseException | None:
        """The error of the first of the fleet's tasks that failed, if one did.

        Those tasks are fire-and-forget; without this check a crashed node would sit
        silent while its owner (the chaos harness's simulated agents) waits on it.
        """
        for task in [*self._tasks, *self.attempts.values()]:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    @property
    def gpu_count(self) -> int:
        """Every GPU of the fleet."""
        return sum(len(n.gpus) for n in self.nodes.values())

    # ------------------------------------------------------------------ output

    def _done(self, event: Event, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.stats.failed += 1
            if not fut.cancelled():
                log.error("simulated append failed: %s", fut.exception())
        else:
            self.stats.acked += 1
            if self.on_ack is not None:
                self.on_ack(event)

    async def emit(self, events: Sequence[Event]) -> None:
        """Send in order without waiting for each ack (the producer keeps per-key order)."""
        producer = self.ledger.producer
        for event in events:
            fut = await producer.send(
                self.ledger.topic_of(event),
                value=codec.encode(event),
                key=event.key.encode(),
                headers=codec.headers(event),
            )
            fut.add_done_callback(functools.partial(self._done, event))
            self.stats.emitted += 1

    async def flush(self) -> None:
        """Wait until every fact emitted so far is on the broker."""
        await self.ledger.producer.flush()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> SimFleet:
        """Read node commands, register every node, then heartbeat them."""
        self._tasks.append(asyncio.create_task(self._read_commands(), name="sim-commands"))
        await self._ready.wait()
        now = utcnow()
        await self.emit(
            [
                node_fact(
                    NodeRegistered,
                    n.node_id,
                    now,
                    provider=n.provider,
                    region=n.region,
                    inventory_source="declared",
                    inventory_note="simulated node (gridledger simulate)",
                    gpus=n.gpus,
                    host_memory_mb=512 * 1024,
                    agent_version="simulator",
                    heartbeat_interval_s=self.heartbeat_interval_s,
                )
                for n in self.nodes.values()
            ]
        )
        await self.flush()
        self._tasks.append(asyncio.create_task(self._node_beats(), name="sim-node-beats"))
        return self

    async def stop(self) -> None:
        """Cancel every node's and attempt's task, then flush what they emitted."""
        for task in [*self.attempts.values(), *self._tasks]:
            task.cancel()
        for task in [*self.attempts.values(), *self._tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        with contextlib.suppress(Exception):
            await self.flush()

    async def _node_beats(self) -> None:
        """Every node heartbeats once per interval, spread over it in slices."""
        slices = 10
        nodes = list(self.nodes.values())
        while True:
            for k in range(slices):
                now = utcnow()
                beats = []
                for node in nodes[k::slices]:
                    if node.lost:
                        continue
                    node.seq += 1
                    beats.append(
                        node_fact(
                            NodeHeartbeat,
                            node.node_id,
                            now,
                            seq=node.seq,
                            free_gpu_indices=node.free(),
                            running_attempts=sorted(set(node.busy.values())),
                        )
                    )
                await self.emit(beats)
                await asyncio.sleep(self.heartbeat_interval_s / slices)

    async def _read_commands(self) -> None:
        topic = self.ledger.settings.topic("node-commands")
        count = await self.ledger.partitions(topic)
        tps = [TopicPartition(topic, p) for p in range(count)]
        consumer = self.ledger.consumer()
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)  # pin the end before the nodes register
            self._ready.set()
            while True:
                batch = await consumer.getmany(timeout_ms=200, max_records=2000)
                for raws in batch.values():
                    for raw in raws:
                        record = await self.ledger.decode(raw, "simulator")
                        if record is not None and isinstance(record.value, Event):
                            self._command(record.key, record.value)
        finally:
            await consumer.stop()

    # ------------------------------------------------------------------ attempts

    def _command(self, node_id: str, event: Event) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.lost:
            return
        key = f"{event.job_id}/{event.attempt}"
        if isinstance(event, AttemptScheduled):
            if key in self.attempts:
                return  # a duplicate command
            self.stats.accepted += 1
            for index in event.gpu_indices:
                node.busy[index] = key
            self.attempts[key] = asyncio.create_task(self._run(node, event), name=key)
        elif isinstance(event, CancelRequested):
            task = self.attempts.get(key)
            if task is not None and not task.done():
                task.cancel()
                asyncio.create_task(self._cancelled(node, key))

    async def _cancelled(self, node: SimNode, key: str) -> None:
        facts = self.facts.get(key)
        if facts is None or facts.held_at is None:
            return
        now = utcnow()
        cancelled = facts.fact(AttemptCancelled, now, node_id=node.node_id)
        await self.emit([cancelled, *facts.release(now, "cancelled")])
        self._free(node, key, "cancelled")

    def _free(self, node: SimNode, key: str, outcome: str) -> None:
        for index in [i for i, k in node.busy.items() if k == key]:
            del node.busy[index]
        self.facts.pop(key, None)
        self.stats.finished[outcome] = self.stats.finished.get(outcome, 0) + 1

    async def _run(self, node: SimNode, scheduled: AttemptScheduled) -> None:
        key = f"{scheduled.job_id}/{scheduled.attempt}"
        facts = AttemptFacts(scheduled, node.node_id, self.tick_s)
        self.facts[key] = facts
        outcome = self.mix.outcome(scheduled.job_id, scheduled.attempt)
        duration = self.mix.duration_s(scheduled.job_id, scheduled.attempt)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await self.emit(facts.start(utcnow()))
        step = 0
        while True:
            left = began + duration - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(self.heartbeat_interval_s, left))
            if node.lost:
                return
            if outcome == Outcome.NODE_LOST and loop.time() - began >= duration / 2:
                self._lose(node)
                return
            now = utcnow()
            step += 1
            await self.emit(
                [
                    facts.heartbeat(now),
                    facts.log(now, [f"step {step} loss={1.0 / step:.4f}"]),
                    *facts.due_ticks(now),
                ]
            )
        if node.lost:
            return  # another attempt's loss silenced the node while these facts were sent
        if outcome == Outcome.NODE_LOST:
            # An overloaded simulator can wake up past the whole duration before the
            # halfway check: the node still goes silent, it never exits with an error.
            self._lose(node)
            return
        await self.emit(facts.finish(utcnow(), outcome))
        self._free(node, key, outcome.value)

    def _lose(self, node: SimNode) -> None:
        """The whole node goes silent: no more node or attempt heartbeats, no more facts."""
        node.lost = True
        self.stats.lost_nodes += 1
        outcome = Outcome.NODE_LOST
        self.stats.finished[outcome] = self.stats.finished.get(outcome, 0) + 1
