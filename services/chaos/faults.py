"""The faults the chaos suite injects, one row each: what it does and what it needs.

Every fault is a coroutine ``inject(run) -> detail`` that breaks something real
(a SIGKILL, a SIGSTOP, a clock, a disk), waits as long as the fault lasts and
undoes what a supervisor or an operator would undo (restart Postgres or the
broker; processes the supervisor restarts by itself). It returns a short
description of what it did; the harness then measures the recovery and checks
the invariants.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra import kafka, postgres
from services.chaos.procs import libfaketime
from services.ledger.topics import admin_client

if TYPE_CHECKING:
    from services.chaos.harness import Phase

Inject = Callable[["Phase"], Awaitable[str]]


@dataclass(frozen=True)
class Fault:
    """One fault the suite can inject: what it does, how, and what it needs (root, brokers)."""

    name: str
    description: str
    inject: Inject
    brokers: str = "any"
    """``single``: only on the one-broker stack; ``multi``: only on the 3-broker cluster."""
    needs: tuple[str, ...] = ()
    """Tools or privileges it needs: ``faketime``, ``root``."""


def _kill_service(name: str) -> Inject:
    async def inject(run: Phase) -> str:
        pid = await asyncio.to_thread(run.services.kill, name)
        return f"SIGKILL {name} (pid {pid}); the supervisor restarts it"

    return inject


async def kill_postgres(run: Phase) -> str:
    """Kill Postgres with SIGKILL, then start it again: the sink and API must ride it out."""
    pid = postgres.running_pid(run.settings)
    if pid is None:
        return "Postgres was not running"
    # The postmaster and every backend at once, as a host losing the process would. Not
    # its process group: pg_ctl leaves the postmaster in the group of whoever started it.
    for victim in [pid, *_children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    await run.wait_gone(pid)
    await asyncio.sleep(run.outage_s)
    await run.restart_postgres()
    return f"SIGKILL Postgres (pid {pid}), down {run.outage_s:.0f} s, restarted"


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


async def kill_broker(run: Phase) -> str:
    """Kill one broker with SIGKILL, then start it again."""
    node = kafka.cluster_nodes(run.settings)[0]
    pid = kafka.node_pid(node)
    if pid is None:
        return "the broker was not running"
    os.kill(pid, signal.SIGKILL)
    await run.wait_gone(pid)
    await asyncio.sleep(run.outage_s)
    await run.restart_kafka()
    return f"SIGKILL the broker (pid {pid}), down {run.outage_s:.0f} s, restarted"


async def kill_leader(run: Phase) -> str:
    """Kill the broker leading job-events partition 0, then start it again (a leader election)."""
    topic = run.settings.topic("job-events")
    async with admin_client(run.settings) as admin:
        (described,) = await admin.describe_topics([topic])
    leader = next(p["leader"] for p in described["partitions"] if p["partition"] == 0)
    node = kafka.node(run.settings, leader)
    pid = kafka.node_pid(node)
    if pid is None:
        return f"the leader {leader} of {topic}/0 was not running"
    os.kill(pid, signal.SIGKILL)
    await run.wait_gone(pid)
    await asyncio.sleep(run.outage_s)
    await run.restart_kafka()
    return (
        f"SIGKILL broker {leader} (pid {pid}), leader of {topic}/0, under load; "
        f"restarted after {run.outage_s:.0f} s"
    )


async def pause_agent(run: Phase) -> str:
    """Stop an agent (SIGSTOP) past the lost deadline, then let it go on: its late facts must be
    reconciled."""
    name = run.docker_agents[0]
    pause = run.timings.thresholds.silence_s + run.timings.thresholds.lost_after_s + 5
    pid = run.services.signal(name, signal.SIGSTOP)
    try:
        await asyncio.sleep(pause)
    finally:
        run.services.signal(name, signal.SIGCONT)
    return f"SIGSTOP {name} (pid {pid}) for {pause:.0f} s (past silence + lost), then SIGCONT"


def _clock(shift: str) -> Inject:
    async def inject(run: Phase) -> str:
        name = run.docker_agents[-1]
        # What `faketime -f SHIFT` does, as environment: the supervisor starts the agent.
        env = {
            "LD_PRELOAD": libfaketime() or "",
            "FAKETIME": shift,
            # asyncio's timers run on the monotonic clock; shift only the wall clock.
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        await asyncio.to_thread(run.services.restart_with, name, env)
        await asyncio.sleep(run.skew_s)
        await asyncio.to_thread(run.services.restore, name)
        return f"{name} ran {run.skew_s:.0f} s with its clock {shift} (libfaketime), then normal"

    return inject


async def disk_full(run: Phase) -> str:
    """Fill the filesystem under an agent's spool until a write is refused, then free it."""
    name, spool = run.docker_agents[-1], run.spool_mount
    if spool is None:
        return "skipped: no small filesystem under the spool (needs root and tmpfs)"
    filler = spool / "chaos-filler"
    total, _, free = shutil.disk_usage(spool)
    # Unbuffered: every write reaches the filesystem, so the last one is the one refused.
    with filler.open("wb", buffering=0) as f:
        for block in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * block)
    left = shutil.disk_usage(spool).free
    try:
        await asyncio.sleep(run.outage_s)
    finally:
        filler.unlink(missing_ok=True)
    return (
        f"filled {name}'s spool filesystem ({total >> 20} MiB tmpfs, {free >> 20} MiB free -> "
        f"{left} bytes) for {run.outage_s:.0f} s, then freed it"
    )


