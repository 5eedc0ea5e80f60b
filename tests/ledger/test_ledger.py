"""The ledger client against the real broker: append, history, dead-letter, follow."""

from __future__ import annotations

import pytest

from schemas.events import EVENT_TYPES, JobSucceeded, LeaderElected, NodeEvent
from services.ledger import Ledger, compose
from services.ledger.client import DLQ_CONSUMER, DLQ_ERROR, DLQ_SOURCE_OFFSET, DLQ_SOURCE_TOPIC
from tests.schemas.samples import T0, sample

pytestmark = pytest.mark.integration


async def test_every_event_type_is_appended_and_read_back_equal(topics):
    events = [sample(cls) for cls in EVENT_TYPES.values()]
    async with Ledger(topics, "test") as ledger:
        appended = await ledger.append_many(events)
        assert all(a.offset >= 0 for a in appended)
        read_back = []
        for suffix in ("job-events", "heartbeats", "log-chunks", "meter-ticks"):
            read_back += await compose.history(ledger, "job-1", suffix)
        read_back += await compose.history(ledger, sample(LeaderElected).key)  # a marker's own key
        read_back += [
            r.event async for r in compose.read_partitions(ledger, topics.topic("node-events"))
        ]
        read_back += [
            r.event async for r in compose.read_partitions(ledger, topics.topic("prices"))
        ]
    by_id = {e.event_id: e for e in read_back}
    for event in events:
        assert by_id.get(event.event_id) == event, f"{event.type} did not come back equal"
    node_events = [e for e in events if isinstance(e, NodeEvent)]
    assert {appended[events.index(e)].topic for e in node_events} == {topics.topic("node-events")}


async def test_one_jobs_history_is_ordered_and_excludes_other_jobs(topics):
    async with Ledger(topics, "test") as ledger:
        for i in range(5):
            await ledger.append(JobSucceeded(job_id="job-a", attempt=i, occurred_at=T0))
            await ledger.append(JobSucceeded(job_id=f"job-b{i}", occurred_at=T0))
        history = await compose.history(ledger, "job-a")
    assert [e.attempt for e in history] == [0, 1, 2, 3, 4]
    assert {e.job_id for e in history} == {"job-a"}


async def test_a_malformed_record_goes_to_the_dead_letter_topic_and_reading_continues(topics):
    async with Ledger(topics, "test") as ledger:
        before = await ledger.append(JobSucceeded(job_id="job-x", attempt=1, occurred_at=T0))
        bad = await ledger.send_raw(
            topics.topic("job-events"), b"job-x", b"\xc3\x01 not an event at all", []
        )
        after = await ledger.append(JobSucceeded(job_id="job-x", attempt=2, occurred_at=T0))
        assert before.partition == bad.partition == after.partition

        # The owning consumer decodes, dead-letters the bad record once and goes on.
        decoded = []
        async for record in compose.read_partitions(
            ledger, topics.topic("job-events"), [bad.partition], "test-consumer", dead_letter=True
        ):
            decoded.append(record.event.attempt)
        assert decoded == [1, 2]
        # Readers that only look skip it without parking it again.
        assert [e.attempt for e in await compose.history(ledger, "job-x")] == [1, 2]
        assert [e.attempt for e in await compose.history(ledger, "job-x")] == [1, 2]

        consumer = ledger.consumer(topics.topic("dead-letter"))
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=5000)
            dead = [r for rs in batch.values() for r in rs]
        finally:
            await consumer.stop()
    assert len(dead) == 1
    hdrs = dict(dead[0].headers)
    assert hdrs[DLQ_SOURCE_TOPIC].decode() == topics.topic("job-events")
    assert int(hdrs[DLQ_SOURCE_OFFSET]) == bad.offset
    assert hdrs[DLQ_CONSUMER] == b"test-consumer"
    assert "fingerprint" in hdrs[DLQ_ERROR].decode()
    assert dead[0].value == b"\xc3\x01 not an event at all"
