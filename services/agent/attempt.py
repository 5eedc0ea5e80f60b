"""One attempt's lifecycle on this node, from acceptance to ComputeReleased.

Facts, in order, on job-events: AttemptAccepted, ComputeHeld, ImageResolved |
ImageUnavailable, ContainerStarted | ContainerStartFailed, CheckpointStored*,
ProcessExited | AttemptCancelled, OutputStored* / OutputFailed*, ComputeReleased.
Alongside, on their own topics and tasks: AttemptHeartbeat (every
``heartbeat_interval_s``), MeterTick (while compute is held) and LogChunk.

Each fact is spooled first and recorded in the journal; its event id is derived
from the AttemptScheduled id and the fact, so a restarted agent that picks the
attempt up again (re-attach) emits duplicates that readers drop, never new facts.

The runner keeps the order; its parts do the work: :class:`~services.agent.emitters.Emitter`
(the facts, heartbeats, meter ticks and log chunks), :mod:`services.agent.container` (the
container's request), :class:`~services.agent.checkpoints.Checkpoints` (the resume download
and the checkpoints stored while it runs) and :class:`~services.agent.outputs.Outputs` (the
attempt's folder and the declared outputs stored after the exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from schemas.events import (
    AttemptAccepted,
    AttemptCancelled,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    ContainerStartFailed,
    ImageResolved,
    ImageUnavailable,
    ProcessExited,
    ReleaseReason,
)
from services.agent import meter
from services.agent.checkpoints import Checkpoints
from services.agent.container import container_request
from services.agent.context import AgentContext
from services.agent.emitters import Emitter
from services.agent.errors import ContainerStartError, ImageUnavailableError
from services.agent.journal import JournalEntry
from services.agent.logstream import LogFollower
from services.agent.outputs import Outputs
from services.agent.runtime import ContainerRequest, ContainerState
from services.ops.logs import bind_context

log = logging.getLogger(__name__)

LAST_LOG_LINES = 50


class AttemptRunner:
    """Runs (or, after a restart, resumes) one attempt. ``run()`` is its task."""

    def __init__(
        self,
        ctx: AgentContext,
        record: JournalEntry,
        on_released: Callable[[JournalEntry], None],
    ) -> None:
        self.ctx = ctx
        self.record = record
        self._on_released = on_released
        self._stop_request = asyncio.Event()
        self._stop_reason = ""
        self._tasks: list[asyncio.Task[Any]] = []
        self._logs: LogFollower | None = None
        self.emit = Emitter(ctx, record)
        self.outputs = Outputs(ctx, record, self.emit)
        self.checkpoints = Checkpoints(ctx, record, self.emit, self.outputs)
        if record.cancel_requested:
            self._stop_reason = "cancelled"
            self._stop_request.set()

    # ------------------------------------------------------------------ public

    @property
    def key(self) -> str:
        """The attempt's 'job_id/attempt' key."""
        return self.record.key

    def cancel(self, reason: str = "") -> None:
        """Stop the container with the grace period, then AttemptCancelled and ComputeReleased."""
        if not self.record.cancel_requested:
            self.record.cancel_requested = True
            self.record.cancel_reason = reason
            self.ctx.journal.save(self.record, durable=True)
        self._stop_reason = "cancelled"
        self._stop_request.set()

    def shut_down(self) -> None:
        """Agent shutdown with policy ``stop``: stop the container and release its compute."""
        if not self._stop_reason:
            self._stop_reason = "agent_shutdown"
        self._stop_request.set()

    async def detach(self) -> None:
        """Agent shutdown with policy ``detach``: stop watching, leave the container running."""
        await self._stop_tasks()

    async def run(self) -> None:
        """Run the attempt to its end; every end, however it comes, releases the compute."""
        # This runner is its own task: every line it logs names the job and the attempt.
        bind_context(job_id=self.record.job_id, attempt=self.record.attempt)
        try:
            await self._run()
        except asyncio.CancelledError:
            await self.detach()
            raise
        except Exception:
            log.exception("attempt %s failed inside the agent", self.key)
            await self.detach()
            with contextlib.suppress(Exception):
                await self._release("agent_error")

    # ------------------------------------------------------------------ lifecycle

    async def _run(self) -> None:
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        await self.emit.fact(AttemptAccepted, node_id=ctx.node_id)
        if r.held_at is None:
            r.held_at = ctx.clock()
        await self.emit.fact(
            ComputeHeld,
            occurred_at=r.held_at,
            node_id=ctx.node_id,
            gpu_count=s.gpu_count,
            gpu_model=self.emit.gpu_model(),
            gpu_indices=r.gpu_indices,
        )
        self._spawn(self.emit.heartbeats(), "heartbeats")
        self._spawn(self.emit.metering(), "meter")

        container = await self._find_container()
        if container is None:
            if self._stop_request.is_set():
                await self._finish_stopped(None)
                return
            container = await self._create_and_start()
            if container is None:
                return
        elif "ContainerStarted" not in r.emitted:
            state = await ctx.blocking(ctx.runtime.state, container)
            if state.status == "created" and not await self._start(container):
                return
            await self._container_started(container)

        self._logs = LogFollower(
            ctx.runtime, container, self.key, ctx.agent, r.logs, self.emit.chunks
        )
        self._logs.start()
        if s.runnable.checkpoints:
            self._spawn(self.checkpoints.watch(), "checkpoints")
        self._spawn(self.emit.sample_stats(container), "stats")

        outcome = await self._await_exit(container)
        if outcome == "lost":
            log.warning("container of %s vanished while it ran", self.key)
            await self._release("container_lost")
            return
        if outcome in ("cancelled", "runtime_exceeded", "agent_shutdown"):
            await ctx.blocking(ctx.runtime.stop, container, ctx.agent.stop_grace_s)
        await self._logs.end()
        if s.runnable.checkpoints:
            await self.checkpoints.scan(final=True)
        state = await ctx.blocking(ctx.runtime.state, container)
        if outcome == "cancelled":
            await self._finish_stopped(container)
            return
        if outcome == "agent_shutdown":
            await self._release("agent_shutdown", container)
            return
        await self._process_exited(container, state, outcome == "runtime_exceeded")
        if outcome == "exited":
            await self.outputs.store()
        await self._release(
            "runtime_exceeded" if outcome == "runtime_exceeded" else "exited", container
        )

    async def _create_and_start(self) -> str | None:
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        try:
            image_id, pulled = await ctx.blocking(
                ctx.runtime.resolve_image, s.runnable.image, ctx.agent.pull_policy
            )
        except ImageUnavailableError as exc:
            await self.emit.fact(
                ImageUnavailable,
                image=s.runnable.image,
                reason=exc.reason,
                message=exc.message,
            )
            await self._release("image_unavailable")
            return None
        await self.emit.fact(
            ImageResolved, image=s.runnable.image, image_id=image_id, pulled=pulled
        )
        try:
            secrets = await ctx.secrets.resolve(s.job_id, s.attempt) if s.runnable.secrets else {}
            resume_file = await self.checkpoints.fetch_resume()
            request = self._container_request(resume_file, secrets)
            container = await ctx.blocking(ctx.runtime.create, request)
        except ContainerStartError as exc:
            await self._start_failed(exc)
            return None
        r.container_id = container
        r.phase = "running"
        ctx.journal.save(r, durable=True)
        if not await self._start(container):
            return None
        await self._container_started(container)
        return container

    async def _start(self, container: str) -> bool:
        try:
            await self.ctx.blocking(self.ctx.runtime.start, container)
        except ContainerStartError as exc:
            await self._start_failed(exc, container)
            return False
        return True

    async def _container_started(self, container: str) -> None:
        r = self.record
        state = await self.ctx.blocking(self.ctx.runtime.state, container)
        r.started_at = state.started_at or self.ctx.clock()
        await self.emit.fact(ContainerStarted, container_id=container, node_id=self.ctx.node_id)

    async def _start_failed(self, exc: ContainerStartError, container: str | None = None) -> None:
        await self.emit.fact(
            ContainerStartFailed,
            error_kind=exc.error_kind,
            message=exc.message,
        )
        await self._release("start_failed", container)

    def _container_request(
        self, resume_file: Path | None = None, secrets: dict[str, str] | None = None
    ) -> ContainerRequest:
        """The attempt's container (:func:`services.agent.container.container_request`)."""
        return container_request(self.ctx, self.record, self.outputs.dir, resume_file, secrets)

    async def _find_container(self) -> str | None:
        r, ctx = self.record, self.ctx
        if r.phase == "accepted" and not r.container_id:
            # A crash between create and the journal write leaves a labelled container.
            own = await ctx.blocking(ctx.runtime.list_own, ctx.node_id)
            for c in own:
                if c.job_id == r.job_id and c.attempt == r.attempt:
                    r.container_id, r.phase = c.id, "running"
                    ctx.journal.save(r, durable=True)
                    return c.id
            return None
        return r.container_id or None

    async def _await_exit(self, container: str) -> str:
        """How the container ended: exited, cancelled, runtime_exceeded, agent_shutdown or lost."""
        r, ctx = self.record, self.ctx
        limit = r.scheduled.runnable.limits.max_runtime_s
        started = r.started_at or ctx.clock()
        while True:
            if self._stop_request.is_set():
                return self._stop_reason or "cancelled"
            remaining = limit - (ctx.clock() - started).total_seconds()
            if remaining <= 0:
                return "runtime_exceeded"
            try:
                if await ctx.blocking(ctx.runtime.wait, container, min(0.5, remaining)):
                    return "exited"
            except docker.errors.NotFound:
                return "lost"

    async def _process_exited(
        self, container: str, state: ContainerState, runtime_exceeded: bool
    ) -> None:
        r, ctx = self.record, self.ctx
        tail = await ctx.blocking(ctx.runtime.tail, container, LAST_LOG_LINES)
        runtime_s = 0.0
        if state.started_at and state.finished_at:
            runtime_s = max(0.0, (state.finished_at - state.started_at).total_seconds())
        elif r.started_at:
            runtime_s = (ctx.clock() - r.started_at).total_seconds()
        code = state.exit_code
        await self.emit.fact(
            ProcessExited,
            exit_code=code,
            signal=code - 128 if code > 128 else None,
            oom_killed=state.oom_killed,
            runtime_s=runtime_s,
            last_log_lines=tail,
            runtime_exceeded=runtime_exceeded,
            memory_limit_bytes=state.memory_limit_bytes,
        )

    async def _finish_stopped(self, container: str | None) -> None:
        await self.emit.fact(AttemptCancelled, node_id=self.ctx.node_id)
        await self._release("cancelled", container)

    async def _release(self, reason: ReleaseReason, container: str | None = None) -> None:
        """Final meter ticks, ComputeReleased, then clean up. Every end comes through here."""
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        await self._stop_tasks()
        if "ComputeReleased" not in r.emitted:
            released_at = ctx.clock()
            if r.held_at is not None:
                ticks = meter.final_ticks(
                    r.held_at, released_at, ctx.agent.meter_interval_s, s.gpu_count, r.next_tick
                )
                await self.emit.ticks(ticks)
            await self.emit.fact(
                ComputeReleased,
                occurred_at=released_at,
                node_id=ctx.node_id,
                reason=reason,
            )
        r.phase = "done"
        ctx.journal.save(r, durable=True)
        self._on_released(r)
        if container:
            with contextlib.suppress(docker.errors.APIError):
                await ctx.blocking(ctx.runtime.remove, container)
        await ctx.blocking(shutil.rmtree, self.outputs.dir.parent, True)

    # ------------------------------------------------------------------ tasks

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=f"{self.key}:{name}"))

    async def _stop_tasks(self) -> None:
        if self._logs is not None:
            await self._logs.close()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
