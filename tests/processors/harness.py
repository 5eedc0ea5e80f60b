"""Shared helpers of the processor and scheduler integration tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.events import TERMINAL_EVENTS, Event, FailureClassified, JobSubmitted
from schemas.spec import JobSpec
from schemas.types import Evidence
from services.clock import utcnow
from services.ledger import Ledger, LedgerPort, compose
from services.ledger.client import partition_for
from services.processors import Processors, build_processors
from services.processors.app import PROCESSORS, app_id_for, topics_for
from services.scheduler import Scheduler, build_scheduler
from services.settings import Settings

FAST = {
    "watchdog_silence_s": 2.0,
    "watchdog_lost_after_s": 3.0,
    "watchdog_finishing_timeout_s": 20.0,
    "watchdog_tick_s": 0.2,
    "scheduler_node_timeout_s": 5.0,
    "scheduler_dispatch_timeout_s": 20.0,
    "scheduler_tick_s": 0.1,
    "processors_session_timeout_s": 6.0,
    "processors_heartbeat_interval_s": 1.0,
    "processors_keep_settled": 1,
}
"""Short thresholds so the integration tests finish in seconds; and a worker that keeps
one settled job only, so every test also runs the drop-and-reload path of settled jobs."""


def fast(topics: Settings) -> Settings:
    """The test's settings with short deadlines and its own faust app id."""
    return topics.model_copy(
        update={**FAST, "processors_app_id": f"test-processors-{uuid.uuid4().hex[:6]}"}
    )


@asynccontextmanager
async def services(
    settings: Settings, processors: bool = True, scheduler: bool = True
) -> AsyncIterator[tuple[Scheduler | None, Processors | None]]:
    """The scheduler and every processor, in this process, for the test's topics."""
    sched = build_scheduler(settings) if scheduler else None
    procs = build_processors(settings) if processors else None
    try:
        if sched is not None:
            await sched.start()
        if procs is not None:
            await procs.start()
        if sched is not None:
            await sched.wait_ready()
        yield sched, procs
    finally:
        if procs is not None:
            await procs.stop()
        if sched is not None:
            await sched.stop()


def breaks_the_retry_decider(job: JobSubmitted) -> FailureClassified:
    """A record that decodes but that a processor cannot apply: a retryable failure at the
    last representable second, whose retry time (the failure's time plus the backoff) is
    past what a datetime holds, so the retry decider raises OverflowError."""
    return FailureClassified(
        job_id=job.job_id,
        attempt=1,
        occurred_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        producer="classifier/test",
        failure_class="node_lost",
        attribution="platform",
        retryable=True,
        summary="the node was lost",
        advice="nothing to do: it is retried",
        evidence=Evidence(rule_id="test"),
        rule_id="test",
        classifier_version="test",
    )


def submitted(job_id: str | None = None, **spec: Any) -> JobSubmitted:
    fields: dict[str, Any] = {"image": "gridledger/busybox:latest", "command": ["true"]}
    fields.update(spec)
    return JobSubmitted(
        job_id=job_id or f"job-{uuid.uuid4().hex[:8]}",
        occurred_at=utcnow(),
        producer="api/test",
        tenant="tenant-a",
        spec=JobSpec(**fields),
    )


async def wait_history(
    ledger: LedgerPort,
    job_id: str,
    done: Callable[[list[Event]], bool],
    timeout: float = 30.0,
    what: str = "condition",
) -> list[Event]:
    """Poll the job's history until ``done(history)``."""
    deadline = time.monotonic() + timeout
    while True:
        history = await compose.history(ledger, job_id)
        if done(history):
            return history
        if time.monotonic() > deadline:
            types = [e.type for e in history]
            raise AssertionError(f"timed out waiting for {what} of {job_id}; history: {types}")
        await asyncio.sleep(0.2)


def terminals(history: list[Event]) -> list[Event]:
    """Terminal events, one per event id."""
    seen: dict[str, Event] = {}
    for e in history:
        if isinstance(e, TERMINAL_EVENTS):
            seen.setdefault(e.event_id, e)
    return list(seen.values())


async def wait_terminal(ledger: Ledger, job_id: str, timeout: float = 30.0) -> list[Event]:
    return await wait_history(ledger, job_id, lambda h: bool(terminals(h)), timeout, "terminal")


async def latest(ledger: Ledger, suffix: str, key: str) -> Any:
    """The latest value published for ``key`` on a compacted topic, or None."""
    topic = ledger.settings.topic(suffix)
    partition = partition_for(key, await ledger.partitions(topic))
    found = None
    async for record in compose.read_partitions(ledger, topic, [partition], "test"):
        if record.key == key:
            found = record.value
    return found


async def wait_latest(
    ledger: Ledger, suffix: str, key: str, done: Callable[[Any], bool], timeout: float = 20.0
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await latest(ledger, suffix, key)
        if value is not None and done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {suffix} of {key}; latest: {value!r}")
        await asyncio.sleep(0.2)


async def wait_processed(settings: Settings, ledger: Ledger, timeout: float = 60.0) -> None:
    """Wait until the processors' group has committed everything on the topics it reads.

    A worker appends what a batch implies before it commits the batch's offsets, so
    once the committed offsets reach the topics' ends (and the worker's own appends
    are read too) nothing more is on its way: the way to show that something does
    *not* happen (a late duplicate) without sleeping a fixed time.
    """
    group = app_id_for(settings, PROCESSORS)
    tps = [
        TopicPartition(topic, p)
        for topic in (settings.topic(s) for s in topics_for(PROCESSORS))
        for p in range(await ledger.partitions(topic))
    ]
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    probe = ledger.consumer()
    await probe.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            ends = await probe.end_offsets(tps)
            found = await admin.list_consumer_group_offsets(group, partitions=tps)
            # -1 or absent: nothing committed there (an empty partition needs nothing).
            committed = {tp: max(0, found[tp].offset) if tp in found else 0 for tp in tps}
            behind = {
                f"{tp.topic}/{tp.partition}": (committed[tp], end)
                for tp, end in ends.items()
                if end > committed[tp]
            }
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"processors group {group} still behind: {behind}")
            await asyncio.sleep(0.2)
    finally:
        await probe.stop()
        await admin.close()
