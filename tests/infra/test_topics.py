"""ensure_topics/delete_topics against the real broker: partitions, compaction, idempotence."""

from __future__ import annotations

import pytest

from infra import kafka
from schemas.topics import COMPACTED_TOPICS, TOPIC_NAMES
from services.ledger.topics import (
    admin_client,
    delete_topics,
    ensure_topics,
    topic_configs,
    topic_specs,
)

pytestmark = pytest.mark.integration


async def test_readiness_is_a_metadata_round_trip(settings):
    cluster = await kafka.wait_ready(settings, timeout=10)
    assert [broker["node_id"] for broker in cluster["brokers"]] == [1]


async def test_created_topics_are_listed_with_their_partitions_and_cleanup_policy(topics):
    expected = {spec.name: spec.partitions for spec in topic_specs(topics)}
    async with admin_client(topics) as admin:
        described = await admin.describe_topics(list(expected))
    assert {t["topic"]: len(t["partitions"]) for t in described} == expected
    assert all(p["leader"] == 1 for t in described for p in t["partitions"])

    configs = await topic_configs(topics, ["cleanup.policy"])
    for name in TOPIC_NAMES:
        policy = "compact" if name in COMPACTED_TOPICS else "delete"
        assert configs[topics.topic(name)]["cleanup.policy"] == policy


async def test_heartbeats_and_job_events_are_stamped_by_the_broker(topics):
    # Silence and liveness are timed by when the platform heard a record, not by the agent.
    configs = await topic_configs(topics, ["message.timestamp.type"])
    stamped = {
        name
        for name in TOPIC_NAMES
        if configs[topics.topic(name)]["message.timestamp.type"] == "LogAppendTime"
    }
    assert stamped == {"heartbeats", "job-events", "node-events"}


async def test_ensure_topics_is_idempotent(topics):
    first = await ensure_topics(topics)
    assert await ensure_topics(topics) == first


async def test_delete_topics_removes_only_the_prefixes_topics(topics):
    other = topics.model_copy(update={"topic_prefix": topics.topic_prefix.replace("t-", "u-")})
    await ensure_topics(other)
    try:
        assert sorted(await delete_topics(topics)) == sorted(s.name for s in topic_specs(topics))
        async with admin_client(topics) as admin:
            listed = set(await admin.list_topics())
        assert not listed & {s.name for s in topic_specs(topics)}
        assert {s.name for s in topic_specs(other)} <= listed
        assert await delete_topics(topics) == []
    finally:
        await delete_topics(other)
