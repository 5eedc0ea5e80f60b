"""Ledger.append_many: batched per partition, each event where it says, in order (real broker)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from schemas import codec
from schemas.events import Event, JobQueued
from services.ledger import Ledger
from services.ledger.client import partition_for
from tests.processors.harness import utcnow

pytestmark = pytest.mark.integration


async def raw_records(ledger: Ledger, suffix: str) -> list[Any]:
    """Every record of the topic as the consumer hands it over (bytes and headers)."""
    return [raw async for raw in ledger.read_raw(ledger.settings.topic(suffix))]


async def test_appends_land_where_they_say_in_order_with_the_codecs_bytes(topics):
    now = utcnow()
    # ~300 bytes each: several producer batches (16 KiB) per partition.
    events: list[Event] = [
        JobQueued(
            job_id=f"job-{i % 40}",
            attempt=i // 40,
            occurred_at=now,
            queue_deadline=now + timedelta(seconds=60),
            reason="x" * 150,
        )
        for i in range(600)
    ]
    async with Ledger(topics, "test") as ledger:
        appended = await ledger.append_many(events)
        assert await ledger.append_many([]) == []
        records = {
            (r.topic, r.partition, r.offset): r for r in await raw_records(ledger, "job-events")
        }
        count = await ledger.partitions(topics.topic("job-events"))
    assert len(records) == len(events) == len(appended)
    last: dict[str, int] = {}
    for event, where in zip(events, appended, strict=True):
        raw = records[(where.topic, where.partition, where.offset)]
        assert where.topic == topics.topic("job-events")
        assert where.partition == partition_for(event.key, count)
        assert raw.key == event.key.encode() and raw.value == codec.encode(event)
        assert [(k, bytes(v)) for k, v in raw.headers] == codec.headers(event)
        assert where.offset > last.get(event.key, -1), "one job's events stay in order"
        last[event.key] = where.offset
