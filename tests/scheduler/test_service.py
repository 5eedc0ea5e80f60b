"""The scheduler service on the real broker: live placement and restart (issue 5)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from schemas.events import AttemptScheduled, ComputeReleased, JobQueued
from services.ledger import Ledger, compose
from services.scheduler import build_scheduler
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import fast, submitted, utcnow, wait_history
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def scheduled(history):
    return {e.event_id: e for e in history if isinstance(e, AttemptScheduled)}


async def test_a_restarted_scheduler_rebuilds_its_reservations_and_decides_nothing_twice(topics):
    settings = fast(topics)
    async with Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a", gpus=1).start(heartbeats=False)
        await node.node_heartbeat()
        first = build_scheduler(settings)
        await first.start()
        try:
            await first.wait_ready()
            job1 = submitted()
            await ledger.append(job1)
            h1 = await wait_history(
                ledger, job1.job_id, lambda h: bool(scheduled(h)), what="placement"
            )
        finally:
            await first.stop()

        # Submitted while no scheduler runs; the only GPU is reserved for job1.
        job2 = submitted()
        await ledger.append(job2)
        second = build_scheduler(settings)
        await second.start()
        try:
            await second.wait_ready()
            assert second.state.fleet.reservations == {(job1.job_id, 1): ("node-a", (0,))}
            await node.node_heartbeat()  # the node is alive; job2 still must not take GPU 0
            h2 = await wait_history(
                ledger,
                job2.job_id,
                lambda h: any(isinstance(e, JobQueued) for e in h),
                what="queue",
            )
            assert not scheduled(h2)
            (placed1,) = scheduled(h1).values()
            await ledger.append(
                ComputeReleased(
                    job_id=job1.job_id, attempt=1, node_id="node-a", occurred_at=utcnow()
                )
            )
            await node.node_heartbeat()
            h2 = await wait_history(
                ledger, job2.job_id, lambda h: bool(scheduled(h)), what="placement"
            )
            h1 = await compose.history(ledger, job1.job_id)
        finally:
            await second.stop()
            await node.stop()
    assert len(scheduled(h1)) == 1 and len([e for e in h1 if isinstance(e, JobQueued)]) == 1
    (placed2,) = scheduled(h2).values()
    assert (placed2.node_id, placed2.gpu_indices, placed2.attempt) == ("node-a", [0], 1)
    assert placed2.dispatch_deadline - placed2.occurred_at == timedelta(
        seconds=settings.scheduler_dispatch_timeout_s
    )
    assert placed1.job_id == job1.job_id


async def test_a_silent_node_is_not_placeable(topics):
    settings = fast(topics)
    async with Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-quiet", gpus=1).start(heartbeats=False)
        scheduler = build_scheduler(settings.model_copy(update={"scheduler_node_timeout_s": 1.0}))
        await scheduler.start()
        try:
            await scheduler.wait_ready()

            def registration_stale() -> bool:
                last_seen = scheduler.state.fleet.nodes["node-quiet"].last_seen
                assert last_seen is not None, "the node registered"
                return utcnow() - last_seen > timedelta(seconds=1.5)

            await eventually(
                registration_stale, "the registration to be older than the node timeout"
            )
            job = submitted(limits={"queue_timeout_s": 60})
            await ledger.append(job)
            await wait_history(
                ledger, job.job_id, lambda h: any(isinstance(e, JobQueued) for e in h), what="queue"
            )
            rounds = scheduler.rounds
            await eventually(lambda: scheduler.rounds >= rounds + 3, "three placement rounds")
            assert not scheduled(await compose.history(ledger, job.job_id))
            await node.node_heartbeat()
            await wait_history(ledger, job.job_id, lambda h: bool(scheduled(h)), what="placement")
        finally:
            await scheduler.stop()
            await node.stop()
