"""The ledger port's contract, held by the Kafka ledger (real broker) and the FakeLedger alike.

Every test runs twice: on ``services.ledger.Ledger`` against the local broker
(fresh topics per test) and on ``tests.fakes.ledger.FakeLedger``. A test that
uses the fake can then trust it behaves as the ledger does in what these cover:
where a value lands, its order, what reads return, dead-lettering, the broker's
append time, and the error for a topic that does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from projections.job_state import project
from schemas.errors import LedgerError
from schemas.events import (
    EVENT_TYPES,
    AttemptScheduled,
    JobQueued,
    JobSucceeded,
    LeaderElected,
    LogChunk,
    NodeEvent,
)
from schemas.views import JobView
from services.ledger import Ledger, LedgerPort, TopicPartition, compose, partition_for
from services.ledger.client import DLQ_CONSUMER, DLQ_REASON, DLQ_SOURCE_OFFSET, DLQ_SOURCE_TOPIC
from services.ledger.errors import LedgerRefusedError
from services.ledger.topics import delete_topics, ensure_topics
from services.ops.metrics import REGISTRY
from services.settings import Settings
from tests.conftest import require_stack
from tests.fakes.ledger import FakeLedger
from tests.schemas.samples import T0, sample
from tests.waiting import eventually


@pytest_asyncio.fixture(
    params=[pytest.param("kafka", marks=pytest.mark.integration), pytest.param("fake")]
)
async def ledger(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[LedgerPort]:
    """A started ledger of each kind, on topics no other test sees (created and deleted
    on the broker as the ``topics`` fixture does)."""
    isolated = settings.model_copy(update={"topic_prefix": f"t-{uuid.uuid4().hex[:8]}."})
    if request.param == "fake":
        async with FakeLedger(isolated) as fake:
            yield fake
        return
    require_stack(settings)
    await ensure_topics(isolated)
    try:
        # A missing topic's metadata is waited for up to the request timeout: keep it short.
        async with Ledger(isolated, "contract", request_timeout_s=10) as real:
            yield real
    finally:
        await delete_topics(isolated)


async def every(ledger: LedgerPort, suffix: str) -> list[Any]:
    """Every decodable value of a topic (by suffix), partition by partition."""
    return [r async for r in compose.read_partitions(ledger, ledger.settings.topic(suffix))]


def queued(job_id: str, attempt: int, **fields: Any) -> JobQueued:
    return JobQueued(
        job_id=job_id,
        attempt=attempt,
        occurred_at=T0,
        queue_deadline=T0 + timedelta(seconds=60),
        **fields,
    )


async def test_each_value_lands_on_its_keys_partition_in_the_order_given(ledger):
    events = [queued(f"job-{i % 5}", i // 5) for i in range(40)]
    appended = await ledger.append_many(events)
    topic = ledger.settings.topic("job-events")
    count = await ledger.partitions(topic)
    assert len(appended) == len(events)
    last: dict[int, int] = {}
    for event, where in zip(events, appended, strict=True):
        assert (where.topic, where.partition) == (topic, partition_for(event.key, count))
        assert where.offset > last.get(where.partition, -1), "offsets grow in the order given"
        last[where.partition] = where.offset
    for job in ("job-0", "job-3"):
        assert await compose.history(ledger, job) == [e for e in events if e.job_id == job]


async def test_every_event_type_goes_to_its_own_topic_and_reads_back_equal(ledger):
    events = [sample(cls) for cls in EVENT_TYPES.values()]
    appended = await ledger.append_many(events)
    assert [a.topic for a in appended] == [ledger.topic_of(e) for e in events]
    read_back = []
    for suffix in ("job-events", "heartbeats", "log-chunks", "meter-ticks"):
        read_back += await compose.history(ledger, "job-1", suffix)
    read_back += await compose.history(ledger, sample(LeaderElected).key)  # a marker's own key
    read_back += [r.event for r in await every(ledger, "node-events")]
    read_back += [r.event for r in await every(ledger, "prices")]
    by_id = {e.event_id: e for e in read_back}
    for event in events:
        assert by_id.get(event.event_id) == event, f"{event.type} did not come back equal"
    nodes = [a for a, e in zip(appended, events, strict=True) if isinstance(e, NodeEvent)]
    assert {a.topic for a in nodes} == {ledger.settings.topic("node-events")}


async def test_appending_nothing_appends_nothing(ledger):
    assert await ledger.append_many([]) == []
    assert await ledger.put_many([]) == []
    assert await every(ledger, "job-events") == []


async def test_put_many_routes_by_the_topic_and_key_it_is_given(ledger):
    """A node command goes to the node's key; a view to its compacted topic; None deletes."""
    scheduled = sample(AttemptScheduled).model_copy(update={"node_id": "node-7"})
    view = project([queued("job-v", 0)])
    commands, state = ledger.settings.topic("node-commands"), ledger.settings.topic("job-state")
    appended = await ledger.put_many(
        [(commands, "node-7", scheduled), (state, "job-v", view), (state, "job-v", None)]
    )
    assert [a.topic for a in appended] == [commands, state, state]
    assert appended[0].partition == partition_for("node-7", await ledger.partitions(commands))
    assert appended[1].partition == appended[2].partition
    assert appended[2].offset == appended[1].offset + 1
    (command,) = await every(ledger, "node-commands")
    assert (command.key, command.value) == ("node-7", scheduled)
    (read,) = await every(ledger, "job-state")  # the tombstone is not a value
    assert isinstance(read.value, JobView) and read.value == view
    published = await ledger.publish("job-state", "job-w", view)
    assert published.topic == state


