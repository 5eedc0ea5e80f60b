"""(c) of issue 21: a poison record on every topic a service reads.

Whoever can write to a topic (a compromised agent, a bug, a hostile producer)
must not be able to stop a service with one record. Every topic of the ledger
gets records that cannot be decoded, under a job's or a node's key that a
service is reading (the agents' ``node-commands`` partitions included): random
bytes, a real record cut in half under its real type headers, the codec's magic
with a fingerprint no schema has, and an empty value. After them every service
still runs, the victim's jobs succeed and are billed, and ``replay --verify``
agrees; the records a service parked are on ``dead-letter`` naming where they
came from.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from schemas import codec
from schemas.events import CancelRequested, JobSubmitted
from schemas.spec import JobSpec
from schemas.topics import NODE_KEYED_TOPICS, TOPIC_NAMES
from services.ledger import Ledger
from services.ledger.client import DLQ_CONSUMER, DLQ_SOURCE_TOPIC
from tests.adversarial.after import check_all
from tests.adversarial.stack import ATTACKER, NODES, Hostile, sh_job
from tests.processors.harness import submitted
from tests.system.conftest import BUSYBOX

pytestmark = pytest.mark.integration

POISONED = tuple(t for t in TOPIC_NAMES if t != "dead-letter")


def _a_real_record() -> tuple[bytes, list[tuple[str, bytes]]]:
    event = submitted(f"job-poison-{secrets.token_hex(4)}", image=BUSYBOX)
    return codec.encode(event), codec.headers(event)


def truncated() -> tuple[bytes, list[tuple[str, bytes]]]:
    value, headers = _a_real_record()
    return value[: len(value) // 2], headers


def unknown_fingerprint() -> tuple[bytes, list[tuple[str, bytes]]]:
    value, headers = _a_real_record()
    return value[:2] + secrets.token_bytes(8) + value[10:], headers


POISONS: dict[str, Callable[[], tuple[bytes, list[tuple[str, bytes]]]]] = {
    "random bytes": lambda: (secrets.token_bytes(64), []),
    "a record cut in half": truncated,
    "an unknown writer schema": unknown_fingerprint,
    "an empty value": lambda: (b"", []),
}


DEAD_LETTERED = (
    *((f"agent-{node}", "node-commands") for node in NODES),
    ("processors", "heartbeats"),
    ("processors", "job-events"),
    ("processors", "meter-ticks"),
    ("scheduler", "job-events"),
    ("scheduler", "node-events"),
    ("sink", "job-events"),
    ("sink", "log-chunks"),
    ("sink", "meter-ticks"),
    ("sink", "node-events"),
    ("sink", "prices"),
)
"""(consumer, topic) pairs that must have parked the poison they read: each service on
each topic it consumes live. ``job-state`` and ``accounting`` are read only by the
processors' snapshot reload and by replay (``replay --verify`` reads them all)."""


def keys_for(topic: str) -> list[bytes]:
    """Keys whose partitions the services read: every node's, and a few jobs'."""
    if topic in NODE_KEYED_TOPICS:
        return [n.encode() for n in NODES]
    return [f"job-poison-{secrets.token_hex(4)}".encode() for _ in range(3)]


async def inject(hostile: Hostile) -> int:
    sent = 0
    async with Ledger(hostile.settings, "attacker") as ledger:
        for topic in POISONED:
            for key in keys_for(topic):
                for make in POISONS.values():
                    value, headers = make()
                    await ledger.send_raw(hostile.settings.topic(topic), key, value, headers)
                    sent += 1
    return sent


async def dead_letters(hostile: Hostile) -> set[tuple[str, str]]:
    """(consumer, source topic suffix) of every record parked on ``dead-letter``."""
    found: set[tuple[str, str]] = set()
    prefix = hostile.settings.topic_prefix
    async with Ledger(hostile.settings, "reader") as ledger:
        async for raw in ledger.read_raw(hostile.settings.topic("dead-letter")):
            headers = {name: bytes(value).decode() for name, value in raw.headers or []}
            consumer = headers.get(DLQ_CONSUMER, "").split("/")[0]
            found.add((consumer, headers.get(DLQ_SOURCE_TOPIC, "").removeprefix(prefix)))
    return found


def test_poison_on_every_topic_stops_no_service(hostile: Hostile) -> None:
    sent = asyncio.run(inject(hostile))
    assert sent > len(POISONED) * len(POISONS)
    check_all(hostile)
    # What the services read and could not decode is parked where an operator looks.
    wanted = set(DEAD_LETTERED)
    hostile.wait_for(
        lambda: wanted <= asyncio.run(dead_letters(hostile)),
        60,
        f"dead letters {sorted(wanted)}",
    )


async def append_past_the_edge(hostile: Hostile, job_id: str) -> None:
    """A submission and a cancel with NUL and control characters, appended straight to the
    ledger (what a hostile producer, or a bug past the API's validation, could write)."""
    spec = JobSpec.model_validate(sh_job("sleep 30")).model_copy(update={"name": "nul\x00x\x1b[2J"})
    now = datetime.now(UTC)
    async with Ledger(hostile.settings, "attacker") as ledger:
        await ledger.append(
            JobSubmitted(
                job_id=job_id, occurred_at=now, producer="api/attacker", tenant=ATTACKER, spec=spec
            )
        )
        await ledger.append(
            CancelRequested(
                job_id=job_id,
                occurred_at=now,
                producer="api/attacker",
                requested_by=f"{ATTACKER}\x00",
                reason="stop\x00now\x07",
            )
        )


def test_a_nul_past_the_edge_stops_no_service_and_the_job_ends(hostile: Hostile) -> None:
    job_id = f"job-{secrets.token_hex(16)}"
    asyncio.run(append_past_the_edge(hostile, job_id))
    hostile.attacker_jobs.append(job_id)
    hostile.wait_settled(ATTACKER, [job_id])
    doc = hostile.job_of(ATTACKER, job_id)
    assert doc["status"] == "cancelled", doc
    check_all(hostile)
