"""``Subscriber``: decoded, schema-resolved, de-duplicated records from gridledger's topics.

Everything a subscriber would otherwise reimplement is done once, here: the Avro
single-object framing, the lookup of the writer schema by its fingerprint among every
stored version, the resolution to the newest one (:mod:`gridledger_client.wire`), and
de-duplication by event id (the ledger is at-least-once; derived events have
deterministic ids, so a subscriber that drops repeated ids sees each fact once).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer

from gridledger_client import wire

Decoder = Callable[[bytes], tuple[str, Any]]
"""Payload to ``(record type, value)``; raises :class:`wire.DecodeError` when it cannot."""

log = logging.getLogger("gridledger.client")

TOPICS = (
    "job-events",
    "node-events",
    "heartbeats",
    "log-chunks",
    "meter-ticks",
    "job-state",
    "accounting",
)
"""Topic suffixes a subscriber may read (``node-commands`` and ``dead-letter`` are internal)."""


@dataclass(frozen=True)
class Delivery:
    """One decoded record: ``value`` is as the newest schema reads it, whatever version wrote
    it (a dict of its fields by default, an event's envelope flattened into them)."""

    topic: str
    """The topic suffix (``job-events``), without the installation's prefix."""
    partition: int
    offset: int
    key: str
    """The job id (node id on ``node-events``)."""
    value: Any
    """An event's fields (``JobFailed``: ``job_id``, ``failure_class``, ...), or a view's
    (``JobView``, ``AccountingRecord``) on the compacted view topics."""
    type: str
    """The record type: ``JobFailed``, ``JobView``, ..."""
    timestamp_ms: int
    event_id: str | None = None
    """The event's id (its CloudEvents ``ce_id``); None for a view, which is no event."""


@dataclass(frozen=True)
class Undecodable:
    """A record that did not decode; reported to ``on_undecodable``, never silently dropped."""

    topic: str
    partition: int
    offset: int
    key: str
    error: str


class SeenIds:
    """The last ``capacity`` event ids, to drop redeliveries (bounded, oldest forgotten first).

    Duplicates in gridledger are close to the original (a producer retry, a
    processor re-deriving after a crash, a consumer re-reading after a restart),
    so a window of recent ids catches them without unbounded memory.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError("SeenIds capacity must be at least 1")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        """True the first time ``event_id`` is offered (within the window)."""
        if event_id in self._ids:
            self._ids.move_to_end(event_id)
            return False
        self._ids[event_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True


def _warn(item: Undecodable) -> None:
    log.warning(
        "skipping undecodable %s/%s@%s (key %s): %s",
        item.topic,
        item.partition,
        item.offset,
        item.key,
        item.error,
    )


class Subscriber:
    """Read gridledger topics as decoded records, each event once.

    - ``topics``: suffixes from :data:`TOPICS`; the full names are ``prefix + suffix``.
    - ``group_id``: join a consumer group (partitions shared between instances,
      progress kept with :meth:`commit`). Without one, every partition is read.
    - ``from_beginning``: where to start when there is no committed offset
      (True: the whole retained history, False: only new records).
    - ``types``: only these record types (``JobFailed``, ``JobView``, ...); others are
      skipped by their ``gridledger-type`` header, without decoding.
    - ``keys``: only these job (or node) ids.
    - Views (``job-state``, ``accounting``) carry no event id: a view equal to the one
      last delivered for the same key is dropped instead.
    - ``decoder``: payload to ``(type, value)``; the default gives dicts
      (:func:`wire.decode`). The server passes its own, which gives its models.
    - Other keywords go to ``aiokafka.AIOKafkaConsumer`` (TLS: ``security_protocol``,
      ``ssl_context``; SASL: ``sasl_mechanism``, ...).
    """

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str] = ("job-events",),
        *,
        prefix: str = "gridledger.",
        group_id: str | None = None,
        from_beginning: bool = True,
        types: Collection[str] | None = None,
        keys: Collection[str] | None = None,
        dedupe_window: int = 100_000,
        on_undecodable: Callable[[Undecodable], None] = _warn,
        client_id: str = "gridledger-subscriber",
        decoder: Decoder = wire.decode,
        **consumer_options: Any,
    ) -> None:
        unknown = [t for t in topics if t not in TOPICS]
        if unknown or not topics:
            raise ValueError(
                f"unknown topic {', '.join(unknown) or '(none given)'}: subscribe to suffixes "
                f"from {', '.join(TOPICS)} (the prefix is added from `prefix`)"
            )
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.topics = list(topics)
        self.group_id = group_id
        self.from_beginning = from_beginning
        self.types = frozenset(types) if types is not None else None
        self.keys = frozenset(keys) if keys is not None else None
        self.seen = SeenIds(dedupe_window)
        self.on_undecodable = on_undecodable
        self.client_id = client_id
        self.decoder = decoder
        self.consumer_options = consumer_options
        self._last_view: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._consumer: AIOKafkaConsumer | None = None
        self.duplicates = 0
        """Records dropped as repeats so far (events by id, views equal to the last)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Subscriber:
        """Connect and subscribe; reading starts where the group left off, else per the reset."""
        names = [self.prefix + t for t in self.topics]
        # Without a group aiokafka assigns every partition of the topics itself; the reset
        # policy then decides where reading starts (nothing is ever committed).
        consumer = AIOKafkaConsumer(
            *names,
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=self.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if self.from_beginning else "latest",
            isolation_level="read_committed",
            **self.consumer_options,
        )
        await consumer.start()
        missing = sorted(set(names) - set(await consumer.topics()))
        if missing:
            await consumer.stop()
            raise ValueError(
                f"topic {', '.join(missing)} does not exist: check `prefix` ({self.prefix!r}) "
                "and that the installation is up"
            )
        self._consumer = consumer
        return self

    async def stop(self) -> None:
        """Leave the group and close the connection."""
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    async def __aenter__(self) -> Subscriber:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def commit(self) -> None:
        """Record the group's progress up to what was delivered (needs ``group_id``)."""
        if self._consumer is None or self.group_id is None:
            raise RuntimeError("commit() needs a started Subscriber with a group_id")
        await self._consumer.commit()

    # ------------------------------------------------------------------ reading

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self.deliveries()

    async def deliveries(self, idle_timeout_s: float | None = None) -> AsyncIterator[Delivery]:
        """Decoded records as they arrive; with ``idle_timeout_s``, stop after that much quiet."""
        if self._consumer is None:
            raise RuntimeError("start the Subscriber first (async with Subscriber(...) as sub)")
        consumer = self._consumer
        loop = asyncio.get_running_loop()
        last_record = loop.time()
        while True:
            batch = await consumer.getmany(timeout_ms=200, max_records=1000)
            if not batch:
                if idle_timeout_s is not None and loop.time() - last_record >= idle_timeout_s:
                    return
                continue
            last_record = loop.time()
            for _, raws in sorted(batch.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                for raw in raws:
                    delivery = self._accept(raw)
                    if delivery is not None:
                        yield delivery

    def _accept(self, raw: Any) -> Delivery | None:
        """The record as a Delivery, or None when filtered out, a repeat or undecodable."""
        topic = raw.topic.removeprefix(self.prefix)
        key = raw.key.decode(errors="replace") if raw.key else ""
        if raw.value is None or (self.keys is not None and key not in self.keys):
            return None  # a tombstone, or another job
        headers = {k: v for k, v in (raw.headers or ())}
        header_type = headers.get(wire.HEADER_TYPE, b"").decode(errors="replace")
        if self.types is not None and header_type and header_type not in self.types:
            return None
        try:
            record_type, value = self.decoder(raw.value)
        except wire.DecodeError as exc:
            self.on_undecodable(Undecodable(topic, raw.partition, raw.offset, key, str(exc)))
            return None
        if self.types is not None and record_type not in self.types:
            return None
        event_id = _event_id(headers, value)
        if event_id is not None:
            if not self.seen.first_time(event_id):
                self.duplicates += 1
                return None
        elif self._repeated_view(topic, key, raw.value):
            self.duplicates += 1
            return None
        return Delivery(
            topic, raw.partition, raw.offset, key, value, record_type, raw.timestamp, event_id
        )

    def _repeated_view(self, topic: str, key: str, payload: bytes) -> bool:
        slot = (topic, key)
        if self._last_view.get(slot) == payload:
            return True
        self._last_view[slot] = payload
        self._last_view.move_to_end(slot)
        if len(self._last_view) > self.seen.capacity:
            self._last_view.popitem(last=False)
        return False


def _event_id(headers: dict[str, bytes], value: Any) -> str | None:
    """An event's id: its ``ce_id`` header, else the decoded ``event_id`` (records written
    before the CloudEvents headers); None for a view."""
    if "ce_id" in headers:
        return headers["ce_id"].decode(errors="replace")
    found = value.get("event_id") if isinstance(value, dict) else getattr(value, "event_id", None)
    return found if isinstance(found, str) else None
