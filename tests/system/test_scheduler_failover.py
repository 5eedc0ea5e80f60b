"""The leading scheduler SIGKILLed under load: its standby takes over and nothing is lost.

Real processes on the shared broker (the test's own topics): two ``gridledger
scheduler`` (a leader and its standby) and ``gridledger processors``; the fleet is
the simulator's (the agent protocol, the agent's own fact ids, no Docker), in this
process, and it notes every placement on a GPU another attempt holds. Jobs are
submitted in two waves around the kill. Over the whole ledger afterwards, read
through the fence as every reader reads it: every job ends in exactly one terminal
event, every attempt is placed once, no GPU holds two attempts at once, and the
takeover claimed a higher epoch.

Opt-in (about a minute of processes on a loaded machine): ``GRIDLEDGER_FAILOVER_TEST=1
python -m pytest -q tests/system/test_scheduler_failover.py``. The default run has the
same takeover on the FakeLedger (tests/scheduler/test_leader.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.fence import Fence
from schemas import codec
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptScheduled,
    ComputeReleased,
    Event,
    JobSubmitted,
    LeaderElected,
)
from services.ledger import Ledger
from services.ledger.topics import delete_topics, ensure_topics
from services.ops.specs import ServiceSpec
from services.ops.supervisor import Supervisor
from services.settings import load_settings
from services.simulator.fleet import SimFleet
from services.simulator.mix import JobMix
from services.simulator.run import sim_spec
from tests.system.conftest import _drop_schema, system_settings, workdir
from tests.waiting import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("GRIDLEDGER_FAILOVER_TEST", "") in ("", "0"),
        reason="about a minute of real processes; GRIDLEDGER_FAILOVER_TEST=1 runs it",
    ),
]

SCHEDULERS = ("scheduler-a", "scheduler-b")
WAVE = 40


class WatchedFleet(SimFleet):
    """The simulated fleet, noting each placement on a GPU another attempt still holds:
    a double booking, as an agent would meet it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.double_booked: list[tuple[str, str, dict[int, str]]] = []

    def _command(self, node_id: str, event: Event) -> None:
        node = self.nodes.get(node_id)
        if node is not None and isinstance(event, AttemptScheduled):
            key = f"{event.job_id}/{event.attempt}"
            held = {i: k for i, k in node.busy.items() if i in event.gpu_indices and k != key}
            if held and key not in self.attempts:
                self.double_booked.append((node_id, key, held))
        super()._command(node_id, event)


