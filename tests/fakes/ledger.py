"""An in-memory ledger: the port of services/ledger without a broker.

It keeps what the broker would: per (topic, partition) an append-only list of
encoded records (key, value bytes, headers, offset, append time), partitioned
like the real ledger (:func:`services.ledger.client.partition_for`) with the
partition counts of :func:`services.ledger.topics.topic_specs`. Values go through the one
codec both ways, so a fake run decodes exactly what a real one would.
``tests/ledger/test_contract.py`` runs the same tests on it and on the real
ledger against the broker.

Tests drive a worker with it directly: :meth:`FakeLedger.take` hands out unread
records (as a consumer would, round robin over partitions, in order within
one), and :meth:`FakeLedger.values` lists what a key holds on a topic.
:attr:`FakeLedger.down` makes every append fail as an unreachable broker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

from schemas import codec
from schemas.errors import EventDecodeError, LedgerError
from schemas.topics import BROKER_TIMED
from services.backoff import outage_of
from services.ledger import TopicPartition
from services.ledger.client import (
    LOG_APPEND_TIME,
    LedgerOperations,
    partition_for,
    record_bytes,
)
from services.ledger.errors import BrokerUnavailableError, record_too_large
from services.ledger.port import Appended, Encoded
from services.ledger.topics import topic_specs
from services.settings import Settings

log = logging.getLogger(__name__)

CREATE_TIME = 0
"""Kafka's timestamp type of a record stamped by its producer."""


@dataclass(frozen=True)
class FakeRecord:
    """A stored record, shaped like the consumer's (what Step and decode read of it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int
    """Milliseconds since the epoch, as aiokafka's ConsumerRecord has it."""
    timestamp_type: int


class FakeConsumer:
    """The consumer a subscription reads with (:class:`services.ledger.subscription.Consumer`),
    over a FakeLedger's logs. A fresh position is the group's commit, else 0; a group's
    member (``subscribe``) is its group's only one and gets every partition."""

    def __init__(self, ledger: FakeLedger, group_id: str | None) -> None:
        self.ledger = ledger
        self.group_id = group_id
        self._positions: dict[TopicPartition, int] = {}
        self._fetched: dict[TopicPartition, int] = {}
        self._member: tuple[Sequence[str], Any] | None = None

    def subscribe(self, topics: Sequence[str], listener: Any) -> None:
        self._member = (topics, listener)

    async def start(self) -> None:
        if self.ledger.down:
            raise BrokerUnavailableError("the fake broker is down (FakeLedger.down)")
        if self._member is not None:
            topics, listener = self._member
            self.assign(
                [
                    TopicPartition(t, p)
                    for t in topics
                    for p in range(await self.ledger.partitions(t))
                ]
            )
            await listener.on_partitions_assigned(sorted(self._positions))

    async def stop(self) -> None:
        self._positions.clear()

    def assign(self, partitions: Iterable[Any]) -> None:
        committed = self.ledger.committed.get(self.group_id or "", {})
        self._positions = {
            TopicPartition(*tp): self._positions.get(tp, committed.get(tp, 0)) for tp in partitions
        }

    def assignment(self) -> set[Any]:
        return set(self._positions)

    def _log(self, tp: Any) -> list[FakeRecord]:
        return self.ledger.logs.get((tp.topic, tp.partition), [])

    def seek(self, partition: Any, offset: int) -> None:
        self._positions[partition] = offset

    async def end_offsets(self, partitions: Iterable[Any]) -> dict[Any, int]:
        return {tp: len(self._log(tp)) for tp in partitions}

    async def position(self, partition: Any) -> int:
        return self._positions[partition]

    def highwater(self, partition: Any) -> int | None:
        return self._fetched.get(partition)

    async def commit(self, offsets: dict[Any, int]) -> None:
        if self.ledger.down:
            raise BrokerUnavailableError("the fake broker is down (FakeLedger.down)")
        self.ledger.committed.setdefault(self.group_id or "", {}).update(offsets)

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Any, list[Any]]:
        # Always suspend once, as a fetch from a broker does: a loop that polls with
        # timeout_ms=0 must still let the rest of the event loop run.
        await asyncio.sleep(0)
        wanted = list(partitions or self._positions)
        most = max_records if max_records is not None else 500
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while True:
            if self.ledger.down:
                raise BrokerUnavailableError("the fake broker is down (FakeLedger.down)")
            appended = self.ledger.appended
            out: dict[Any, list[Any]] = {}
            for tp in wanted:
                stored = self._log(tp)
                self._fetched[tp] = len(stored)
                at = self._positions[tp]
                taken = stored[at : at + most - sum(len(r) for r in out.values())]
                if taken:
                    out[tp] = taken
                    self._positions[tp] = at + len(taken)
            left = deadline - asyncio.get_running_loop().time()
            if out or left <= 0:
                return out
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(appended.wait(), left)


class FakeLease:
    """:class:`services.ledger.port.Lease` in memory: of a group's started members, the
    first one started (and not stopped since) holds it, as a coordinator's sticky
    assignment would; stopping the holder hands it to the next at once."""

    def __init__(self, members: list[FakeLease]) -> None:
        self.held = False
        self.changed = asyncio.Event()
        self._members = members

    async def start(self) -> None:
        self._members.append(self)
        self._settle()

    async def stop(self) -> None:
        if self in self._members:
            self._members.remove(self)
        self._settle()
        self.held = False
        self.changed.set()

    def _settle(self) -> None:
        for i, member in enumerate(self._members):
            if member.held != (i == 0):
                member.held = i == 0
                member.changed.set()