async def test_read_latest_gives_each_keys_last_view_and_forgets_a_deleted_key(ledger):
    state = ledger.settings.topic("job-state")
    first, second = project([queued("job-a", 0)]), project([queued("job-a", 1)])
    other = project([queued("job-b", 0)])
    await ledger.put_many(
        [
            (state, "job-a", first),
            (state, "job-b", other),
            (state, "job-a", second),
            (state, "job-c", other),
            (state, "job-c", None),
        ]
    )
    latest = await compose.read_latest(ledger, state)
    assert {key: record.value for key, record in latest.items()} == {
        "job-a": second,
        "job-b": other,
    }


async def test_a_topic_that_does_not_exist_is_an_error_that_says_how_to_create_it(ledger):
    missing = f"{ledger.settings.topic_prefix}no-such-topic"
    with pytest.raises(LedgerError, match="does not exist: run `gridledger dev up`"):
        await ledger.append(queued("job-x", 0), topic=missing)
    assert await compose.history(ledger, "job-x") == [], "nothing of a failed append is kept"


async def test_an_undecodable_value_is_parked_once_by_its_owner_and_skipped_by_readers(ledger):
    topic = ledger.settings.topic("job-events")
    before = await ledger.append(JobSucceeded(job_id="job-x", attempt=1, occurred_at=T0))
    bad = await ledger.send_raw(topic, b"job-x", b"\xc3\x01 not an event at all", [])
    after = await ledger.append(JobSucceeded(job_id="job-x", attempt=2, occurred_at=T0))
    assert before.partition == bad.partition == after.partition

    owned = compose.read_partitions(
        ledger, topic, [bad.partition], "contract-owner", dead_letter=True
    )
    assert [r.event.attempt async for r in owned] == [1, 2]
    # Readers that only look skip it without parking it again.
    assert [e.attempt for e in await compose.history(ledger, "job-x")] == [1, 2]

    (parked,) = await raw_values(ledger, ledger.settings.topic("dead-letter"))
    headers = dict(parked.headers)
    assert parked.value == b"\xc3\x01 not an event at all" and parked.key == b"job-x"
    assert headers[DLQ_SOURCE_TOPIC].decode() == topic
    assert int(headers[DLQ_SOURCE_OFFSET]) == bad.offset
    assert headers[DLQ_CONSUMER] == b"contract-owner"
    assert headers[DLQ_REASON] == b"undecodable"
    labels = {"consumer": "contract-owner", "reason": "undecodable"}
    assert REGISTRY.get_sample_value("gridledger_dead_letters_total", labels)


async def test_follow_skips_a_poison_record_counts_it_and_goes_on(ledger):
    """The API's log follow is a reader: it skips what does not decode (the sink parks it)."""
    seen: list[int] = []
    labels = {"consumer": "contract-follower"}
    before = REGISTRY.get_sample_value("gridledger_records_skipped_total", labels) or 0

    async def follow() -> None:
        async for record in compose.follow(
            ledger, "job-events", key="job-p", consumer_name=labels["consumer"]
        ):
            seen.append(record.event.attempt)
            if len(seen) == 2:
                return

    task = asyncio.create_task(follow())
    await ledger.append(JobSucceeded(job_id="job-p", attempt=1, occurred_at=T0))
    await ledger.send_raw(ledger.settings.topic("job-events"), b"job-p", b"\xc3\x01 bad", [])
    await ledger.append(JobSucceeded(job_id="job-p", attempt=2, occurred_at=T0))
    await asyncio.wait_for(task, 30)
    assert seen == [1, 2]
    assert REGISTRY.get_sample_value("gridledger_records_skipped_total", labels) == before + 1
    assert await raw_values(ledger, ledger.settings.topic("dead-letter")) == []


