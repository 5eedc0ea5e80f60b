"""Create and delete the topics with explicit partition counts.

The topics, their keys and rules are one table, :mod:`schemas.topics`; why each is as
it is: docs/architecture.md, "Topics and keys".

The broker never auto-creates topics (``auto.create.topics.enable=false``), so
every service and test relies on :func:`ensure_topics`. Tests call it with
their own ``topic_prefix`` and remove their topics with :func:`delete_topics`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from schemas.errors import StackError
from schemas.topics import TOPICS
from services.settings import Settings
from services.transport import kafka_options

TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is created."""

    name: str
    partitions: int
    configs: dict[str, str]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """The topics of :data:`schemas.topics.TOPICS` with the settings' prefix, partitions
    and configs."""
    partitions = {"job": settings.job_partitions, "node": settings.node_partitions, "one": 1}
    specs = []
    for topic in TOPICS:
        configs = {
            "cleanup.policy": "compact" if topic.compacted else "delete",
            # Explicit, not the broker's default: the producer's max_request_size agrees.
            "max.message.bytes": str(settings.kafka_max_message_bytes),
        }
        if settings.replication_factor > 1:
            # Per topic as well as the broker default: a topic keeps it on any cluster.
            configs["min.insync.replicas"] = str(settings.min_insync_replicas)
        if topic.kept_forever:
            configs["retention.ms"] = "-1"
        if topic.latest_only:
            # Rolled and cleaned often: a start reads the whole topic for the newest
            # snapshot, so superseded ones must not pile up in a week-long segment.
            configs["segment.ms"] = "600000"
            configs["min.cleanable.dirty.ratio"] = "0.1"
        if topic.broker_time:
            configs["message.timestamp.type"] = "LogAppendTime"
        specs.append(TopicSpec(settings.topic(topic.suffix), partitions[topic.key], configs))
    return specs


@asynccontextmanager
async def admin_client(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client for the settings' bootstrap servers, closed on exit."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap,
        request_timeout_ms=15000,
        **kafka_options(settings),
    )
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def ensure_topics(settings: Settings, timeout: float = 30.0) -> dict[str, int]:
    """Create every missing topic; return ``{topic: partitions}`` once all have leaders.

    Idempotent: existing topics are kept. An existing topic with another partition
    count is an error, since keyed ordering depends on the count.

    Raises:
        StackError: the broker refused a topic, or the topics had no leaders in time.
    """
    specs = topic_specs(settings)
    async with admin_client(settings) as admin:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=spec.name,
                        num_partitions=spec.partitions,
                        replication_factor=settings.replication_factor,
                        topic_configs=spec.configs,
                    )
                    for spec in missing
                ]
            )
            refused = []
            for topic, code, *rest in response.topic_errors:
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    message = rest[0] if rest else ""
                    refused.append(f"{topic}: error {code} {message or ''}".strip())
            if refused:
                raise StackError(
                    f"Kafka at {settings.kafka_bootstrap} refused to create topics: "
                    + "; ".join(refused)
                )
        return await _wait_for_leaders(admin, specs, timeout, settings.min_insync_replicas)


async def _wait_for_leaders(
    admin: AIOKafkaAdminClient, specs: list[TopicSpec], timeout: float, min_isr: int = 1
) -> dict[str, int]:
    expected = {spec.name: spec.partitions for spec in specs}
    deadline = time.monotonic() + timeout
    pending: dict[str, str] = {}
    while True:
        described = await admin.describe_topics(list(expected))
        pending = {}
        counts = {}
        for topic in described:
            name = topic["topic"]
            partitions = topic["partitions"]
            counts[name] = len(partitions)
            if topic["error_code"] != 0:
                pending[name] = f"error {topic['error_code']}"
            elif len(partitions) != expected[name] and partitions:
                raise StackError(
                    f"topic {name} exists with {len(partitions)} partitions but gridledger "
                    f"expects {expected[name]}; delete the topic (or the local stack's home) "
                    "or set GRIDLEDGER_JOB_PARTITIONS / GRIDLEDGER_NODE_PARTITIONS to match"
                )
            elif not partitions or any(p["leader"] < 0 for p in partitions):
                pending[name] = "no leader yet"
            elif any(len(p["isr"]) < min_isr for p in partitions):
                # An acks=all append would be refused (NotEnoughReplicas) until then.
                pending[name] = f"fewer than {min_isr} replicas in sync yet"
        for name in expected.keys() - counts.keys():
            pending[name] = "not in metadata yet"
        if not pending:
            return counts
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    raise StackError(
        f"topics not ready after {timeout:.0f} s: "
        + ", ".join(f"{name} ({why})" for name, why in sorted(pending.items()))
    )


async def delete_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Delete the settings' topics that exist; return their names once they are gone."""
    names = {spec.name for spec in topic_specs(settings)}
    async with admin_client(settings) as admin:
        present = sorted(names & set(await admin.list_topics()))
        if not present:
            return []
        response = await admin.delete_topics(present)
        refused = [
            f"{topic}: error {code}"
            for topic, code, *_ in response.topic_error_codes
            if code not in (0, UNKNOWN_TOPIC_OR_PARTITION)
        ]
        if refused:
            raise StackError("Kafka refused to delete topics: " + "; ".join(refused))
        deadline = time.monotonic() + timeout
        while names & set(await admin.list_topics()):
            if time.monotonic() > deadline:
                raise StackError(f"topics still listed {timeout:.0f} s after deletion: {present}")
            await asyncio.sleep(0.2)
    return present


async def topic_configs(
    settings: Settings, keys: list[str], timeout: float = 15.0
) -> dict[str, dict[str, str]]:
    """``{topic: {key: value}}`` of the settings' topics as the broker reports them.

    On a multi-broker cluster the broker asked may not know a just-created topic
    yet (UNKNOWN_TOPIC_OR_PARTITION): asked again until ``timeout``.
    """
    names = [spec.name for spec in topic_specs(settings)]
    deadline = time.monotonic() + timeout
    async with admin_client(settings) as admin:
        while True:
            responses = await admin.describe_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, name, configs=dict.fromkeys(keys))
                    for name in names
                ]
            )
            configs: dict[str, dict[str, str]] = {}
            errors = []
            for response in responses:
                for error_code, error_message, _type, name, entries, *_ in response.resources:
                    if error_code != 0:
                        errors.append((error_code, name, error_message))
                    configs[name] = {entry[0]: entry[1] for entry in entries}
            unknown = all(code == UNKNOWN_TOPIC_OR_PARTITION for code, *_ in errors)
            if not errors or not unknown or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
    for error_code, name, error_message in errors:
        raise StackError(
            f"describe configs of {name} failed: error {error_code} {error_message or ''}"
        )
    return configs
