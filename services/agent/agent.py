"""The node: registration, node heartbeats, the node-commands consumer, re-attach.

Start-up: the spool starts sending what a previous run left; NodeRegistered says
what the node has (and whether the inventory came from NVML or a file); every
unfinished attempt in the journal is picked up again (re-attach: its container is
found by label, its logs replayed past what was already emitted, its exit
reported); then the agent reads its own partition of node-commands.

Shutdown (SIGTERM/SIGINT): the agent stops taking work and emits NodeDrained.
With the default policy ``detach`` running containers keep running and the next
start re-attaches to them: a restarted or upgraded agent costs a job nothing, and
the watchdog's AttemptUnresponsive/AttemptLost deadlines bound the uncertainty
if the agent never comes back. With ``stop`` the agent stops them and releases
their compute (``ComputeReleased(reason="agent_shutdown")``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from typing import Any

from schemas.events import (
    AttemptScheduled,
    CancelRequested,
    NodeDrained,
    NodeHeartbeat,
    NodeRegistered,
)
from schemas.spec import spec_digest
from services.agent.attempt import AttemptRunner
from services.agent.context import AgentContext, GpuPool
from services.agent.facts import node_fact
from services.agent.inventory import host_memory_mb
from services.agent.journal import JournalEntry, attempt_key
from services.agent.logs import LogState
from services.clock import utcnow
from services.ledger import Ledger, LedgerPort
from services.ledger.subscription import Subscription

log = logging.getLogger(__name__)


class Agent:
    """A running node agent. ``await start()``, later ``await stop()``."""

    def __init__(self, ctx: AgentContext, ledger: LedgerPort | None = None) -> None:
        self.ctx = ctx
        self.ledger = ledger or Ledger(ctx.settings, f"agent-{ctx.node_id}-commands")
        """Where the node's commands are read from."""
        self.gpus = GpuPool([g.index for g in ctx.inventory.gpus])
        self.runners: dict[str, AttemptRunner] = {}
        self._runner_tasks: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeat_seq = 0
        self._stopping = False
        self.commands_ready = asyncio.Event()
        """Set once the node-commands subscription has handed over its first batch."""
        self.commands_consumer: Subscription | None = None
        """That subscription while it reads (its lag is the ops server's)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Agent:
        """Register the node, resume the attempts its journal left unfinished, then follow its
        commands."""
        ctx = self.ctx
        ctx.spool.start()
        inventory = ctx.inventory
        await ctx.spool.append(
            node_fact(
                NodeRegistered,
                ctx.node_id,
                ctx.clock(),
                provider=ctx.agent.provider or inventory.provider or "local",
                region=ctx.agent.region or inventory.region or "local",
                inventory_source=inventory.source,
                inventory_note=inventory.note,
                gpus=inventory.gpus,
                host_memory_mb=host_memory_mb(),
                agent_version=ctx.agent.agent_version,
                heartbeat_interval_s=ctx.agent.node_heartbeat_interval_s,
            )
        )
        log.info(
            "node %s registered: %d GPU(s) from %s (%s)",
            ctx.node_id,
            len(inventory.gpus),
            inventory.source,
            inventory.note,
        )
        await self._reattach()
        self._tasks = [
            asyncio.create_task(self._node_heartbeats(), name="node-heartbeats"),
            asyncio.create_task(self._consume_commands(), name="node-commands"),
        ]
        return self

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop taking work, detach from (or stop) running attempts, flush the spool."""
        if self._stopping:
            return
        self._stopping = True
        ctx = self.ctx
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        running = list(self.runners.values())
        if ctx.agent.shutdown_policy == "stop":
            for runner in running:
                runner.shut_down()
            await asyncio.gather(*self._runner_tasks.values(), return_exceptions=True)
        else:
            for task in self._runner_tasks.values():
                task.cancel()
            await asyncio.gather(*self._runner_tasks.values(), return_exceptions=True)
        with contextlib.suppress(Exception):
            await ctx.spool.append(
                node_fact(
                    NodeDrained,
                    ctx.node_id,
                    ctx.clock(),
                    reason=(
                        f"agent stopped ({ctx.agent.shutdown_policy}); "
                        f"{len(running)} attempt(s) "
                        + (
                            "stopped"
                            if ctx.agent.shutdown_policy == "stop"
                            else "left running for re-attach"
                        )
                    ),
                )
            )
        log.info(
            "agent %s stopped (%s): %d attempt(s) %s",
            ctx.node_id,
            ctx.agent.shutdown_policy,
            len(running),
            "stopped" if ctx.agent.shutdown_policy == "stop" else "left running for re-attach",
        )
        if not await ctx.spool.drain(drain_timeout_s):
            log.warning("spool not fully sent at shutdown; the next start sends the rest")
        await ctx.spool.stop()
        ctx.inventory.close()
        ctx.runtime.close()
        ctx.executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ attempts

    def running_attempts(self) -> list[str]:
        """'job_id/attempt' of every attempt this agent runs, for its heartbeat."""
        return sorted(self.runners)

    def _launch(self, record: JournalEntry) -> None:
        runner = AttemptRunner(self.ctx, record, self._released)
        self.runners[record.key] = runner
        self._runner_tasks[record.key] = asyncio.create_task(
            runner.run(), name=f"attempt {record.key}"
        )

    def _released(self, record: JournalEntry) -> None:
        self.gpus.release(record.key)
        self.runners.pop(record.key, None)
        self._runner_tasks.pop(record.key, None)

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no attempt runs on the node (tests and drains)."""
        tasks = list(self._runner_tasks.values())
        if not tasks:
            return True
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    async def accept(self, scheduled: AttemptScheduled) -> bool:
        """Take an AttemptScheduled for this node, at most once per job attempt."""
        ctx = self.ctx
        key = attempt_key(scheduled.job_id, scheduled.attempt)
        if key in self.runners or ctx.journal.exists(scheduled.job_id, scheduled.attempt):
            log.info("attempt %s already taken on this node; ignoring the repeat", key)
            return False
        if self._stopping:
            return False
        own = await ctx.blocking(ctx.runtime.list_own, ctx.node_id)
        if any(c.job_id == scheduled.job_id and c.attempt == scheduled.attempt for c in own):
            log.warning("attempt %s already has a container on this node; ignoring the repeat", key)
            return False
        if scheduled.dispatch_deadline < utcnow():
            log.warning(
                "attempt %s arrived after its dispatch deadline %s; not taken",
                key,
                scheduled.dispatch_deadline.isoformat(),
            )
            return False
        unrunnable = unrunnable_problem(scheduled)
        if unrunnable:
            log.warning("attempt %s %s; not taken (its dispatch will time out)", key, unrunnable)
            return False
        indices = self.gpus.reserve(key, scheduled.gpu_count, list(scheduled.gpu_indices))
        if indices is None:
            log.warning(
                "attempt %s needs %d GPU(s), %d free on this node; not taken "
                "(its dispatch will time out)",
                key,
                scheduled.gpu_count,
                len(self.gpus.free()),
            )
            return False
        record = JournalEntry(scheduled=scheduled, gpu_indices=indices)
        ctx.journal.save(record, durable=True)
        log.info("accepted %s (%s) on GPUs %s", key, scheduled.runnable.image, indices)
        self._launch(record)
        return True

    def cancel(self, request: CancelRequested) -> bool:
        """Stop the attempt a routed cancel names; False when no attempt here matches it."""
        for key, runner in self.runners.items():
            r = runner.record
            if r.job_id == request.job_id and request.attempt in (0, r.attempt):
                log.info("cancelling %s: %s", key, request.reason or "requested")
                runner.cancel(request.reason)
                return True
        log.info("cancel for %s/%s: nothing of it runs here", request.job_id, request.attempt)
        return False

    async def _reattach(self) -> None:
        ctx = self.ctx
        cursors = self._log_cursors_from_spool()
        records = ctx.journal.unfinished()
        own = await ctx.blocking(ctx.runtime.list_own, ctx.node_id)
        known = {r.key for r in records}
        for record in records:
            spooled = cursors.get(record.key)
            if spooled is not None and _log_progress(spooled) > _log_progress(record.logs):
                record.logs = spooled
            self.gpus.restore(record.key, record.gpu_indices)
            log.info("re-attaching to %s (phase %s)", record.key, record.phase)
            self._launch(record)
        for container in own:
            key = attempt_key(container.job_id, container.attempt)
            if key in known:
                continue
            done = ctx.journal.load(container.job_id, container.attempt)
            if done is not None and done.phase == "done":
                with contextlib.suppress(Exception):
                    await ctx.blocking(ctx.runtime.remove, container.id)
            else:
                log.warning(
                    "container %s (%s) carries this node's label but no journal entry; left alone",
                    container.id[:12],
                    key,
                )

    def _log_cursors_from_spool(self) -> dict[str, LogState]:
        """The latest log state per attempt still on disk in the logs lane."""
        cursors: dict[str, LogState] = {}
        for record in self.ctx.spool.scan("logs"):
            meta: dict[str, Any] = record.meta
            if "attempt" in meta and "logs" in meta:
                cursors[meta["attempt"]] = LogState.model_validate(meta["logs"])
        return cursors

    # ------------------------------------------------------------------ node heartbeats

    async def _node_heartbeats(self) -> None:
        ctx = self.ctx
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            await ctx.spool.append(
                node_fact(
                    NodeHeartbeat,
                    ctx.node_id,
                    ctx.clock(),
                    seq=self._heartbeat_seq,
                    free_gpu_indices=self.gpus.free(),
                    gpus=ctx.inventory.usage(),
                    running_attempts=self.running_attempts(),
                )
            )
            self._heartbeat_seq += 1
            due += ctx.agent.node_heartbeat_interval_s
            await asyncio.sleep(max(0.0, due - loop.time()))

    # ------------------------------------------------------------------ node commands

    async def _consume_commands(self) -> None:
        """Follow this node's commands (its key on node-commands), each batch committed to the
        node's group once handled; the subscription rides out broker outages."""
        ctx = self.ctx
        subscription = self.ledger.subscribe(
            [ctx.settings.topic("node-commands")],
            name=f"agent-{ctx.node_id}",
            group=f"{ctx.settings.topic_prefix}agent.{ctx.node_id}",
            key=ctx.node_id,
            wait_ms=500,
            max_records=100,
        )
        await self.ledger.start(wait=True)
        try:
            async with subscription:
                self.commands_consumer = subscription
                async for batch in subscription:
                    self.commands_ready.set()
                    for record in batch.records:
                        await batch.apply(record, partial(self._handle, record.value))
        finally:
            self.commands_consumer = None
            await self.ledger.stop()

    async def _handle(self, command: Any) -> None:
        if isinstance(command, AttemptScheduled) and command.node_id == self.ctx.node_id:
            await self.accept(command)
        elif isinstance(command, CancelRequested) and command.node_id in ("", self.ctx.node_id):
            self.cancel(command)
        else:
            log.info("node-commands: ignoring %s", type(command).__name__)


def _log_progress(state: LogState) -> int:
    return state.stdout.seq + state.stderr.seq + state.system.seq


def unrunnable_problem(scheduled: AttemptScheduled) -> str:
    """Why a command cannot run here ("" when it can): the dispatch processor sends an
    AttemptScheduled with its job's spec (``AttemptScheduled.for_node``), and that spec must
    be the one the scheduler placed (its ``spec_digest``; records before it have none)."""
    if scheduled.spec is None:
        return "carries no spec to run"
    if scheduled.spec_digest and spec_digest(scheduled.spec) != scheduled.spec_digest:
        return f"carries a spec other than the one placed ({scheduled.spec_digest})"
    return ""