async def partition_agent(run: Phase) -> str:
    """Cut an agent off the network (its namespace's link down) for the outage, then heal it."""
    ns = run.netns
    if ns is None:
        return "skipped: no network namespace"
    name = run.docker_agents[0]
    pause = run.outage_s
    await asyncio.to_thread(ns.partition)
    try:
        await asyncio.sleep(pause)
    finally:
        await asyncio.to_thread(ns.heal)
    return (
        f"{name} (in network namespace {ns.name}) cut off from the broker for {pause:.0f} s "
        f"(veth {ns.host_if} down: packets dropped), then healed"
    )


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("kill-processors", "SIGKILL the processors worker", _kill_service("processors")),
        Fault("kill-sink", "SIGKILL the Postgres sink", _kill_service("sink")),
        Fault("kill-scheduler", "SIGKILL the scheduler", _kill_service("scheduler")),
        Fault("kill-api", "SIGKILL the API server", _kill_service("api")),
        Fault("kill-agent-1", "SIGKILL the first Docker agent", _kill_service("agent-d1")),
        Fault("kill-agent-2", "SIGKILL the second Docker agent", _kill_service("agent-d2")),
        Fault("kill-simagents", "SIGKILL the simulated agents", _kill_service("simagents")),
        Fault("kill-postgres", "SIGKILL Postgres, restart it", kill_postgres),
        Fault("kill-broker", "SIGKILL the single broker, restart it", kill_broker, "single"),
        Fault(
            "kill-leader",
            "SIGKILL the leader of job-events/0 in the 3-broker cluster, restart it",
            kill_leader,
            "multi",
        ),
        Fault("pause-agent", "SIGSTOP an agent past its deadlines, SIGCONT", pause_agent),
        Fault("clock-ahead", "an agent's clock 120 s ahead", _clock("+120s"), needs=("faketime",)),
        Fault(
            "clock-behind", "an agent's clock 120 s behind", _clock("-120s"), needs=("faketime",)
        ),
        Fault("disk-full", "the agent's spool filesystem full", disk_full, needs=("root",)),
        Fault(
            "partition-agent",
            "an agent cut off from the broker (its own network namespace)",
            partition_agent,
            needs=("root",),
        ),
    )
}

OVERLAPS: dict[str, tuple[str, ...]] = {
    "overlap-services": ("kill-processors", "kill-sink", "kill-scheduler", "kill-api"),
    "overlap-postgres-agent": ("kill-postgres", "kill-agent-1", "pause-agent"),
    "overlap-broker-processors": ("kill-broker", "kill-processors"),
    "overlap-leader-agent": ("kill-leader", "kill-agent-2", "kill-simagents"),
}
"""Faults injected at the same moment."""


def members(name: str) -> tuple[str, ...]:
    """The faults a name stands for: an overlap's members, else the fault itself."""
    return OVERLAPS.get(name, (name,))


def runs_on(name: str, brokers: int) -> bool:
    """Whether the fault (every member of an overlap) applies to a stack of ``brokers``."""
    for member in members(name):
        fault = FAULTS[member]
        if fault.brokers == "single" and brokers != 1:
            return False
        if fault.brokers == "multi" and brokers == 1:
            return False
    return True


def missing_need(name: str) -> str | None:
    """Why the fault cannot run here, or None."""
    for member in members(name):
        for need in FAULTS[member].needs:
            if need == "faketime" and libfaketime() is None:
                return "faketime is not installed (apt-get install faketime)"
            if need == "root" and os.geteuid() != 0:
                return "needs root to mount a small filesystem under the spool"
    return None
