"""The scheduler service's snapshot on the FakeLedger: written while it leads, read at a
start before the tail; one that is missing, corrupt, of another format or ahead of the
topics is ignored with one log line and the start refolds from offset 0.

Each start is compared with a twin on a copy of the same log that refolds from offset 0:
the two decide the same placements and hold the same state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from schemas import codec
from schemas.events import (
    AttemptScheduled,
    ComputeReleased,
    Event,
    NodeHeartbeat,
    SchedulerDecision,
)
from services.clock import utcnow
from services.ledger.compose import history
from services.scheduler import Scheduler, build_scheduler, snapshot
from services.settings import Settings
from tests.fakes.ledger import FakeLedger, FakeRecord
from tests.processors.harness import fast, submitted, wait_history
from tests.scheduler.test_core import node
from tests.waiting import eventually

Logs = dict[tuple[str, int], list[FakeRecord]]


def beat(node_id: str, free: list[int]) -> NodeHeartbeat:
    return NodeHeartbeat(node_id=node_id, occurred_at=utcnow(), seq=1, free_gpu_indices=free)


def copied(
    ledger: FakeLedger, change: Callable[[Logs], None] = lambda logs: None, **settings: Any
) -> FakeLedger:
    """A second fake ledger holding a copy of ``ledger``'s log (changed by ``change``)."""
    logs = {where: list(records) for where, records in ledger.logs.items()}
    change(logs)
    return FakeLedger(ledger.settings.model_copy(update=settings), logs=logs)


def summary(scheduler: Scheduler) -> dict[str, Any]:
    state = scheduler.state
    return {
        "jobs": {j: (e.phase, e.attempt) for j, e in state.jobs.items()},
        "reservations": state.fleet.reservations,
        "queue": list(state.queue),
        "free": {n: sorted(s.free) for n, s in state.fleet.nodes.items()},
        "fence": scheduler.leadership.fence.marks(),
    }


def decisions_after(ledger: FakeLedger, ends: dict[tuple[str, int], int]) -> list[Any]:
    """The scheduler decisions appended after ``ends``, per partition in log order."""
    topic = ledger.settings.topic("job-events")
    out = []
    for (name, partition), records in sorted(ledger.logs.items()):
        if name != topic:
            continue
        for raw in records[ends.get((name, partition), 0) :]:
            event = codec.decode(raw.value) if raw.value is not None else None
            if isinstance(event, SchedulerDecision) and isinstance(event, Event):
                out.append((partition, event.type, event.event_id, getattr(event, "node_id", "")))
    return out


async def steady(*schedulers: Scheduler) -> None:
    """Until each leads, every decision it made is read back, and two more rounds passed
    (so each decided what its state holds)."""
    for scheduler in schedulers:
        await _steady(scheduler)


async def _steady(scheduler: Scheduler) -> None:
    await eventually(lambda: scheduler.settled, what="the lead")
    rounds = scheduler.rounds
    await eventually(
        lambda: scheduler.settled and scheduler.rounds >= rounds + 2, what="two more rounds"
    )


async def started(ledger: FakeLedger) -> Scheduler:
    scheduler = build_scheduler(ledger.settings, ledger=await ledger.start())
    await scheduler.start()
    await scheduler.wait_ready()
    return scheduler


async def written(settings: Settings) -> tuple[FakeLedger, list[str]]:
    """A ledger on which a scheduler placed three jobs on a two-GPU fleet (one waits),
    wrote a snapshot of it all, and stopped; then one attempt released its GPU."""
    base = settings.model_copy(update={"topic_prefix": "fake.", "scheduler_snapshot_s": 0.05})
    ledger = await FakeLedger(fast(base)).start()
    jobs = [submitted(f"job-{i}") for i in range(3)]
    await ledger.append_many([node("a", 2, at=utcnow()), beat("a", [0, 1]), *jobs])
    first = await started(ledger)
    try:
        await wait_history(
            ledger, jobs[1].job_id, lambda h: any(e.type == "AttemptScheduled" for e in h)
        )

        def covered() -> bool:
            every = {k: len(v) for k, v in ledger.logs.items() if k[0].endswith("-events")}
            return first._snapshots.written == every

        await eventually(covered, what="a snapshot covering every decision")
    finally:
        await first.stop()  # and its ledger
    await ledger.start()
    placed = [
        e for j in jobs for e in await history(ledger, j.job_id) if isinstance(e, AttemptScheduled)
    ]
    assert len(placed) == 2
    released = placed[0]
    await ledger.append(
        ComputeReleased(job_id=released.job_id, attempt=1, node_id="a", occurred_at=utcnow())
    )
    return ledger, [j.job_id for j in jobs]


