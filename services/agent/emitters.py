"""What an attempt emits on its way: its lifecycle facts, once each, and the streams beside
them (AttemptHeartbeat, MeterTick, LogChunk), all through the spool.

A lifecycle fact's key (:func:`services.agent.facts.fact_key`) is journaled once it is
spooled, so a restarted agent that picks the attempt up again does not emit it a second
time; every fact's id derives from the AttemptScheduled and that key, so what it does
emit again is a duplicate readers drop.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any, TypeVar

from schemas.events import AttemptHeartbeat, Event, LogChunk
from services.agent import meter
from services.agent.context import AgentContext
from services.agent.facts import agent_fact, fact_key
from services.agent.journal import JournalEntry
from services.agent.logs import Chunk
from services.agent.runtime import Stats

E = TypeVar("E", bound=Event)


class Emitter:
    """The facts of one attempt (``record``) on this node, and the figures they carry."""

    def __init__(self, ctx: AgentContext, record: JournalEntry) -> None:
        self.ctx = ctx
        self.record = record
        self.stats = Stats()
        """The container's latest usage figures (:meth:`sample_stats`), sent in heartbeats."""

    async def fact(self, cls: type[Event], revision: object = None, **fields: Any) -> None:
        """Spool one lifecycle fact once per attempt: its key (:func:`fact_key`) is
        journaled, so a restarted agent does not emit it again."""
        r = self.record
        key = fact_key(cls, fields, revision)
        if key in r.emitted:
            return
        at = fields.pop("occurred_at", None) or self.ctx.clock()
        await self.ctx.spool.append(self.new(cls, at, revision, **fields))
        r.emitted.append(key)
        self.ctx.journal.save(r, durable=True)

    def new(
        self, cls: type[E], at: datetime | None = None, revision: object = None, **fields: Any
    ) -> E:
        """A fact of this attempt, occurring ``at`` (now when not given)."""
        r, ctx = self.record, self.ctx
        return agent_fact(
            cls, r.scheduled, ctx.node_id, at or ctx.clock(), revision=revision, **fields
        )

    def gpu_model(self) -> str:
        """The model of the attempt's GPUs: the placement's, else the inventory's."""
        s = self.record.scheduled
        if s.gpu_model:
            return s.gpu_model
        models = {g.index: g.model for g in self.ctx.inventory.gpus}
        return next((models[i] for i in self.record.gpu_indices if i in models), "")

    async def heartbeats(self) -> None:
        """An AttemptHeartbeat every ``heartbeat_interval_s``, for as long as the task runs."""
        r, ctx = self.record, self.ctx
        loop = asyncio.get_running_loop()
        interval = ctx.agent.heartbeat_interval_s
        due = loop.time()
        while True:
            seq = r.heartbeat_seq
            usage = [u for u in ctx.inventory.usage() if u.index in r.gpu_indices]
            await ctx.spool.append(
                self.new(
                    AttemptHeartbeat,
                    node_id=ctx.node_id,
                    seq=seq,
                    gpus=usage,
                    host_memory_used_mb=self.stats.memory_used_mb,
                    cpu_pct=round(self.stats.cpu_pct, 1),
                )
            )
            r.heartbeat_seq = seq + 1
            due += interval
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def metering(self) -> None:
        """The MeterTicks that fall due while compute is held (:mod:`services.agent.meter`)."""
        r, ctx = self.record, self.ctx
        assert r.held_at is not None
        interval = ctx.agent.meter_interval_s
        while True:
            ticks = meter.due_ticks(
                r.held_at, ctx.clock(), interval, r.scheduled.gpu_count, r.next_tick
            )
            await self.ticks(ticks)
            wake = meter.next_boundary(r.held_at, r.next_tick, interval)
            await asyncio.sleep(max(0.01, (wake - ctx.clock()).total_seconds()))

    async def ticks(self, ticks: list[meter.Tick]) -> None:
        """Spool ``ticks`` and journal the next tick's index."""
        if not ticks:
            return
        r, ctx = self.record, self.ctx
        model, now = self.gpu_model(), ctx.clock()
        events = [meter.tick_fact(t, r.scheduled, ctx.node_id, model, now) for t in ticks]
        await ctx.spool.append_many(events)
        r.next_tick = ticks[-1].index + 1
        ctx.journal.save(r)

    async def chunks(self, chunks: list[Chunk]) -> None:
        """Spool the log's chunks with the follower's position, and journal the position."""
        if not chunks:
            return
        r, ctx = self.record, self.ctx
        events: list[Event] = [
            self.new(
                LogChunk,
                stream=c.stream,
                seq=c.seq,
                first_line=c.first_line,
                line_count=c.line_count,
                data=c.data,
                truncated=c.truncated,
            )
            for c in chunks
        ]
        state = chunks[-1].state
        await ctx.spool.append_many(
            events, meta={"attempt": r.key, "logs": state.model_dump(mode="json")}
        )
        r.logs = state
        ctx.journal.save(r)

    async def sample_stats(self, container: str) -> None:
        """Read the container's usage every ``stats_interval_s`` (best effort)."""
        ctx = self.ctx
        while True:
            with contextlib.suppress(Exception):  # usage figures are best effort
                self.stats = await ctx.blocking(ctx.runtime.stats, container, self.stats)
            await asyncio.sleep(ctx.agent.stats_interval_s)
