"""An append the broker refuses for good is an error naming the cause and the fix, not an outage.

Against the real broker: a topic of the test's own with a small ``max.message.bytes``
refuses a larger record. Before the table (services/ledger/errors.py) every Kafka
error counted as an outage, so a service retried such an append forever.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import NewTopic
from aiokafka.errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceNumber,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from schemas.events import LogChunk
from services.ledger import (
    BrokerUnavailableError,
    Ledger,
    LedgerRefusedError,
    broker_unavailable,
    compose,
)
from services.ledger.errors import FATAL, append_failed, refusal_of
from services.ledger.topics import admin_client
from services.settings import Settings
from tests.schemas.samples import sample

LIMIT = 2048
"""max.message.bytes of the test's own topic."""


def _chunk(size: int, seq: int) -> LogChunk:
    return sample(LogChunk).model_copy(
        update={"event_id": f"evt-chunk-{seq}", "seq": seq, "data": "x" * size}
    )


@pytest.mark.integration
async def test_a_record_over_the_topics_max_message_bytes_is_refused_with_the_fix(
    topics: Settings,
) -> None:
    # A prefix of the test's own whose log-chunks topic takes at most LIMIT bytes a record.
    small = topics.model_copy(update={"topic_prefix": f"{topics.topic_prefix}small."})
    name = small.topic("log-chunks")
    async with admin_client(small) as admin:
        response = await admin.create_topics(
            [
                NewTopic(
                    name=name,
                    num_partitions=1,
                    replication_factor=small.replication_factor,
                    topic_configs={"max.message.bytes": str(LIMIT)},
                )
            ]
        )
        assert [code for _, code, *_ in response.topic_errors] == [0]
    try:
        async with Ledger(small, "test") as ledger:
            first = await ledger.append(_chunk(100, 0))  # the topic works
            # The retrying append raises instead of riding out an "outage" forever: waiting
            # cannot make the record fit. (The guard only turns a hang into a failure.)
            async with asyncio.timeout(120):
                with pytest.raises(LedgerRefusedError) as refused:
                    await compose.append_until_acked(ledger, [_chunk(20 * LIMIT, 1)])
            after = await ledger.append(_chunk(100, 2))  # the ledger is still usable
            read_back = await compose.history(ledger, "job-1", "log-chunks")
    finally:
        async with admin_client(small) as admin:
            await admin.delete_topics([name])
    message = str(refused.value)
    assert "MessageSizeTooLargeError" in message and "max.message.bytes" in message
    assert "waiting will not help" in message and "Fix: raise max.message.bytes" in message
    assert not broker_unavailable(refused.value)
    assert ledger.outage.tries == 0  # never logged as an outage
    assert (first.offset, after.offset) == (0, 1)  # the refused record was not written
    assert [e.event_id for e in read_back] == ["evt-chunk-0", "evt-chunk-2"]


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (KafkaConnectionError("Connection at 127.0.0.1:9092 closed"), True),
        (KafkaTimeoutError(), True),
        (NotLeaderForPartitionError(), True),
        (NotEnoughReplicasError(), True),
        (UnknownTopicOrPartitionError(), True),  # a restarted broker loading its logs
        (OutOfOrderSequenceNumber(), True),  # an idempotent session the restart reset
        (MessageSizeTooLargeError(), False),
        (RecordTooLargeError("The message is 5000000 bytes when serialized"), False),
        (TopicAuthorizationFailedError(), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_kafka_errors_are_an_outage_unless_the_table_says_otherwise(
    error: Exception, outage: bool
) -> None:
    assert broker_unavailable(error) is outage
    raised = append_failed(error, "append to gridledger.job-events")
    assert isinstance(raised, BrokerUnavailableError if outage else LedgerRefusedError)
    assert broker_unavailable(raised) is outage
    assert "append to gridledger.job-events" in str(raised) and type(error).__name__ in str(raised)
    if not outage:
        row = refusal_of(error)
        assert row is not None and f"Fix: {row.fix}" in str(raised) and row.cause in str(raised)


def test_every_refusal_names_a_cause_and_a_fix_and_no_error_is_listed_twice() -> None:
    listed = [e for row in FATAL for e in row.errors]
    assert len(listed) == len(set(listed))
    for row in FATAL:
        assert row.cause and row.fix and row.errors


def test_a_commit_refused_after_a_rebalance_is_not_an_outage() -> None:
    assert not broker_unavailable(CommitFailedError("the group has already rebalanced"))
