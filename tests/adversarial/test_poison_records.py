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

import pytest

from schemas import codec
from services.ledger import Ledger
from services.ledger.client import DLQ_CONSUMER, DLQ_SOURCE_TOPIC
from services.settings import TOPIC_NAMES
from tests.adversarial.after import check_all
from tests.adversarial.stack import NODES, Hostile
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
)
"""(consumer, topic) pairs that must have parked the poison they read: each service on
each topic it consumes live. ``job-state`` and ``accounting`` are read only by the
processors' snapshot reload and by replay (``replay --verify`` reads them all)."""


def keys_for(topic: str) -> list[bytes]:
    """Keys whose partitions the services read: every node's, and a few jobs'."""
    if topic in ("node-events", "node-commands"):
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