async def test_a_record_over_the_limit_is_refused_and_never_retried(ledger):
    limit = ledger.settings.kafka_max_message_bytes
    with pytest.raises(LedgerRefusedError, match="larger than"):
        await ledger.send_raw(ledger.settings.topic("job-events"), b"job-big", b"x" * limit, [])


async def test_broker_timed_topics_say_when_the_ledger_heard_a_value(ledger):
    """job-events carry the broker's append time (the watchdog's clock); log-chunks the
    producer's, which must never pass for when the platform heard it."""
    start = datetime.now(UTC) - timedelta(seconds=5)
    await ledger.append(queued("job-t", 0))
    await ledger.append(sample(LogChunk).model_copy(update={"job_id": "job-t"}))
    (timed,) = await every(ledger, "job-events")
    (chunk,) = await every(ledger, "log-chunks")
    assert timed.appended_at is not None
    assert start <= timed.appended_at <= datetime.now(UTC) + timedelta(seconds=5)
    assert chunk.appended_at is None


async def test_follow_sees_later_values_of_its_key_only(ledger):
    seen: list[int] = []

    async def follow() -> None:
        async for record in compose.follow(ledger, "job-events", key="job-f"):
            seen.append(record.event.attempt)
            if len(seen) == 3:
                return

    task = asyncio.create_task(follow())
    for i in range(3):
        await ledger.append(JobSucceeded(job_id="job-f", attempt=i, occurred_at=T0))
        await ledger.append(JobSucceeded(job_id="job-other", attempt=i, occurred_at=T0))
    await asyncio.wait_for(task, 30)
    assert seen == [0, 1, 2]


async def test_append_until_acked_appends_like_append_many(ledger):
    events = [queued("job-u", i) for i in range(3)]
    appended = await compose.append_until_acked(ledger, events)
    assert [a.offset for a in appended] == sorted(a.offset for a in appended)
    assert await compose.history(ledger, "job-u") == events


# ----------------------------------------------------------------------- helpers


async def raw_values(ledger: LedgerPort, topic: str) -> list[Any]:
    """Every record of a topic as stored, undecodable ones included."""
    return [r async for r in ledger.read_raw(topic)]


# ----------------------------------------------------------------------- subscriptions


async def batches_until(subscription: Any, done: Any, timeout: float = 30) -> list[Any]:
    """The batches a subscription hands over until ``done(batches)`` holds."""
    seen: list[Any] = []
    async with asyncio.timeout(timeout):
        async for batch in subscription:
            seen.append(batch)
            if done(seen):
                return seen
    raise AssertionError("the subscription ended")


async def test_a_subscription_catches_up_topic_by_topic_then_hands_over_live_batches(ledger):
    nodes, jobs = ledger.settings.topic("node-events"), ledger.settings.topic("job-events")
    fleet = [sample(cls) for cls in EVENT_TYPES.values() if issubclass(cls, NodeEvent)]
    await ledger.append_many([queued(f"job-{i}", 0) for i in range(6)])
    await ledger.append_many(fleet)
    async with ledger.subscribe([nodes, jobs], name="contract-subscriber") as subscription:
        caught_up = await batches_until(subscription, lambda seen: seen[-1].live)
        backlog = [r for b in caught_up for r in b.records]
        assert all(not b.live for b in caught_up[:-1]) and not caught_up[-1].records
        assert [r.topic for r in backlog] == [nodes] * len(fleet) + [jobs] * 6, "nodes first"
        later = queued("job-later", 0)
        await ledger.append(later)
        live = await batches_until(subscription, lambda seen: seen[-1].records)
        assert all(b.live for b in live)
        assert [r.value for r in live[-1].records] == [later]
        where = live[-1].records[0]
        assert live[-1].offsets[TopicPartition(jobs, where.partition)] == where.offset + 1


