"""The ledger as a port: what services and tests may ask of an event ledger.

Builders take a :class:`LedgerPort` (``build_processors(..., ledger=...)``,
``build_scheduler(..., ledger=...)``, the agent's publisher) and their
composition roots construct the real one, :class:`services.ledger.Ledger` on
Kafka. ``tests/fakes/ledger.py`` holds an in-memory one; both pass the same
contract tests (``tests/ledger/test_contract.py``), so a test that runs on the
fake runs against the behaviour the real ledger is held to.

What the contract says (and each implementation must keep):

- every value is keyed (``job_id``, or ``node_id`` on node-keyed topics) and
  lands on the partition the default partitioner picks for its key
  (:func:`services.ledger.client.partition_for`), so one key's values keep their
  order;
- an append returns only once the ledger holds what was appended, and says where
  each value landed (:class:`Appended`), in the order given;
- reads decode with the one codec (:mod:`schemas.codec`); a value that does not
  decode is skipped by readers and parked once on the dead-letter topic by the
  consumer that owns its processing (:meth:`LedgerPort.decode`).

The port is only what a ledger must do itself: connect, name partitions and their
ends, append (one event, many, or values already encoded), subscribe, lease, park a
poison record, and read a topic to its end as stored (:meth:`LedgerPort.read_raw`).
What is composed of those (a key's history, a topic's values to the end or its latest
per key, following live, appending through an outage) is a plain function over the
port in :mod:`services.ledger.compose`, the same for every ledger.

Only this package speaks Kafka; a test enforces it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self

from pydantic import BaseModel

from schemas.codec import Datum
from schemas.events import Event
from services.backoff import Outage
from services.settings import Settings

if TYPE_CHECKING:
    from services.ledger.subscription import Subscription

Keyed = tuple[str, str, BaseModel | Datum | None]
"""(full topic name, key, value): a value whose topic and key are the caller's choice
(a node command routed by node, a job's view on a compacted topic, maybe as the
:class:`~schemas.codec.Datum` of its fold); None deletes."""

Encoded = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]
"""(full topic name, key, value, headers) already encoded (the agent's spool, dead letters)."""


class RawRecord(Protocol):
    """A record as a consumer hands it over (aiokafka's ConsumerRecord has these)."""

    @property
    def topic(self) -> str:
        """The topic it was read from."""
        ...

    @property
    def partition(self) -> int:
        """Its partition."""
        ...

    @property
    def offset(self) -> int:
        """Its offset in the partition."""
        ...

    @property
    def key(self) -> bytes | None:
        """The key it was appended with (a job's or node's id)."""
        ...

    @property
    def value(self) -> bytes | None:
        """The encoded payload; None for a tombstone."""
        ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]:
        """The headers it was appended with."""
        ...

    @property
    def timestamp(self) -> int:
        """Milliseconds since the epoch: the broker's append time or the producer's."""
        ...

    @property
    def timestamp_type(self) -> int:
        """1: the broker's append time (``LogAppendTime``); 0: the producer's."""
        ...


@dataclass(frozen=True)
class Appended:
    """Where an appended value landed."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class LedgerRecord:
    """A decoded value and where it came from."""

    topic: str
    partition: int
    offset: int
    key: str
    value: BaseModel
    timestamp_ms: int
    appended_at: datetime | None = None
    """When the broker appended it, on a topic that records the append time (else None:
    the timestamp is the producer's clock, which never moves a deadline)."""

    @property
    def event(self) -> Event:
        """The value as an event; a view (JobView, AccountingRecord) is not one."""
        if not isinstance(self.value, Event):
            raise TypeError(f"record at {self.topic}/{self.partition}@{self.offset} is a view")
        return self.value


class Lease(Protocol):
    """Leadership among the members of one group (:meth:`LedgerPort.lease`): at most one
    member holds it at a time, as far as the ledger knows; a member that dies loses it
    within the timeout. Not a fence by itself (see :mod:`projections.fence`)."""

    held: bool
    """Whether this member holds the lease now."""
    changed: asyncio.Event
    """Set whenever ``held`` changes (clear it to wait for the next change)."""

    async def start(self) -> None:
        """Join the group."""
        ...

    async def stop(self) -> None:
        """Leave it: another member takes the lease at once."""
        ...


class LedgerPort(Protocol):
    """Append to and read from gridledger's topics; ``await start()`` before use."""

    settings: Settings
    outage: Outage
    """The ledger's availability as this process sees it (logged on change only)."""

    async def start(self, *, wait: bool = False) -> Self:
        """Connect; ``wait=True`` rides out an unavailable ledger with backoff."""
        ...

    async def stop(self) -> None:
        """Disconnect; a stopped ledger can be started again."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...

    def topic_of(self, event: Event) -> str:
        """The full topic name an event type is appended to."""
        ...

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has; a missing topic raises LedgerError."""
        ...

    async def end_offsets(
        self, topic: str, partitions: Iterable[int], timeout_s: float = 2.0
    ) -> dict[int, int]:
        """Partition -> the offset its next value will get, asked now (within ``timeout_s``,
        else BrokerUnavailableError)."""
        ...

    # ----------------------------------------------------------------------- writes

    async def append(self, event: Event, topic: str | None = None) -> Appended:
        """Append one event (to ``topic`` instead of its own when given)."""
        ...

    async def append_many(
        self, events: Sequence[Event], topic: str | None = None
    ) -> list[Appended]:
        """Append events in order per key; where each one landed, in the order given."""
        ...

    async def append_encoded(self, items: Sequence[Encoded]) -> list[Appended]:
        """Append values already encoded; the one append path the others go through."""
        ...

    # ----------------------------------------------------------------------- reads

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        name: str,
        group: str | None = None,
        positions: Mapping[tuple[str, int], int] | None = None,
        **how: Any,
    ) -> Subscription:
        """A live subscription to ``topics`` (full names) for the consumer ``name``: batches
        marked catch-up or live, committed to ``group`` once handled (or read from
        ``positions``), undecodable records parked, outages ridden out inside
        (:mod:`services.ledger.subscription`)."""
        ...

    def lease(self, topic: str, group: str, timeout_s: float) -> Lease:
        """A member (not started) of ``group``'s lease on the one-partition ``topic``; a
        dead holder loses it after ``timeout_s``."""
        ...

    async def dead_letter(
        self, raw: Any, error: Exception | str, consumer: str, reason: str = "undecodable"
    ) -> Appended:
        """Park a consumed record this consumer cannot apply on the dead-letter topic, with
        its origin and ``reason``; counted and logged once (the one poison-record path)."""
        ...

    async def within_limit(
        self, items: Sequence[Keyed], consumer: str
    ) -> tuple[list[Encoded], list[tuple[Keyed, int]]]:
        """``items`` encoded; each over ``kafka_max_message_bytes`` parked as
        ``unpublishable`` and returned with its size instead."""
        ...

    def record_refused(self, cause: Event, by: str, item: Keyed, size: int) -> Event:
        """The RecordRefused fact of a parked ``item``, derived by ``by`` from ``cause``."""
        ...

    def read_raw(
        self, topic: str, partitions: Iterable[int] | None = None
    ) -> AsyncIterator[RawRecord]:
        """Every stored record of ``topic`` as consumed, undecodable ones included."""
        ...
