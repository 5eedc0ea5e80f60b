"""The scheduler service skipping what it need not decode, and a rebuild agreeing (real broker)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from schemas import codec
from schemas.events import NodeHeartbeat, NodeRegistered
from schemas.types import GpuDevice
from services.ledger import Ledger
from services.ledger.client import DLQ_SOURCE_OFFSET
from services.scheduler import build_scheduler
from tests.ledger.test_append_batches import raw_records
from tests.processors.harness import fast, submitted, utcnow

pytestmark = pytest.mark.integration


async def wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def snapshot(scheduler: Any) -> tuple[object, ...]:
    state = scheduler.state
    jobs = {
        j: (e.phase, e.attempt, sorted(e.scheduled_attempts), e.queued and e.queued.event_id)
        for j, e in state.jobs.items()
    }
    return dict(state.fleet.reservations), list(state.queue), jobs


async def test_own_decisions_and_unfolded_types_are_skipped_and_a_rebuild_agrees(topics):
    settings = fast(topics)
    job_topic = settings.topic("job-events")
    now = utcnow()
    gpus = [GpuDevice(index=i, model="A100-80GB", memory_total_mb=80 * 1024) for i in range(2)]
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many(
            [
                NodeRegistered(
                    node_id="node-a", occurred_at=now, inventory_source="declared", gpus=gpus
                ),
                NodeHeartbeat(node_id="node-a", occurred_at=now, seq=1, free_gpu_indices=[0, 1]),
            ]
        )
        first = build_scheduler(settings)
        await first.start()
        try:
            await first.wait_ready()
            await ledger.append_many([submitted(f"job-{i}") for i in range(3)])
            # 3 JobQueued + 2 AttemptScheduled, all read back and skipped unread.
            await wait_for(lambda: first.placements == 2, "placements")
            await wait_for(lambda: first.skipped_own == 5, "own decisions read back")
            # Not decodable, but of a type the scheduler does not fold: skipped, not parked.
            ignored = await ledger.send_raw(
                job_topic, b"job-0", b"not avro", [(codec.HEADER_TYPE, b"ProcessExited")]
            )
            # Not decodable and of a folded type: dead-lettered, as before.
            parked = await ledger.send_raw(
                job_topic, b"job-0", b"not avro", [(codec.HEADER_TYPE, b"JobSubmitted")]
            )
            await ledger.append(
                NodeHeartbeat(node_id="node-a", occurred_at=utcnow(), seq=2, free_gpu_indices=[])
            )
            await wait_for(
                lambda: first.state.fleet.nodes["node-a"].reported_free == frozenset(),
                "the heartbeat after the raw records",
            )
            live = snapshot(first)
        finally:
            await first.stop()
        second = build_scheduler(settings)
        await second.start()
        try:
            await second.wait_ready()
            assert second.skipped_own == 0, "a restarted scheduler folds its old decisions"
            assert snapshot(second) == live
            assert second.placements == 0, "nothing decided twice"
        finally:
            await second.stop()
        parked_offsets = {
            dict(r.headers)[DLQ_SOURCE_OFFSET] for r in await raw_records(ledger, "dead-letter")
        }
    assert parked_offsets == {str(parked.offset).encode()}
    assert ignored.offset != parked.offset
    placed, queued = live[0], live[1]
    assert len(placed) == 2 and len(queued) == 1  # type: ignore[arg-type]
