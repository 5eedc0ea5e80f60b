"""One attempt's lifecycle on this node, from acceptance to ComputeReleased.

Facts, in order, on job-events: AttemptAccepted, ComputeHeld, ImageResolved |
ImageUnavailable, ContainerStarted | ContainerStartFailed, CheckpointStored*,
ProcessExited | AttemptCancelled, OutputStored* / OutputFailed*, ComputeReleased.
Alongside, on their own topics and tasks: AttemptHeartbeat (every
``heartbeat_interval_s``), MeterTick (while compute is held) and LogChunk.

Each fact is spooled first and recorded in the journal; its event id is derived
from the AttemptScheduled id and the fact, so a restarted agent that picks the
attempt up again (re-attach) emits duplicates that readers drop, never new facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import docker.errors

from schemas.events import (
    AttemptAccepted,
    AttemptCancelled,
    AttemptHeartbeat,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    ContainerStartFailed,
    Event,
    ImageResolved,
    ImageUnavailable,
    LogChunk,
    OutputFailed,
    OutputStored,
    ProcessExited,
    ReleaseReason,
    agent_fact,
    fact_key,
)
from schemas.spec import MIN_CPUS, MIN_MEMORY_GB, reserved_env
from services.agent import meter
from services.agent.artifacts import StoredArtifact, checkpoint_step, put_confined
from services.agent.confine import Caps, list_files
from services.agent.context import AgentContext
from services.agent.errors import (
    ArtifactChecksumError,
    ArtifactMissingError,
    ArtifactRefusedError,
    ArtifactStoreError,
    ContainerStartError,
    ImageUnavailableError,
)
from services.agent.journal import JournalEntry
from services.agent.logs import Chunk
from services.agent.logstream import LogFollower
from services.agent.runtime import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_NODE,
    OUTPUT_DIR,
    RESUME_DIR,
    ContainerRequest,
    ContainerState,
    Stats,
    container_name,
)
from services.ops.logs import bind_context

E = TypeVar("E", bound=Event)
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
        self._stats = Stats()
        self._logs: LogFollower | None = None
        self._pending_checkpoints: dict[str, tuple[int, int]] = {}
        self._checkpoint_failures: dict[str, int] = {}
        self._checkpoint_folder_refused = False
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
        await self._fact(AttemptAccepted, node_id=ctx.node_id)
        if r.held_at is None:
            r.held_at = ctx.clock()
        await self._fact(
            ComputeHeld,
            occurred_at=r.held_at,
            node_id=ctx.node_id,
            gpu_count=s.gpu_count,
            gpu_model=self._gpu_model(),
            gpu_indices=r.gpu_indices,
        )
        self._spawn(self._heartbeats(), "heartbeats")
        self._spawn(self._meter(), "meter")

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
            ctx.runtime, container, self.key, ctx.agent, r.logs, self._emit_chunks
        )
        self._logs.start()
        if s.spec.checkpoints:
            self._spawn(self._watch_checkpoints(), "checkpoints")
        self._spawn(self._sample_stats(container), "stats")

        outcome = await self._await_exit(container)
        if outcome == "lost":
            log.warning("container of %s vanished while it ran", self.key)
            await self._release("container_lost")
            return
        if outcome in ("cancelled", "runtime_exceeded", "agent_shutdown"):
            await ctx.blocking(ctx.runtime.stop, container, ctx.agent.stop_grace_s)
        await self._logs.end()
        if s.spec.checkpoints:
            await self._scan_checkpoints(final=True)
        state = await ctx.blocking(ctx.runtime.state, container)
        if outcome == "cancelled":
            await self._finish_stopped(container)
            return
        if outcome == "agent_shutdown":
            await self._release("agent_shutdown", container)
            return
        await self._process_exited(container, state, outcome == "runtime_exceeded")
        if outcome == "exited":
            await self._store_outputs()
        await self._release(
            "runtime_exceeded" if outcome == "runtime_exceeded" else "exited", container
        )

    async def _create_and_start(self) -> str | None:
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        try:
            image_id, pulled = await ctx.blocking(
                ctx.runtime.resolve_image, s.spec.image, ctx.agent.pull_policy
            )
        except ImageUnavailableError as exc:
            await self._fact(
                ImageUnavailable,
                image=s.spec.image,
                reason=exc.reason,
                message=exc.message,
            )
            await self._release("image_unavailable")
            return None
        await self._fact(ImageResolved, image=s.spec.image, image_id=image_id, pulled=pulled)
        try:
            secrets = await ctx.secrets.resolve(s.job_id, s.attempt) if s.spec.secrets else {}
            resume_file = await self._fetch_resume_checkpoint()
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
        await self._fact(ContainerStarted, container_id=container, node_id=self.ctx.node_id)

    async def _start_failed(self, exc: ContainerStartError, container: str | None = None) -> None:
        await self._fact(
            ContainerStartFailed,
            error_kind=exc.error_kind,
            message=exc.message,
        )
        await self._release("start_failed", container)

    async def _fetch_resume_checkpoint(self) -> Path | None:
        """Download the checkpoint to resume from into the attempt's folder, verified.

        It comes from the object store, not from this node's disk, so a retry on
        another host resumes the same way. A sha256 mismatch stops the attempt: a
        job never silently resumes from bytes that are not its checkpoint.
        """
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        ref = s.resume_from
        if ref is None:
            return None
        target = self._output_dir().parent / "resume" / ref.name
        try:
            await ctx.blocking(ctx.store.fetch, s.tenant, ref.uri, ref.sha256, target)
        except ArtifactChecksumError as exc:
            raise ContainerStartError(
                "checkpoint_checksum_mismatch",
                f"checkpoint {ref.name} of job {ref.job_id} (attempt {ref.attempt}): {exc}",
            ) from exc
        except ArtifactStoreError as exc:
            raise ContainerStartError(
                "resume_checkpoint_unavailable",
                f"checkpoint {ref.name} of job {ref.job_id} (attempt {ref.attempt}) could not "
                f"be downloaded to node {ctx.node_id}: {exc}",
            ) from exc
        log.info("attempt %s resumes from %s (%s)", r.key, ref.uri, ref.sha256[:12])
        return target

    def _container_request(
        self, resume_file: Path | None = None, secrets: dict[str, str] | None = None
    ) -> ContainerRequest:
        """The container of the attempt; ``secrets`` (values by variable) go into its
        environment and nowhere else: the request is never journaled or spooled."""
        r, s, ctx = self.record, self.record.scheduled, self.ctx
        uid, gid = ctx.agent.user()
        output = self._output_dir()
        for folder in (output, output / (s.spec.checkpoints or ".")):
            # Owned by the container's (non-root) user, closed to every other uid on the node.
            folder.mkdir(parents=True, exist_ok=True)
            os.chown(folder, uid, gid)
            os.chmod(folder, 0o750)
        # The API refuses reserved names; a record it did not check (an older writer, the
        # trusted decode path) still never overrides what the agent sets.
        given = {**s.spec.env, **(secrets or {})}
        env = {k: v for k, v in given.items() if not reserved_env(k)}
        if len(env) < len(given):
            log.warning(
                "attempt %s: reserved names dropped from the job's env: %s",
                self.key,
                ", ".join(sorted(k for k in given if reserved_env(k))),
            )
        gpus = list(r.gpu_indices) if ctx.inventory.has_real_gpus and s.gpu_count else None
        env.update(
            GRIDLEDGER_JOB_ID=s.job_id,
            GRIDLEDGER_ATTEMPT=str(s.attempt),
            GRIDLEDGER_OUTPUT_DIR=OUTPUT_DIR,
            # Whatever the image sets: the assigned GPUs only ("void": none at all).
            NVIDIA_VISIBLE_DEVICES=",".join(map(str, gpus)) if gpus else "void",
        )
        resume_target = ""
        if s.resume_from is not None and resume_file is not None:
            resume_target = f"{RESUME_DIR}/{s.resume_from.name}"
            env["GRIDLEDGER_RESUME_FROM"] = resume_target
        return ContainerRequest(
            name=container_name(ctx.node_id, s.job_id, s.attempt),
            image=s.spec.image,
            command=list(s.spec.command),
            env=env,
            labels={
                LABEL_JOB: s.job_id,
                LABEL_ATTEMPT: str(s.attempt),
                LABEL_NODE: ctx.node_id,
            },
            # Never 0 (Docker's "no limit"), even for a spec the API did not check.
            memory_limit_bytes=max(int(s.spec.resources.memory_gb * 1024**3), _MIN_MEMORY),
            nano_cpus=max(int(s.spec.resources.cpus * 1e9), _MIN_NANO_CPUS),
            output_dir=output,
            user=f"{uid}:{gid}",
            pids_limit=ctx.agent.pids_limit,
            resume_file=resume_file,
            resume_target=resume_target,
            gpu_indices=gpus,
        )

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
        limit = r.scheduled.spec.limits.max_runtime_s
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
        await self._fact(
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
        await self._fact(AttemptCancelled, node_id=self.ctx.node_id)
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
                await self._emit_ticks(ticks)
            await self._fact(
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
        await ctx.blocking(shutil.rmtree, self._output_dir().parent, True)

    # ------------------------------------------------------------------ facts

    async def _fact(self, cls: type[Event], revision: object = None, **fields: Any) -> None:
        """Spool one lifecycle fact once per attempt: its key (:func:`fact_key`) is
        journaled, so a restarted agent does not emit it again."""
        r = self.record
        key = fact_key(cls, fields, revision)
        if key in r.emitted:
            return
        at = fields.pop("occurred_at", None) or self.ctx.clock()
        await self.ctx.spool.append(self._new(cls, at, revision, **fields))
        r.emitted.append(key)
        self.ctx.journal.save(r, durable=True)

    def _new(
        self, cls: type[E], at: datetime | None = None, revision: object = None, **fields: Any
    ) -> E:
        """A fact of this attempt, occurring ``at`` (now when not given)."""
        r, ctx = self.record, self.ctx
        return agent_fact(
            cls, r.scheduled, ctx.node_id, at or ctx.clock(), revision=revision, **fields
        )

    def _gpu_model(self) -> str:
        s = self.record.scheduled
        if s.gpu_model:
            return s.gpu_model
        models = {g.index: g.model for g in self.ctx.inventory.gpus}
        return next((models[i] for i in self.record.gpu_indices if i in models), "")

    def _output_dir(self) -> Path:
        r = self.record
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in r.job_id)
        return self.ctx.work_dir / f"{safe}.{r.attempt}" / "output"

    # ------------------------------------------------------------------ heartbeats, meter, stats

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

    async def _heartbeats(self) -> None:
        r, ctx = self.record, self.ctx
        loop = asyncio.get_running_loop()
        interval = ctx.agent.heartbeat_interval_s
        due = loop.time()
        while True:
            seq = r.heartbeat_seq
            usage = [u for u in ctx.inventory.usage() if u.index in r.gpu_indices]
            await ctx.spool.append(
                self._new(
                    AttemptHeartbeat,
                    node_id=ctx.node_id,
                    seq=seq,
                    gpus=usage,
                    host_memory_used_mb=self._stats.memory_used_mb,
                    cpu_pct=round(self._stats.cpu_pct, 1),
                )
            )
            r.heartbeat_seq = seq + 1
            due += interval
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def _meter(self) -> None:
        r, ctx = self.record, self.ctx
        assert r.held_at is not None
        interval = ctx.agent.meter_interval_s
        while True:
            ticks = meter.due_ticks(
                r.held_at, ctx.clock(), interval, r.scheduled.gpu_count, r.next_tick
            )
            await self._emit_ticks(ticks)
            wake = meter.next_boundary(r.held_at, r.next_tick, interval)
            await asyncio.sleep(max(0.01, (wake - ctx.clock()).total_seconds()))

    async def _emit_ticks(self, ticks: list[meter.Tick]) -> None:
        if not ticks:
            return
        r, ctx = self.record, self.ctx
        model, now = self._gpu_model(), ctx.clock()
        events = [meter.tick_fact(t, r.scheduled, ctx.node_id, model, now) for t in ticks]
        await ctx.spool.append_many(events)
        r.next_tick = ticks[-1].index + 1
        ctx.journal.save(r)

    async def _sample_stats(self, container: str) -> None:
        ctx = self.ctx
        while True:
            with contextlib.suppress(Exception):  # usage figures are best effort
                self._stats = await ctx.blocking(ctx.runtime.stats, container, self._stats)
            await asyncio.sleep(ctx.agent.stats_interval_s)

    # ------------------------------------------------------------------ logs

    async def _emit_chunks(self, chunks: list[Chunk]) -> None:
        if not chunks:
            return
        r, ctx = self.record, self.ctx
        events: list[Event] = [
            self._new(
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

    # ------------------------------------------------------------------ checkpoints, outputs

    async def _watch_checkpoints(self) -> None:
        while True:
            await asyncio.sleep(self.ctx.agent.checkpoint_poll_s)
            await self._scan_checkpoints(final=False)

    async def _scan_checkpoints(self, final: bool) -> None:
        r, ctx = self.record, self.ctx
        prefix = r.scheduled.spec.checkpoints or ""
        if self._checkpoint_folder_refused:
            return
        try:
            listing = await ctx.blocking(list_files, self._output_dir(), prefix, _SKIPPED)
        except ArtifactRefusedError as exc:  # the folder itself is a link (or passes through one)
            self._checkpoint_folder_refused = True  # for good: nothing below it is stored
            await self._refused(exc, required=False)
            return
        except ArtifactMissingError:
            return
        for name, signature in sorted(listing.items()):
            if r.checkpoints.get(name) == list(signature):
                continue
            if (
                name not in r.checkpoints
                and self._checkpoint_files() >= ctx.agent.max_checkpoint_files
            ):
                await self._too_many_checkpoints(prefix)
                return
            stable = self._pending_checkpoints.get(name) == signature
            self._pending_checkpoints[name] = signature
            if not (stable or final) or self._checkpoint_failures.get(name, 0) >= 3:
                continue
            await self._store_checkpoint(f"{prefix}/{name}", name, signature)

    def _checkpoint_files(self) -> int:
        """Checkpoint files of this attempt stored or given up on, each counted once."""
        return len(self.record.checkpoints.keys() | self._checkpoint_failures.keys())

    async def _too_many_checkpoints(self, prefix: str) -> None:
        """Refuse the checkpoint folder for good once the attempt reached its count."""
        self._checkpoint_folder_refused = True
        limit = self.ctx.agent.max_checkpoint_files
        message = (
            f"'{prefix}' holds more checkpoint files than the {limit} an attempt may store "
            "(max_checkpoint_files); later ones are not stored: keep fewer (overwrite or "
            "delete old ones)"
        )
        await self._refused(ArtifactRefusedError(prefix, "over_checkpoint_count", message), False)

    async def _store_checkpoint(self, path: str, name: str, signature: tuple[int, int]) -> None:
        r, ctx = self.record, self.ctx
        try:
            stored = await self._put(path, ctx.agent.upload_timeout_s)
        except ArtifactMissingError:
            return  # gone since the listing (a job replacing its checkpoint)
        except ArtifactRefusedError as exc:
            self._checkpoint_failures[name] = 3  # the job's file: never tried again
            await self._refused(exc, required=False)
            return
        except ArtifactStoreError as exc:
            self._checkpoint_failures[name] = self._checkpoint_failures.get(name, 0) + 1
            log.warning("checkpoint %s of %s not stored: %s", name, self.key, exc)
            return
        await self._fact(
            CheckpointStored,
            revision=signature[1],
            name=name,
            step=checkpoint_step(name),
            uri=stored.uri,
            sha256=stored.sha256,
            bytes=stored.bytes,
        )
        r.checkpoints[name] = list(signature)
        ctx.journal.save(r)

    async def _store_outputs(self) -> None:
        r, ctx = self.record, self.ctx
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ctx.agent.upload_timeout_s
        for spec in r.scheduled.spec.outputs:
            try:
                stored = await self._put(spec.path, deadline - loop.time())
            except ArtifactMissingError:
                await self._fact(
                    OutputFailed,
                    path=spec.path,
                    reason="missing",
                    required=spec.required,
                    message=f"{spec.path} was not under $GRIDLEDGER_OUTPUT_DIR after the exit",
                )
                continue
            except ArtifactRefusedError as exc:
                await self._refused(exc, required=spec.required)
                continue
            except ArtifactStoreError as exc:
                await self._fact(
                    OutputFailed,
                    path=spec.path,
                    reason="store_failed",
                    required=spec.required,
                    message=str(exc),
                )
                continue
            await self._fact(
                OutputStored,
                path=spec.path,
                uri=stored.uri,
                sha256=stored.sha256,
                bytes=stored.bytes,
            )

    async def _put(self, path: str, deadline_s: float) -> StoredArtifact:
        """Store the job's file ``path`` (relative to its output folder), confined and capped."""
        r, ctx = self.record, self.ctx
        if deadline_s <= 0:
            raise ArtifactStoreError(
                f"{path} was not stored within upload_timeout_s ({ctx.agent.upload_timeout_s:g} s)"
            )
        caps = Caps(ctx.agent.max_output_file_bytes, ctx.agent.max_output_job_bytes)
        stored = await ctx.blocking(
            put_confined,
            ctx.store,
            r.scheduled.tenant,
            r.job_id,
            r.attempt,
            self._output_dir(),
            path,
            caps,
            r.stored_bytes,
            deadline_s,
        )
        r.stored_bytes += stored.bytes
        return stored

    async def _refused(self, exc: ArtifactRefusedError, required: bool) -> None:
        """What the job wrote or declared is not stored: an OutputFailed naming path and rule."""
        log.info("attempt %s: %s not stored: %s", self.key, exc.path, exc.message)
        await self._fact(
            OutputFailed,
            path=exc.path,
            reason=exc.reason,
            required=required,
            message=exc.message,
        )


_MIN_MEMORY = int(MIN_MEMORY_GB * 1024**3)
_MIN_NANO_CPUS = int(MIN_CPUS * 1e9)

_SKIPPED = (".tmp", ".partial", ".part", ".swp")
"""Checkpoint files still being written, by the usual suffixes: never stored."""
