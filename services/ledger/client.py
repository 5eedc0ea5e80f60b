"""Async Kafka client for the ledger (aiokafka).

Writes use ``acks=all`` and the idempotent producer; every event is keyed by
``job_id`` (``node_id`` for node-keyed topics) so one job's events stay ordered
in one partition. Reads decode with the one codec; a record that does not
decode goes to the dead-letter topic with its topic/partition/offset and the
error, and the reader moves on.

Outages: an append the broker did not acknowledge raises
:class:`BrokerUnavailableError` (or, for an error waiting cannot fix, a
:class:`~services.ledger.errors.LedgerRefusedError` naming the cause and the fix:
the table is :data:`services.ledger.errors.FATAL`) and drops the producer (its idempotent session
may be left with sequence numbers the broker never saw); the next append starts
a fresh one. ``start(wait=True)`` and :meth:`Ledger.append_until_acked` ride an
outage out with the shared backoff (:mod:`services.backoff`), logging once when
the broker goes away and once when it is back. Re-appending an event whose first
append's fate is unknown may write it twice: every consumer drops a repeated
``event_id``, which is why every event id is fixed before its first append.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError
from aiokafka.partitioner import murmur2
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from pydantic import BaseModel

from schemas import codec
from schemas.errors import EventDecodeError, LedgerError
from schemas.events import Event, RecordRefused
from services.backoff import Outage, outage_of, retrying, route_client_logs
from services.ledger.errors import (
    BrokerUnavailableError,
    append_failed,
    broker_unavailable,
    refusal_of,
)
from services.ledger.lease import KafkaLease
from services.ledger.port import Appended, Encoded, Keyed, LedgerRecord
from services.ops import metrics
from services.settings import Settings
from services.transport import kafka_options

if TYPE_CHECKING:
    from services.ledger.port import LedgerPort
    from services.ledger.subscription import Subscription

log = logging.getLogger(__name__)

DLQ_SOURCE_TOPIC = "gridledger-source-topic"
DLQ_SOURCE_PARTITION = "gridledger-source-partition"
DLQ_SOURCE_OFFSET = "gridledger-source-offset"
DLQ_ERROR = "gridledger-error"
DLQ_CONSUMER = "gridledger-consumer"
DLQ_REASON = "gridledger-reason"
DLQ_VALUE_BYTES = "gridledger-value-bytes"

POISON_REASONS = ("undecodable", "unstorable", "unpublishable", "unapplicable")
"""Why a consumer parked a record (the ``gridledger-reason`` header and the metric's
``reason``): it does not decode; the read models refuse it (the sink); the broker refuses
what it leads to (too large to publish); applying it raised (a scheduler or agent bug
that hostile input reached). docs/architecture.md, "Poison records"."""


def poison_line(raw: Any, consumer: str, reason: str, error: Exception | str) -> str:
    """The one log line of a poison record: where it is, the job (its key), who, why."""
    key = raw.key.decode("utf-8", "replace") if raw.key else "-"
    why = f"{type(error).__name__}: {error}" if isinstance(error, Exception) else error
    where = f"{raw.topic}/{raw.partition}@{raw.offset}"
    return f"{consumer}: {reason} record {where} (job {key}): {why}"


def encoded(items: Sequence[Keyed]) -> list[Encoded]:
    """Values with their topic and key as the ledger appends them (the one codec)."""
    return [
        (
            topic,
            key.encode() if key else None,
            None if value is None else codec.encode(value),
            [] if value is None else codec.headers(value),
        )
        for topic, key, value in items
    ]


def record_bytes(item: Encoded) -> int:
    """The size of one record as the producer counts it against ``max_request_size`` (and
    the broker, in a batch of one, against ``max.message.bytes``)."""
    _, key, value, headers = item
    return DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)


@dataclass(frozen=True)
class Unsent:
    """A record a service meant to append and did not (over the topic's limit): what it
    parks on the dead-letter topic instead, shaped like a consumed record."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int = -1
    offset: int = -1


def skipped(raw: Any, consumer: str, error: Exception | str) -> None:
    """A reader that only looks (history, follow, replay) skips a record it cannot decode:
    one log line and the ``gridledger_records_skipped`` count, never a dead letter (the
    topic's owner parks it, once)."""
    log.warning("skipped %s", poison_line(raw, consumer, "undecodable", error))
    metrics.RECORDS_SKIPPED.labels(consumer=consumer).inc()


CONSUMER_OUTAGE_ERRORS: tuple[type[Exception], ...] = (KafkaError, LedgerError, OSError)
"""What a consumer loop outside this package rides out by reconnecting (the agent's
commands reader): the Kafka client's errors, the ledger's, the socket's. Appends and
reads in this package wrap the client's into :class:`BrokerUnavailableError`."""


LOG_APPEND_TIME = 1
"""Kafka's timestamp type of a record stamped by the broker on append."""


def heard_at(record: object, received: datetime | None) -> datetime | None:
    """When the platform heard a consumed record: the broker's append time when the topic
    records it (``message.timestamp.type=LogAppendTime``), else ``received``.

    Either way the receiving side's clock, never the producer's: an agent whose clock
    is off cannot move its own deadlines (the watchdog's silence, a node's liveness).
    """
    if getattr(record, "timestamp_type", None) == LOG_APPEND_TIME:
        stamp = getattr(record, "timestamp", None)
        if isinstance(stamp, int | float) and stamp > 0:
            # faust gives seconds (float), aiokafka milliseconds (int).
            seconds = stamp / 1000 if isinstance(stamp, int) else stamp
            return datetime.fromtimestamp(seconds, UTC)
    return received


def partition_for(key: str, partitions: int) -> int:
    """The partition the Java/aiokafka default partitioner picks for ``key``."""
    return _partition_of(key.encode(), partitions)


def _partition_of(key: bytes | None, partitions: int) -> int:
    # No key hashes as the empty one: one fixed partition, never a random one, so the
    # fake and the real ledger agree on where everything lands.
    return (murmur2(key or b"") & 0x7FFFFFFF) % partitions


_CONSUMED: dict[str, Any] = {}
"""EVENTS_CONSUMED's child per topic: ``labels()`` costs more than a decode's Avro read."""


def consumed(topic: str, count: int = 1) -> None:
    """Count ``count`` records of ``topic`` consumed (``gridledger_events_consumed``)."""
    counter = _CONSUMED.get(topic)
    if counter is None:
        counter = _CONSUMED[topic] = metrics.EVENTS_CONSUMED.labels(topic=topic)
    counter.inc(count)


def decoded(raw: Any) -> LedgerRecord | EventDecodeError | None:
    """A consumed record decoded, why it does not decode, or None for a tombstone.

    Decoded on the codec's trusted path: this ledger's topics are written only by
    gridledger's services through ``codec.encode``, from validated models.
    """
    if raw.value is None:
        return None  # a tombstone on a compacted topic
    try:
        value = codec.decode(raw.value, trusted=True)
    except EventDecodeError as exc:
        return exc
    return LedgerRecord(
        raw.topic,
        raw.partition,
        raw.offset,
        raw.key.decode() if raw.key else "",
        value,
        raw.timestamp,
        heard_at(raw, None),
    )


async def decode(
    ledger: LedgerPort | LedgerOperations, raw: Any, consumer: str, dead_letter: bool = True
) -> LedgerRecord | None:
    """Decode a consumed record; None when it does not decode.

    The consumer that owns a topic's processing (sink, processors, scheduler,
    agent) dead-letters what it cannot decode, once. Readers that only look
    (history, follow, replay) pass ``dead_letter=False`` and skip the record
    with a warning, so re-reading a partition does not park it again.
    """
    record = decoded(raw)
    if isinstance(record, EventDecodeError):
        if dead_letter:
            await ledger.dead_letter(raw, record, consumer)
        else:
            skipped(raw, consumer, record)
        return None
    if record is not None:
        consumed(raw.topic)
    return record


class LedgerOperations:
    """What a ledger derives from its primitives, written once for the Kafka ledger and the
    in-memory one the tests use (tests/fakes/ledger.py), so the two cannot drift.

    A subclass provides ``settings``, ``outage``, :meth:`append_encoded` (the one append
    path), :meth:`partitions`, :meth:`open_consumer` (what a subscription reads with) and
    ``read_raw``; what is composed of the port's operations alone (history, reading to
    the end, follow) are plain functions over the port in :mod:`services.ledger.compose`.
    """

    settings: Settings
    outage: Outage

    async def append_encoded(self, items: Sequence[Encoded]) -> list[Appended]:
        """Append encoded records in order per partition and wait for every acknowledgement."""
        raise NotImplementedError

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has."""
        raise NotImplementedError

    def topic_of(self, event: Event) -> str:
        """The full name of the topic an event type lives on."""
        return self.settings.topic(type(event).TOPIC)

    async def append(self, event: Event, topic: str | None = None) -> Appended:
        """Append one event and wait until the broker has it (acks=all). Returns its offset."""
        return (await self.append_many([event], topic=topic))[0]

    async def append_many(
        self, events: Sequence[Event], topic: str | None = None
    ) -> list[Appended]:
        """Append events in order per key; waits for all of them. Where each one landed.

        ``topic`` overrides the events' own.
        """
        return await self.put_many([(topic or self.topic_of(e), e.key, e) for e in events])

    async def put_many(self, items: Sequence[Keyed]) -> list[Appended]:
        """Append values to the topic and under the key each names; None deletes the key
        (a tombstone on a compacted topic). Encodes, then :meth:`append_encoded`."""
        return await self.append_encoded(encoded(items))

    async def publish(self, topic_suffix: str, key: str, value: BaseModel | None) -> Appended:
        """Publish a view (JobView, AccountingRecord) to a compacted topic; None deletes it."""
        return (await self.put_many([(self.settings.topic(topic_suffix), key, value)]))[0]

    async def send_raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> Appended:
        """Send bytes as they are (dead-letter, tests of malformed input)."""
        return (await self.append_encoded([(topic, key, value, headers)]))[0]

    async def dead_letter(
        self, raw: Any, error: Exception | str, consumer: str, reason: str = "undecodable"
    ) -> Appended:
        """Park a record this consumer cannot apply, and go on: the one way every consumer
        (sink, processors, scheduler, agent) handles a poison record.

        The record goes to the dead-letter topic as it was (its value dropped when even
        that topic could not take it, its size in a header), with where it came from,
        the error and ``reason`` (:data:`POISON_REASONS`) in headers; it is counted in
        ``gridledger_dead_letters{consumer,reason}`` and logged once, naming the job.
        """
        value = raw.value
        size = len(value) if value is not None else 0
        if size > self.settings.kafka_max_message_bytes - 16 * 1024:
            value = None  # over what the topic takes: the headers say what it was
        hdrs = [
            (DLQ_SOURCE_TOPIC, str(raw.topic).encode()),
            (DLQ_SOURCE_PARTITION, str(raw.partition).encode()),
            (DLQ_SOURCE_OFFSET, str(raw.offset).encode()),
            (DLQ_ERROR, str(error).encode("utf-8", "replace")[:4000]),
            (DLQ_CONSUMER, consumer.encode()),
            (DLQ_REASON, reason.encode()),
            (DLQ_VALUE_BYTES, str(size).encode()),
        ]
        log.warning("dead-lettering %s", poison_line(raw, consumer, reason, error))
        metrics.DEAD_LETTERS.labels(consumer=consumer, reason=reason).inc()
        return await self.send_raw(self.settings.topic("dead-letter"), raw.key, value, hdrs)

    async def within_limit(
        self, items: Sequence[Keyed], consumer: str
    ) -> tuple[list[Encoded], list[tuple[Keyed, int]]]:
        """``items`` encoded, each checked against ``kafka_max_message_bytes`` before it is
        sent: one over it would make the broker refuse the batch on every retry, so it is
        parked as ``unpublishable`` (:meth:`dead_letter`; headers only) and returned with
        its size for the caller to record what it means for the job (a RecordRefused).
        Returns (the records to send, the parked items and their sizes)."""
        limit = self.settings.kafka_max_message_bytes
        kept: list[Encoded] = []
        parked: list[tuple[Keyed, int]] = []
        for item, record in zip(items, encoded(items), strict=True):
            size = record_bytes(record)
            if size <= limit:
                kept.append(record)
                continue
            topic, _, value = item
            kind = codec.record_name(value) if value is not None else "a deletion"
            why = f"{kind} of {size:,} bytes is over {topic}'s limit of {limit:,}"
            unsent = Unsent(topic, record[1], record[2])
            await retrying(
                partial(self.dead_letter, unsent, why, consumer, "unpublishable"),
                outage=self.outage,
                transient=broker_unavailable,
                backoff=self.settings.reconnect_backoff(),
            )
            parked.append((item, size))
        return kept, parked

    def record_refused(self, cause: Event, by: str, item: Keyed, size: int) -> RecordRefused:
        """The RecordRefused fact of ``item`` (parked by :meth:`within_limit`), derived by
        ``by`` from ``cause``: the same every time the same record is refused."""
        suffix = item[0].removeprefix(self.settings.topic_prefix)
        kind = "" if item[2] is None else codec.record_name(item[2])
        return RecordRefused.derived(
            cause,
            by,
            f"refused:{suffix}:{kind}",
            record_topic=suffix,
            record_type=kind,
            size_bytes=size,
            limit_bytes=self.settings.kafka_max_message_bytes,
        )

    async def decode(
        self, raw: Any, consumer: str, dead_letter: bool = True
    ) -> LedgerRecord | None:
        """Decode a consumed record; None when it does not decode (:func:`decode`)."""
        return await decode(self, raw, consumer, dead_letter)

    consumed = staticmethod(consumed)

    def decoded(self, raw: Any, consumer: str = "") -> LedgerRecord | EventDecodeError | None:
        """The record decoded, why it does not decode, or None for a tombstone
        (:func:`decoded`); a record arrived, so the broker answers again."""
        if self.outage.is_down:
            self.outage.up()
        return decoded(raw)

    def subscribe(self, topics: Sequence[str], **how: Any) -> Subscription:
        """A live subscription to ``topics`` (full names): :class:`LedgerPort.subscribe`,
        :mod:`services.ledger.subscription`."""
        from services.ledger.subscription import Subscription

        return Subscription(self, topics, **how)

    def open_consumer(self, group_id: str | None = None, **options: Any) -> Any:
        """A consumer (not started) for a subscription: the ledger's primitive."""
        raise NotImplementedError


class Ledger(LedgerOperations):
    """The ledger on Kafka (:class:`~services.ledger.port.LedgerPort`). Build one per
    service in its composition root; ``await start()``."""

    def __init__(
        self,
        settings: Settings,
        name: str = "gridledger",
        *,
        idempotent: bool = True,
        request_timeout_s: float = 30.0,
    ) -> None:
        """``idempotent=False`` trades the producer's exactly-once retries for a bounded
        wait: an idempotent producer retries a batch until the broker takes it, however
        long the outage, while a plain one (still ``acks=all``) gives up after
        ``request_timeout_s`` and never sends that batch later. The API needs the
        latter to answer 503 with nothing recorded; a retry's duplicate keeps its
        ``event_id`` and every consumer drops it."""
        self.settings = settings
        self.name = name
        self.idempotent = idempotent
        self.request_timeout_s = request_timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._started = False
        self._partitions: dict[str, int] = {}
        self._probe: AIOKafkaConsumer | None = None
        """The consumer :meth:`end_offsets` asks (started on first use)."""
        self.outage = outage_of(f"Kafka at {settings.kafka_bootstrap}")
        """The broker's availability as this process sees it (logged on change only)."""
        route_client_logs("aiokafka", self.outage)

    async def start(self, *, wait: bool = False) -> Self:
        """Start the producer. ``wait=True`` retries with backoff until the broker answers
        (long-running services); otherwise an unreachable broker raises at once (CLI).
        Starting a started ledger changes nothing."""
        if self._producer is not None:
            return self
        if wait:
            await retrying(
                self._start_producer,
                outage=self.outage,
                transient=broker_unavailable,
                backoff=self.settings.reconnect_backoff(),
            )
        else:
            await self._start_producer()
        self._started = True
        return self

    async def _start_producer(self) -> None:
        bootstrap = self.settings.kafka_bootstrap
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            client_id=self.name,
            acks="all",
            enable_idempotence=self.idempotent,
            linger_ms=2,
            request_timeout_ms=int(self.request_timeout_s * 1000),
            max_request_size=self.settings.kafka_max_message_bytes,
            **kafka_options(self.settings),
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            if refusal_of(exc) is not None:  # e.g. refused credentials: waiting cannot help
                raise append_failed(exc, f"connecting to Kafka at {bootstrap}") from exc
            raise BrokerUnavailableError(
                f"cannot reach Kafka at {bootstrap}: {exc}. "
                "Start the local stack with `gridledger dev up`"
            ) from exc
        self._producer = producer

    async def _drop_producer(self) -> None:
        """Forget an idempotent producer after a failed append; the next one starts afresh.

        Its session (producer id, sequence numbers) may disagree with the broker after
        the failure. A plain producer has no such state and its expired batches are
        gone, so it is kept (stopping it would wait on batches still in flight).
        """
        if not self.idempotent:
            return
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await producer.stop()

    async def _ready_producer(self) -> AIOKafkaProducer:
        if self._producer is None and self._started:
            await self._start_producer()
        return self.producer

    async def stop(self) -> None:
        """Close the broker probe and the producer (stopping it sends what it still holds)."""
        self._started = False
        probe, self._probe = self._probe, None
        if probe is not None:
            await probe.stop()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def producer(self) -> AIOKafkaProducer:
        """The started producer; a BrokerUnavailableError while a failed append's broker has
        not answered since, a LedgerError before :meth:`start`."""
        if self._producer is None:
            if self._started:
                raise BrokerUnavailableError(
                    f"no producer: the last append to Kafka at {self.settings.kafka_bootstrap} "
                    "failed and the broker has not answered since"
                )
            raise LedgerError("ledger not started: call `await ledger.start()` first")
        return self._producer

    # ----------------------------------------------------------------------- writes

    async def append_encoded(self, items: Sequence[Encoded]) -> list[Appended]:
        """The one append path: encoded values in order per key; waits for all of them.

        The values are grouped by partition into the producer's own batches
        (``create_batch``/``send_batch``) and acknowledged per batch: a record-by-record
        ``send`` (a producer call, a partitioner call and a future per record) was a
        quarter of the scheduler's time. The guarantees are the producer's (acks=all,
        idempotent); the partition is the default partitioner's (:func:`partition_for`),
        and one partition's batches are queued in order. A failure drops the producer
        (see the module docstring) and raises :class:`BrokerUnavailableError`.
        """
        if not items:
            return []
        producer = await self._ready_producer()
        batches: dict[tuple[str, int], list[Any]] = {}
        slots: list[tuple[tuple[str, int], int, int]] = []
        """Per value: its partition, the index of its batch there, its place in the batch."""
        for where, key, value, hdrs in items:
            tp = (where, _partition_of(key, await self.partitions(where)))
            pending = batches.setdefault(tp, [])
            meta = None
            if pending:
                meta = pending[-1].append(timestamp=None, key=key, value=value, headers=hdrs)
            if meta is None:  # no batch yet for this partition, or the last one is full
                pending.append(producer.create_batch())
                meta = pending[-1].append(timestamp=None, key=key, value=value, headers=hdrs)
                if meta is None:  # aiokafka always takes a batch's first record
                    raise LedgerError(
                        f"a value of {len(value or b'')} bytes for {where} does not fit a batch"
                    )
            slots.append((tp, len(pending) - 1, meta.offset))

        async def submit(tp: tuple[str, int], builders: list[Any]) -> list[Any]:
            futures = []
            for builder in builders:
                builder.close()  # nothing else may join a batch once it is queued
                futures.append(await producer.send_batch(builder, tp[0], partition=tp[1]))
            # Every future is awaited, so none is left with an error nobody read.
            done = await asyncio.gather(*futures, return_exceptions=True)
            for result in done:
                if isinstance(result, BaseException):
                    raise result
            return done

        results = await asyncio.gather(
            *(submit(tp, b) for tp, b in batches.items()), return_exceptions=True
        )
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            if not isinstance(failed, KafkaError | OSError):
                raise failed
            await self._drop_producer()
            raise append_failed(failed, f"append of {len(items)} value(s)") from failed
        acked: dict[tuple[str, int], list[Any]] = {
            tp: r
            for tp, r in zip(batches, results, strict=True)
            if not isinstance(r, BaseException)
        }
        self.outage.up()
        produced: dict[str, int] = {}
        for tp, _, _ in slots:
            produced[tp[0]] = produced.get(tp[0], 0) + 1
        metrics.count_by_topic(metrics.EVENTS_PRODUCED, produced)
        return [Appended(tp[0], tp[1], acked[tp][i].offset + n) for tp, i, n in slots]

    # ----------------------------------------------------------------------- reads

    def open_consumer(self, group_id: str | None = None, **options: Any) -> AIOKafkaConsumer:
        """A consumer for a subscription (the ledger's primitive)."""
        return self.consumer(group_id=group_id, **options)

    def lease(self, topic: str, group: str, timeout_s: float) -> KafkaLease:
        """A member of ``group``'s lease on ``topic`` (:mod:`services.ledger.lease`)."""
        return KafkaLease(self.settings, topic, group, timeout_s, f"{self.name}-lease")

    def consumer(
        self, *topics: str, group_id: str | None = None, **kwargs: Any
    ) -> AIOKafkaConsumer:
        """A consumer on full topic names with gridledger's defaults (manual commits)."""
        return AIOKafkaConsumer(
            *topics,
            bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=group_id,
            client_id=f"{self.name}-consumer",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **{**kafka_options(self.settings), **kwargs},
        )

    async def end_offsets(
        self, topic: str, partitions: Iterable[int], timeout_s: float = 2.0
    ) -> dict[int, int]:
        """Partition -> the offset the next record appended there will get, asked now.

        Over a consumer of its own, kept between calls (a probe every few seconds, e.g.
        the watchdog's, must not open a connection each time): a broker that does not
        answer within ``timeout_s`` raises :class:`BrokerUnavailableError`.
        """
        tps = [TopicPartition(topic, p) for p in partitions]
        try:
            if self._probe is None:
                probe = self.consumer(request_timeout_ms=int(timeout_s * 1000))
                try:
                    await asyncio.wait_for(probe.start(), timeout_s)
                except BaseException:
                    await probe.stop()
                    raise
                self._probe = probe
            ends = await asyncio.wait_for(self._probe.end_offsets(tps), timeout_s)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise BrokerUnavailableError(
                f"Kafka at {self.settings.kafka_bootstrap} did not answer: {exc!r}"
            ) from exc
        return {tp.partition: ends[tp] for tp in tps}

    async def partitions(self, topic: str) -> int:
        """The topic's partition count, asked once and then remembered."""
        if topic not in self._partitions:
            try:
                parts = await (await self._ready_producer()).partitions_for(topic)
            except UnknownTopicOrPartitionError:
                parts = set()  # this aiokafka raises where older ones returned nothing
            if not parts:
                raise LedgerError(f"topic {topic} does not exist: run `gridledger dev up`")
            self._partitions[topic] = len(parts)
        return self._partitions[topic]

    async def read_raw(
        self, topic: str, partitions: Iterable[int] | None = None
    ) -> AsyncIterator[Any]:
        """Every record of ``topic`` as consumed (bytes, headers, broker timestamp), from
        offset 0 up to the end as of the call, partition by partition interleaved."""
        async for raws in self._raw_batches(topic, partitions):
            for raw in raws:
                yield raw

    async def read_batches(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        consumer_name: str = "reader",
        dead_letter: bool = False,
    ) -> AsyncIterator[list[LedgerRecord]]:
        """What :meth:`read_partitions` yields, a fetched batch of one partition at a time.

        For readers that go through whole topics (replay): one await per batch instead
        of one per record, and the consumed-events counter bumped once per batch.
        """
        async for raws in self._raw_batches(topic, partitions):
            records = []
            for raw in raws:
                record = self.decoded(raw)
                if isinstance(record, EventDecodeError):
                    if dead_letter:
                        await self.dead_letter(raw, record, consumer_name)
                    else:
                        skipped(raw, consumer_name, record)
                elif record is not None:
                    records.append(record)
            if records:
                metrics.EVENTS_CONSUMED.labels(topic=topic).inc(len(records))
                yield records

    async def _raw_batches(
        self, topic: str, partitions: Iterable[int] | None, max_records: int = 5000
    ) -> AsyncIterator[list[Any]]:
        """The raw records of ``partitions`` of ``topic`` from offset 0 to the end as of the
        call, a fetched batch of one partition at a time."""
        count = await self.partitions(topic)
        tps = [TopicPartition(topic, p) for p in (partitions or range(count))]
        consumer = self.consumer(max_partition_fetch_bytes=4 * 1024 * 1024)
        await consumer.start()
        try:
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            pending = {tp for tp in tps if ends[tp] > 0}
            await consumer.seek_to_beginning(*tps)
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=1000, max_records=max_records)
                for tp, raws in batch.items():
                    end = ends[tp]
                    if raws and raws[-1].offset >= end:
                        raws = [raw for raw in raws if raw.offset < end]
                    if raws:
                        yield raws
                    if await consumer.position(tp) >= end:
                        pending.discard(tp)
                if not batch:
                    for tp in list(pending):
                        if await consumer.position(tp) >= ends[tp]:
                            pending.discard(tp)
        finally:
            await consumer.stop()
