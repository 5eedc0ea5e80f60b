"""The scheduler service on the FakeLedger: the same loop, no broker.

The scheduler takes a ledger port (``build_scheduler(settings, ledger=...)``); on
the fake it rebuilds from the log, places a job on a scripted node and, restarted,
decides nothing twice. tests/scheduler/test_service.py holds the same scenario
against the real broker.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.events import AttemptScheduled, Event, JobQueued
from services.scheduler import build_scheduler
from services.settings import Settings
from tests.fakes.ledger import FakeLedger
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import fast, submitted, wait_history
from tests.waiting import eventually


def placements(history: Sequence[Event]) -> list[AttemptScheduled]:
    return [e for e in history if isinstance(e, AttemptScheduled)]


async def test_the_scheduler_places_on_the_fake_ledger_and_a_restart_decides_nothing_twice(
    settings: Settings,
) -> None:
    ledger = await FakeLedger(fast(settings.model_copy(update={"topic_prefix": "fake."}))).start()
    node = await ScriptedNode(ledger, "node-a", gpus=1).start(heartbeats=False)
    await node.node_heartbeat()
    job = submitted()
    await ledger.append(job)
    first = build_scheduler(ledger.settings, ledger=ledger)
    await first.start()
    try:
        await first.wait_ready()
        placed = await wait_history(
            ledger, job.job_id, lambda h: bool(placements(h)), what="placement"
        )
    finally:
        await first.stop()
    second = build_scheduler(ledger.settings, ledger=ledger)
    await second.start()
    try:
        await second.wait_ready()
        rounds = second.rounds
        # Decision rounds pass (on the timer) without a second placement or queueing.
        await eventually(lambda: second.rounds >= rounds + 3, what="decision rounds")
        assert second.state.fleet.reservations == {(job.job_id, 1): ("node-a", (0,))}
    finally:
        await second.stop()
        await node.stop()
    history = await ledger.history(job.job_id)
    (scheduled,) = placements(history)
    assert (scheduled.node_id, scheduled.gpu_indices) == ("node-a", [0])
    assert len([e for e in history if isinstance(e, JobQueued)]) == 1
    assert placements(placed) == [scheduled]