class Ledgered:
    """What every reader applies of ``job-events``: the whole topic through the fence."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.events: list[Event] = []
        self.dropped: list[Event] = []
        self.markers: list[LeaderElected] = []

    async def read(self) -> Ledgered:
        fence = Fence()
        self.events, self.dropped, self.markers = [], [], []
        async for raw in self.ledger.read_raw(self.ledger.settings.topic("job-events")):
            event = codec.decode(raw.value) if raw.value is not None else None
            if not isinstance(event, Event):
                continue
            if fence.admits(raw.partition, raw.offset, event):
                self.events.append(event)
            elif isinstance(event, LeaderElected):
                self.markers.append(event)
            else:
                self.dropped.append(event)
        return self

    def terminal(self) -> dict[str, set[str]]:
        ends: dict[str, set[str]] = defaultdict(set)
        for e in self.events:
            if isinstance(e, TERMINAL_EVENTS):
                ends[e.job_id].add(e.event_id)
        return ends


async def claims(ledger: Ledger) -> list[tuple[int, str]]:
    """(epoch, candidate) of every claim on the lease, in order."""
    topic = ledger.settings.topic("scheduler-lease")
    out = []
    async for raw in ledger.read_raw(topic):
        value = codec.decode(raw.value) if raw.value is not None else None
        if isinstance(value, LeaderElected):
            out.append((raw.offset + 1, value.candidate))
    return out


def submissions(tag: str, count: int, mix: JobMix) -> list[JobSubmitted]:
    return [
        JobSubmitted(
            job_id=f"failover-{tag}-{i:03d}",
            occurred_at=datetime.now(UTC),
            producer="test",
            tenant="sim",
            spec=sim_spec(mix.gpu_count(i)),
        )
        for i in range(count)
    ]


async def test_the_leader_sigkilled_under_load_is_replaced_and_no_gpu_is_double_booked() -> None:
    work = workdir()
    settings = system_settings(load_settings(), work)
    await ensure_topics(settings)
    services = Supervisor(settings, log_dir=work / "logs", policy=None)
    try:
        for name in SCHEDULERS:
            services.start(ServiceSpec(name, ["scheduler"]))
        services.start(ServiceSpec("processors", ["processors"]))
        async with Ledger(settings, "test") as ledger:
            mix = JobMix.parse("success=1", duration="1-3", gpus="1,1,2", seed=7)
            fleet = WatchedFleet(
                ledger, 4, mix, gpus_per_node=4, heartbeat_interval_s=0.5, tick_s=0.5
            )
            await fleet.start()
            try:
                await run_the_failover(services, ledger, fleet, mix)
            finally:
                await fleet.stop()
    finally:
        services.stop()
        await delete_topics(settings)
        await _drop_schema(settings)


async def run_the_failover(
    services: Supervisor, ledger: Ledger, fleet: WatchedFleet, mix: JobMix
) -> None:
    first_wave = submissions("a", WAVE, mix)
    await fleet.emit(first_wave)
    *_, (epoch, leader) = await eventually(
        lambda: claims(ledger), "a scheduler claiming the lead", timeout=120
    )
    pids = {services.children[name].pid: name for name in SCHEDULERS}
    killed = pids[int(leader.rsplit("/", 1)[1])]

    async def placed() -> bool:
        view = await Ledgered(ledger).read()
        return sum(isinstance(e, AttemptScheduled) for e in view.events) >= WAVE // 4

    await eventually(placed, "the leader placing part of the first wave", timeout=120)
    services.kill(killed, signal.SIGKILL)
    killed_at = time.monotonic()
    second_wave = submissions("b", WAVE, mix)
    await fleet.emit(second_wave)

    async def taken_over() -> tuple[int, str] | None:
        latest = (await claims(ledger))[-1]
        return latest if latest[0] > epoch else None

    new_epoch, successor = await eventually(taken_over, "the standby claiming the lead", 60)
    took_s = time.monotonic() - killed_at
    assert pids[int(successor.rsplit("/", 1)[1])] != killed
    wanted = {j.job_id for j in first_wave + second_wave}

    async def all_ended() -> Ledgered | None:
        view = await Ledgered(ledger).read()
        return view if wanted <= set(view.terminal()) else None

    view = await eventually(all_ended, "every job of both waves ending", timeout=180)
    print(
        f"takeover: standby claimed epoch {new_epoch} {took_s:.1f} s after the SIGKILL "
        f"(lease timeout {ledger.settings.scheduler_lease_timeout_s:.0f} s); "
        f"{len(view.dropped)} stale decisions dropped by the fence"
    )
    services.check_alive()  # the standby, the processors: nothing else died

    ends = view.terminal()
    assert {j: len(ends[j]) for j in wanted} == dict.fromkeys(wanted, 1), "one terminal each"
    succeeded = {e.job_id for e in view.events if type(e).__name__ == "JobSucceeded"}
    assert wanted <= succeeded, sorted(wanted - succeeded)

    placements: dict[tuple[str, int], set[str]] = defaultdict(set)
    booked: dict[tuple[str, int], list[tuple[datetime, datetime, str]]] = defaultdict(list)
    released = {
        (e.job_id, e.attempt): e.occurred_at for e in view.events if isinstance(e, ComputeReleased)
    }
    distinct = {e.event_id: e for e in view.events}  # a repeated append is the same event
    for e in distinct.values():
        if isinstance(e, AttemptScheduled) and e.job_id in wanted:
            placements[(e.job_id, e.attempt)].add(e.event_id)
            end = released[(e.job_id, e.attempt)]
            for gpu in e.gpu_indices:
                booked[(e.node_id, gpu)].append((e.occurred_at, end, e.job_id))
    assert all(len(ids) == 1 for ids in placements.values()), "an attempt placed twice"
    assert {(j, 1) for j in wanted} <= set(placements), "a job never placed"
    for where, spans in booked.items():
        spans.sort()
        for (_, end, job), (start, _, nxt) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"GPU {where}: {nxt} placed at {start} while {job} held it"
    assert fleet.double_booked == []
    epochs = {e.leader_epoch for e in view.events if isinstance(e, AttemptScheduled)}
    assert epochs <= {epoch, new_epoch} and new_epoch in epochs
    assert {m.epoch for m in view.markers} == {epoch, new_epoch}