async def test_a_groups_subscription_commits_a_batch_once_it_is_handled(ledger):
    topic = ledger.settings.topic("node-commands")
    command = sample(AttemptScheduled).model_copy(update={"node_id": "node-g"})
    other = command.model_copy(update={"node_id": "node-h"})
    await ledger.put_many([(topic, "node-g", command)] * 2 + [(topic, "node-h", other)])
    group = f"{ledger.settings.topic_prefix}contract-group"

    def subscribe() -> Any:
        return ledger.subscribe([topic], name="contract-agent", group=group, key="node-g")

    def values(batches: list[Any]) -> list[int]:
        return [r.value.attempt for b in batches for r in b.records]

    async with subscribe() as subscription:
        seen = await batches_until(subscription, lambda seen: values(seen))
        assert {r.key for b in seen for r in b.records} == {"node-g"}, "only its key's values"
        # Not asked for the next batch: the one in hand is not committed.
    async with subscribe() as subscription:
        again = await batches_until(subscription, lambda seen: seen[-1].live)
    assert values(again) == values(seen) == [command.attempt] * 2
    later = command.model_copy(update={"attempt": 7})
    await ledger.put_many([(topic, "node-g", later)])
    async with subscribe() as subscription:
        last = await batches_until(subscription, lambda seen: values(seen))
    assert values(last) == [7], "what was handed over and handled before is committed"


async def test_a_subscription_from_positions_starts_there_and_commits_nothing(ledger):
    topic = ledger.settings.topic("job-events")
    appended = await ledger.append_many([queued("job-s", i) for i in range(4)])
    tp = (topic, appended[0].partition)
    async with ledger.subscribe([topic], name="contract-sink", positions={tp: 2}) as subscription:
        seen = await batches_until(subscription, lambda seen: seen[-1].live)
    assert [r.value.attempt for b in seen for r in b.records] == [2, 3]
    assert seen[0].offsets == {TopicPartition(*tp): appended[-1].offset + 1}


async def test_a_subscription_parks_what_does_not_decode_or_apply_and_goes_on(ledger):
    topic = ledger.settings.topic("job-events")
    await ledger.append(JobSucceeded(job_id="job-q", attempt=1, occurred_at=T0))
    await ledger.send_raw(topic, b"job-q", b"\xc3\x01 not an event", [])
    await ledger.append(JobSucceeded(job_id="job-q", attempt=2, occurred_at=T0))
    applied: list[int] = []

    def apply(record: Any) -> None:
        if record.value.attempt == 1:
            raise ValueError("cannot apply attempt 1")
        applied.append(record.value.attempt)

    async with ledger.subscribe([topic], name="contract-applier") as subscription:
        seen = await batches_until(subscription, lambda seen: seen[-1].live)
        for batch in seen:
            for record in batch.records:
                await batch.apply(record, lambda record=record: apply(record))
    assert applied == [2]
    parked = await raw_values(ledger, ledger.settings.topic("dead-letter"))
    assert [dict(p.headers)[DLQ_REASON] for p in parked] == [b"undecodable", b"unapplicable"]
    assert {dict(p.headers)[DLQ_CONSUMER] for p in parked} == {b"contract-applier"}


async def test_a_batch_read_ahead_parks_nothing_until_it_is_handed_over(ledger):
    """The sink's read-ahead: a batch read while the handler writes the previous one, then
    dropped (the sink stopped), has parked nothing; handed over, its poison is parked."""
    topic = ledger.settings.topic("job-events")
    good = await ledger.append(JobSucceeded(job_id="job-a", attempt=1, occurred_at=T0))
    await ledger.send_raw(topic, b"job-a", b"\xc3\x01 not an event", [])
    tp = TopicPartition(topic, good.partition)
    dead_letter = ledger.settings.topic("dead-letter")

    def subscribe() -> Any:
        start = {(topic, good.partition): good.offset}
        return ledger.subscribe(
            [topic], name="contract-ahead", positions=start, ahead=True, max_records=1
        )

    async with subscribe() as subscription:
        (first,) = await batches_until(subscription, lambda seen: seen)
        assert [r.value.attempt for r in first.records] == [1]

        async def read_ahead() -> bool:
            return await subscription.consumer.position(tp) >= good.offset + 2

        await eventually(read_ahead, "the next batch to be read ahead")
        assert await raw_values(ledger, dead_letter) == []
    async with subscribe() as subscription:
        await batches_until(subscription, lambda seen: len(seen) == 2)
        (parked,) = await raw_values(ledger, dead_letter)
    assert dict(parked.headers)[DLQ_REASON] == b"undecodable"