async def test_a_start_from_the_snapshot_decides_as_a_refold_from_offset_0(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    ledger, jobs = await written(settings)
    state_topic = ledger.settings.topic("scheduler-state")
    twin = copied(ledger, _recreated(state_topic))
    ends = {k: len(v) for k, v in ledger.logs.items()}
    caplog.set_level(logging.INFO, "services.scheduler.service")
    restarted, refolded = await started(ledger), await started(twin)
    try:
        for each in (ledger, twin):
            # The waiting job takes the released GPU, on either.
            await eventually(partial(decisions_after, each, ends), what="the placement")
        await steady(restarted, refolded)
        assert summary(restarted) == summary(refolded)
    finally:
        await restarted.stop()
        await refolded.stop()
    assert decisions_after(ledger, ends) == decisions_after(twin, ends)
    assert [d[1] for d in decisions_after(ledger, ends)] == ["AttemptScheduled"]
    assert restarted._snapshots.restored is not None and refolded._snapshots.restored is None
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        line.startswith(
            f"scheduler snapshot {restarted._snapshots.restored} restored: 1 nodes, 3 open jobs"
        )
        for line in lines
    )
    assert f"no scheduler snapshot on {state_topic}: refolding the topics from offset 0" in lines


def _rewrite(topic: str, key: bytes, value: Callable[[bytes], bytes]) -> Callable[[Logs], None]:
    """Rewrite the latest record (not a tombstone) whose key starts with ``key``."""

    def change(logs: Logs) -> None:
        records = logs[(topic, 0)]
        at = max(
            i
            for i, r in enumerate(records)
            if (r.key or b"").startswith(key) and r.value is not None
        )
        records[at] = replace(records[at], value=value(records[at].value or b""))

    return change


def _head(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def rewrite(value: bytes) -> bytes:
        head = json.loads(value)
        change(head)
        return json.dumps(head).encode()

    return rewrite


def _recreated(topic: str) -> Callable[[Logs], None]:
    """The topic deleted and created again (empty)."""

    def change(logs: Logs) -> None:
        for where in [k for k in logs if k[0] == topic]:
            del logs[where]

    return change


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("corrupt", "does not match its digest"),
        ("format", "it is of format 2, this scheduler reads 1"),
        ("ahead", "it is ahead of the topics: it covers fake.job-events partition"),
    ],
)
async def test_a_snapshot_that_cannot_be_used_is_ignored_and_the_start_refolds_from_0(
    settings: Settings, caplog: pytest.LogCaptureFixture, damage: str, why: str
) -> None:
    ledger, _ = await written(settings)
    state_topic = ledger.settings.topic("scheduler-state")
    change = {
        "corrupt": _rewrite(state_topic, b"part/", lambda v: v[:-1] + b"\x00"),
        "format": _rewrite(state_topic, snapshot.HEAD, _head(lambda h: h.update(format=2))),
        "ahead": _recreated(ledger.settings.topic("job-events")),
    }[damage]
    damaged = copied(ledger, change)
    off = copied(damaged, scheduler_snapshot_s=0)
    caplog.set_level(logging.INFO, "services.scheduler.service")
    from_damaged, from_0 = await started(damaged), await started(off)
    try:
        await steady(from_damaged, from_0)
        assert summary(from_damaged) == summary(from_0)
        assert from_damaged._snapshots.restored is None
    finally:
        await from_damaged.stop()
        await from_0.stop()
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith(f"scheduler snapshot on {state_topic} ignored (")
    assert why in line
    assert line.endswith("refolding the topics from offset 0")
