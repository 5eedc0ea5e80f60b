"""A subscription rides out an outage of the broker inside: on the FakeLedger, whose
``down`` makes every fetch, commit and append fail as an unreachable broker does.

The real broker's kill-and-restart is tests/system/test_jobs_through_a_broker_outage.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from aiokafka.errors import CommitFailedError

from schemas.events import JobSucceeded
from services.settings import Settings
from tests.fakes.ledger import FakeConsumer, FakeLedger
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


async def test_a_commit_refused_by_a_rebalance_is_not_reported_as_an_outage(
    settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an outage longer than the group's session the broker answers a commit with
    CommitFailedError (the partitions went to another member): the log must not say the
    broker is unreachable, and the batch is left to be read again."""
    prefix = f"fake-{uuid.uuid4().hex[:8]}."
    ledger = await FakeLedger(settings.model_copy(update={"topic_prefix": prefix})).start()
    topic = ledger.settings.topic("job-events")
    group = f"{prefix}rebalanced"
    refused: list[dict[Any, int]] = []
    real_commit = FakeConsumer.commit

    async def commit_once_refused(self: Any, offsets: dict[Any, int]) -> None:
        if not refused:
            refused.append(offsets)
            raise CommitFailedError("the group has already rebalanced")
        await real_commit(self, offsets)

    monkeypatch.setattr(FakeConsumer, "commit", commit_once_refused)
    await ledger.append(JobSucceeded(job_id="job-r", attempt=1, occurred_at=T0))
    await ledger.append(JobSucceeded(job_id="job-r", attempt=2, occurred_at=T0))
    seen: list[int] = []

    async def handle() -> None:
        async with ledger.subscribe([topic], name="rebalance-test", group=group) as subscription:
            async for batch in subscription:
                seen.extend(record.event.attempt for record in batch.records)

    caplog.set_level(logging.INFO)
    task = asyncio.create_task(handle())
    try:
        await eventually(lambda: bool(refused), "the refused commit")
        await ledger.append(JobSucceeded(job_id="job-r", attempt=3, occurred_at=T0))
        await eventually(lambda: 3 in seen, "the value appended after the refused commit")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert "is unreachable" not in caplog.text, "a rebalance is not the broker being away"
    assert "not committed" in caplog.text and "read again" in caplog.text
    assert not ledger.outage.is_down
