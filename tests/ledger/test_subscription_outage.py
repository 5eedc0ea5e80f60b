"""A subscription rides out an outage of the broker inside: on the FakeLedger, whose
``down`` makes every fetch, commit and append fail as an unreachable broker does.

The real broker's kill-and-restart is tests/system/test_jobs_through_a_broker_outage.py.
"""

from __future__ import annotations

import asyncio
import uuid

from schemas.events import JobSucceeded
from services.settings import Settings
from tests.fakes.ledger import FakeLedger
from tests.schemas.samples import T0
from tests.waiting import eventually


async def test_a_subscription_waits_out_the_broker_and_resumes_after_what_it_handed_over(
    settings: Settings,
) -> None:
    prefix = f"fake-{uuid.uuid4().hex[:8]}."
    ledger = await FakeLedger(settings.model_copy(update={"topic_prefix": prefix})).start()
    topic = ledger.settings.topic("job-events")
    group = f"{prefix}outage"
    await ledger.append(JobSucceeded(job_id="job-o", attempt=1, occurred_at=T0))
    seen: list[int] = []

    async def handle() -> None:
        async with ledger.subscribe([topic], name="outage-test", group=group) as subscription:
            async for batch in subscription:
                seen.extend(record.event.attempt for record in batch.records)

    task = asyncio.create_task(handle())
    try:
        await eventually(lambda: seen == [1], "the first value")
        ledger.down = True
        await eventually(lambda: ledger.outage.is_down, "the subscription to see the outage")
        ledger.down = False
        await ledger.append(JobSucceeded(job_id="job-o", attempt=2, occurred_at=T0))
        await eventually(lambda: seen == [1, 2], "the value appended after the outage")
        assert not ledger.outage.is_down, "the outage is over once the broker answers"
        await eventually(
            lambda: sum(ledger.committed.get(group, {}).values()) == 2,
            "both handled values committed to the group",
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == [1, 2], "nothing handled twice, nothing lost"