@dataclass
class FakeLedger(LedgerOperations):
    """The ledger port in memory; one per test (or share one between fake services)."""

    settings: Settings
    name: str = "fake"
    logs: dict[tuple[str, int], list[FakeRecord]] = field(default_factory=dict)
    down: bool = False
    """True: appends and probes fail with BrokerUnavailableError, as with the broker away."""
    refused: int = 0
    """Appends refused so far (see :meth:`refuse`)."""
    read: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) -> next offset :meth:`take` hands out."""
    committed: dict[str, dict[Any, int]] = field(default_factory=dict)
    """Consumer group -> partition -> its committed next offset."""
    leases: dict[str, list[FakeLease]] = field(default_factory=dict)
    """Lease group -> its started members, the holder first."""

    def __post_init__(self) -> None:
        # Named as the real ledger's: a service logs the same outage lines on either.
        self.outage = outage_of(f"Kafka at {self.settings.kafka_bootstrap}")
        self._refusal: Exception | None = None
        self._refusals_left: int | None = None
        self._partitions = {spec.name: spec.partitions for spec in topic_specs(self.settings)}
        self.appended = asyncio.Event()
        """Set (and replaced) on every append: what a waiting reader waits on."""
        self._started = False
        self._broker_timed = {self.settings.topic(s) for s in BROKER_TIMED}

    def refuse(self, error: Exception | None = None, times: int | None = None) -> None:
        """The next ``times`` appends (all of them when None) raise ``error``, by default
        the BrokerUnavailableError of a broker that is away; nothing of them is kept."""
        self._refusal = error or BrokerUnavailableError(
            f"the broker did not acknowledge the append: KafkaConnectionError: "
            f"Unable to connect to {self.settings.kafka_bootstrap} (FakeLedger.refuse)"
        )
        self._refusals_left = times

    async def start(self, *, wait: bool = False) -> Self:
        self._started = True
        return self

    async def stop(self) -> None:
        self._started = False

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def partitions(self, topic: str) -> int:
        if topic not in self._partitions:
            raise LedgerError(f"topic {topic} does not exist: run `gridledger dev up`")
        return self._partitions[topic]

    async def end_offsets(
        self, topic: str, partitions: Iterable[int], timeout_s: float = 2.0
    ) -> dict[int, int]:
        if self.down:
            raise BrokerUnavailableError("the fake broker is down (FakeLedger.down)")
        await self.partitions(topic)
        return {p: len(self.logs.get((topic, p), [])) for p in partitions}

    # ----------------------------------------------------------------------- writes

    async def append_encoded(self, items: Sequence[Encoded]) -> list[Appended]:
        if not self._started:
            raise LedgerError("ledger not started: call `await ledger.start()` first")
        if self.down:
            raise BrokerUnavailableError("the fake broker is down (FakeLedger.down)")
        if self._refusal is not None:
            error = self._refusal
            if self._refusals_left is not None:
                self._refusals_left -= 1
                if self._refusals_left <= 0:
                    self._refusal = None
            self.refused += 1
            raise error
        # Check every topic first: like a rejected produce request, nothing is appended.
        counts = [await self.partitions(topic) for topic, *_ in items]
        limit = self.settings.kafka_max_message_bytes
        for item in items:
            if record_bytes(item) > limit:  # the producer's max_request_size, as the real one
                raise record_too_large(f"append to {item[0]}", record_bytes(item), limit)
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        appended = []
        for (topic, key, value, headers), count in zip(items, counts, strict=True):
            partition = partition_for(key.decode() if key else "", count)
            log_ = self.logs.setdefault((topic, partition), [])
            stamp_type = LOG_APPEND_TIME if topic in self._broker_timed else CREATE_TIME
            log_.append(
                FakeRecord(
                    topic, partition, len(log_), key, value, list(headers), now_ms, stamp_type
                )
            )
            appended.append(Appended(topic, partition, len(log_) - 1))
        self.outage.up()
        self.appended.set()
        self.appended = asyncio.Event()
        return appended

    # ----------------------------------------------------------------------- reads

    def open_consumer(self, group_id: str | None = None, **options: Any) -> FakeConsumer:
        return FakeConsumer(self, group_id)

    def lease(self, topic: str, group: str, timeout_s: float) -> FakeLease:
        return FakeLease(self.leases.setdefault(group, []))

    async def read_raw(
        self, topic: str, partitions: Iterable[int] | None = None
    ) -> AsyncIterator[FakeRecord]:
        count = await self.partitions(topic)
        for partition in partitions or range(count):
            for raw in list(self.logs.get((topic, partition), [])):
                yield raw

    # ----------------------------------------------------------------------- for tests

    def take(self, topics: Iterable[str], most: int) -> list[FakeRecord]:
        """Up to ``most`` unread records of ``topics`` (full names), round robin over
        partitions and in order within each, as one consumer poll would hand them out."""
        wanted = set(topics)
        out: list[FakeRecord] = []
        while len(out) < most:
            before = len(out)
            for where, stored in sorted(self.logs.items()):
                at = self.read.get(where, 0)
                if where[0] in wanted and at < len(stored) and len(out) < most:
                    out.append(stored[at])
                    self.read[where] = at + 1
            if len(out) == before:
                break
        return out

    def values(self, topic: str, key: str) -> list[Any]:
        """The decodable values ``key`` holds on ``topic`` (a full name), in log order."""
        partition = partition_for(key, self._partitions[topic])
        out = []
        for raw in self.logs.get((topic, partition), []):
            if raw.key == key.encode() and raw.value is not None:
                with contextlib.suppress(EventDecodeError):
                    out.append(codec.decode(raw.value))
        return out
