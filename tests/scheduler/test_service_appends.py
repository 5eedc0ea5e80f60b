"""The scheduler decides on while its appends wait for the broker, in order (real broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from schemas.errors import EventEncodeError
from schemas.events import AttemptScheduled, Event, JobQueued, NodeHeartbeat, NodeRegistered
from schemas.types import GpuDevice
from services.ledger import Ledger, compose
from services.ledger.client import Appended
from services.scheduler import build_scheduler
from services.settings import Settings
from tests.processors.harness import fast, submitted, utcnow
from tests.waiting import eventually

pytestmark = pytest.mark.integration


class GatedLedger(Ledger):
    """The scheduler's ledger, whose appends of decisions wait for ``gate`` (a broker slow
    to ack); its leader's claim and fence markers (no job's) go through."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, "scheduler")
        self.gate = asyncio.Event()
        self.calls: list[list[tuple[str, str]]] = []

    async def append_many(
        self, events: Sequence[Event], topic: str | None = None
    ) -> list[Appended]:
        if all(e.job_id for e in events):
            self.calls.append([(e.job_id, e.type) for e in events])
            await self.gate.wait()
        return await super().append_many(events, topic)


class RefusingLedger(Ledger):
    """A ledger whose appends of decisions fail with an error that is not an outage (a bug)."""

    async def append_many(
        self, events: Sequence[Event], topic: str | None = None
    ) -> list[Appended]:
        if all(e.job_id for e in events):
            raise EventEncodeError(f"cannot encode {events[0].type}: refused by the test")
        return await super().append_many(events, topic)


async def register_node(ledger: Ledger, gpus: int) -> None:
    devices = [
        GpuDevice(index=i, model="A100-80GB", memory_total_mb=80 * 1024) for i in range(gpus)
    ]
    now = utcnow()
    await ledger.append_many(
        [
            NodeRegistered(
                node_id="node-a", occurred_at=now, inventory_source="declared", gpus=devices
            ),
            NodeHeartbeat(
                node_id="node-a", occurred_at=now, seq=1, free_gpu_indices=list(range(gpus))
            ),
        ]
    )


async def test_decisions_go_on_while_an_append_waits_and_reach_the_ledger_in_order(topics):
    settings = fast(topics)
    async with Ledger(settings, "test") as ledger:
        await register_node(ledger, gpus=2)
        gated = GatedLedger(settings)
        scheduler = build_scheduler(settings, ledger=gated)
        await scheduler.start()
        try:
            await scheduler.wait_ready()
            first, second = submitted("job-first"), submitted("job-second")
            await ledger.append(first)
            await eventually(lambda: len(gated.calls) == 1, "the first append, held at the gate")
            await ledger.append(second)
            # Decided and folded while the first append still waits for its ack.
            await eventually(
                lambda: getattr(scheduler.state.jobs.get("job-second"), "phase", "") == "scheduled",
                "the second job placed while the first append waits",
            )
            assert scheduler.placements == 0, "a placement counts once the broker has it"
            gated.gate.set()
            await eventually(lambda: scheduler.placements == 2, "both placements acknowledged")
            assert gated.calls == [
                [("job-first", "JobQueued"), ("job-first", "AttemptScheduled")],
                [("job-second", "JobQueued"), ("job-second", "AttemptScheduled")],
            ]
            await eventually(lambda: scheduler.skipped_own == 4, "its decisions read back")
            for job in (first, second):
                history = await compose.history(ledger, job.job_id)
                assert [type(e) for e in history] == [type(job), JobQueued, AttemptScheduled]
            placed = {
                e.job_id: e.gpu_indices
                for job in (first, second)
                for e in await compose.history(ledger, job.job_id)
                if isinstance(e, AttemptScheduled)
            }
            assert sorted(placed["job-first"] + placed["job-second"]) == [0, 1]
        finally:
            await scheduler.stop()


async def test_an_append_error_that_is_not_an_outage_stops_the_scheduler_with_it(topics):
    settings = fast(topics)
    async with Ledger(settings, "test") as ledger:
        await register_node(ledger, gpus=1)
        await ledger.append(submitted())
        scheduler = build_scheduler(settings, ledger=RefusingLedger(settings, "scheduler"))
        await scheduler.ledger.start()
        try:
            with pytest.raises(EventEncodeError, match="refused by the test"):
                await asyncio.wait_for(scheduler.run(), timeout=30)
        finally:
            await scheduler.stop()
