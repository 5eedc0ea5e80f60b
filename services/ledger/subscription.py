"""One subscription: how every live consumer of the ledger reads (:meth:`LedgerPort.subscribe`).

The scheduler, the sink, the processors and the agent each keep only their handler;
this module is the loop they share::

    async with ledger.subscribe(topics, name="sink", positions=stored) as subscription:
        async for batch in subscription:
            ...  # apply batch.records; the batch is committed when the handler asks again

Where it starts and what it commits:

- ``group=`` (the processors, the agent): a consumer group's commits; the batch's
  offsets are committed to the group once the handler is done with it (when it asks
  for the next batch), so a crash re-delivers exactly what was not handled. With
  ``key=`` the subscription reads only that key's partition and values (the agent's
  node-commands); without, it joins the group and takes the partitions the group
  gives it (``watch`` hears the rebalances).
- ``positions=`` (the sink): from these next offsets (the beginning where none is
  given), committing nothing: the handler stores :attr:`Batch.offsets` itself (the
  sink, with its rows in one Postgres transaction).
- neither (the scheduler): every partition from the beginning, nothing committed.

Every batch is marked :attr:`Batch.live` or catch-up: catch-up until every partition
read reaches the end offset it had when the subscription started, the topics caught
up in the order given (the scheduler folds the fleet before the backlog); a group's
member, whose partitions the group hands out as it pleases, reads live. The first
live batch comes at once when catch-up ends, empty if nothing new arrived; then a
batch comes whenever records do, or an empty one after :attr:`Subscription.wait_ms` without any (a
handler's tick).

Records are decoded once; one that does not decode is parked on the dead-letter topic
before its batch is handed over (the one poison-record path,
:meth:`LedgerPort.dead_letter`), and :meth:`Batch.apply` parks one the handler cannot
apply, as ``unapplicable``; the subscription goes on either way.

A broker outage is ridden out inside: the consumer is dropped, the shared backoff
(:mod:`services.backoff`) waited, and a new one resumes where the handed-over batches
ended (in a group, at its commits); the log says once that the broker went and once
that it is back. Anything else the consumer raises (a refused configuration) ends
the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError

from schemas.errors import EventDecodeError, LedgerError
from services.backoff import retrying
from services.ledger.client import partition_for, skipped
from services.ledger.errors import LedgerRefusedError, broker_unavailable
from services.ledger.port import LedgerRecord, RawRecord

log = logging.getLogger(__name__)

DECODE_SLICE = 32
"""Records decoded between two yields to the event loop while a batch is read ahead: the
handler's own work (the sink's statements) goes on between slices."""


def outage(exc: BaseException) -> bool:
    """Whether a consumer's error is the broker being away (wait it out) rather than a
    refusal or a bug: the Kafka client's errors, the ledger's, the socket's."""
    if isinstance(exc, LedgerRefusedError | CommitFailedError):
        return False
    return broker_unavailable(exc) or isinstance(exc, KafkaError | LedgerError | OSError)


class Consumer(Protocol):
    """What a subscription needs of a ledger's consumer (aiokafka's ``AIOKafkaConsumer``
    has it; the fake ledger's in-memory one too). Not part of the port."""

    async def start(self) -> None:
        """Connect (and join the group, when subscribed)."""
        ...

    async def stop(self) -> None:
        """Disconnect; nothing is committed by stopping."""
        ...

    def subscribe(self, topics: Sequence[str], listener: Any) -> None:
        """Be a member of the group on these topics, told of rebalances."""
        ...

    def assign(self, partitions: Iterable[Any]) -> None:
        """Read exactly these partitions."""
        ...

    def assignment(self) -> set[Any]:
        """The partitions read."""
        ...

    def seek(self, partition: Any, offset: int) -> None:
        """Read ``partition`` from ``offset``."""
        ...

    async def end_offsets(self, partitions: Iterable[Any]) -> dict[Any, int]:
        """Partition -> the offset its next record will get."""
        ...

    async def position(self, partition: Any) -> int:
        """The offset of the next record read from ``partition``."""
        ...

    def highwater(self, partition: Any) -> int | None:
        """The end offset learnt by the last fetch (None before one)."""
        ...

    async def commit(self, offsets: dict[Any, int]) -> None:
        """Store the group's next offsets."""
        ...

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Any, list[Any]]:
        """Records of the given (else every assigned) partitions, waiting up to
        ``timeout_ms`` when none is there yet."""
        ...


class Watch(Protocol):
    """What a group's member hears of its subscription (the processors: its store and
    faust's sensors). Each hook may return an awaitable."""

    def assigned(self, partitions: list[TopicPartition]) -> Any:
        """The group gave this member ``partitions``."""
        ...

    def revoked(self, partitions: list[TopicPartition]) -> Any:
        """The group took ``partitions`` (after the batch in hand was committed)."""
        ...

    def committed(self, offsets: dict[TopicPartition, int], started: float) -> Any:
        """A batch's offsets were committed; the commit began at loop time ``started``."""
        ...


@dataclass
class Batch:
    """Records read together, in partition order, and where they leave each partition."""

    live: bool
    """False while catching up with what the topics held at the start."""
    raws: list[Any]
    """Every record read, as consumed (tombstones, undecodable and unwanted ones included)."""
    records: list[LedgerRecord]
    """The decoded values the handler wants, in order (undecodable ones already parked)."""
    offsets: dict[TopicPartition, int]
    """Partition -> its next offset once this batch is handled (what is committed)."""
    subscription: Subscription = field(repr=False)
    by_place: dict[tuple[str, int, int], Any] = field(default_factory=dict, repr=False)
    bad: list[tuple[Any, EventDecodeError]] = field(default_factory=list, repr=False)

    def __bool__(self) -> bool:
        return bool(self.raws)

    @property
    def newest_s(self) -> float | None:
        """The broker timestamp (epoch seconds) of the batch's newest record."""
        stamps = [raw.timestamp for raw in self.raws if raw.timestamp]
        return max(stamps) / 1000 if stamps else None

    def raw(self, record: LedgerRecord) -> Any:
        """The record as consumed (bytes and headers), for parking it."""
        return self.by_place[(record.topic, record.partition, record.offset)]

    async def apply(self, record: LedgerRecord, apply: Callable[[], Any]) -> bool:
        """``apply()`` (awaited when it returns an awaitable); when it raises (not an
        outage), park the record as ``unapplicable`` and return False: the handler goes
        on with the next one (a scheduler or agent bug that hostile input reached)."""
        try:
            result = apply()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            if outage(exc):
                raise
            await self.park(record, exc, "unapplicable")
            return False
        return True

    async def park(self, record: LedgerRecord | Any, error: Exception | str, reason: str) -> None:
        """Park a record (decoded or as consumed) on the dead-letter topic with ``reason``,
        through a broker outage."""
        raw = self.raw(record) if isinstance(record, LedgerRecord) else record
        await self.subscription.park(raw, error, reason)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.subscription.revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.subscription.assigned(list(assigned))


async def _heard(hook: Any) -> None:
    if inspect.isawaitable(hook):
        await hook


class Subscription:
    """A live read of some topics; built by :meth:`LedgerPort.subscribe` (see the module
    docstring). Use it as ``async with``; iterate it once."""

    def __init__(
        self,
        ledger: Any,
        topics: Sequence[str],
        *,
        name: str,
        group: str | None = None,
        positions: Mapping[tuple[str, int], int] | None = None,
        key: str | None = None,
        wanted: Callable[[RawRecord], bool] | None = None,
        decode: bool = True,
        parks: bool = True,
        ahead: bool = False,
        max_records: int = 500,
        wait_ms: int = 200,
        watch: Watch | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if group is not None and positions is not None:
            raise ValueError("a subscription starts at a group's commits or at positions, not both")
        self.ledger = ledger
        self.topics = tuple(topics)
        self.name = name
        """Who parks what it cannot read (the dead-letter headers, the metric)."""
        self.group = group
        self.key = key
        self.wanted = wanted
        """Which records to decode (the others are skipped unread; not with ``ahead``)."""
        self.decode = decode
        self.parks = parks
        """Park what does not decode (the topic's owner); False: skip it (a reader)."""
        self.ahead = ahead
        """Read and decode the next batch while the handler works on this one."""
        self.max_records = max_records
        self.wait_ms = wait_ms
        """How long a read waits for records before it hands over an empty live batch."""
        self.watch = watch
        self.options = dict(options or {})
        self.consumer: Consumer | None = None
        """The consumer while connected (None during an outage)."""
        self.generations = 0
        """Assignments received from the group (0: not a member yet)."""
        self.rebalancing = False
        """Between a revoke and the next assignment."""
        self.live = False
        self._positions: dict[TopicPartition, int] = {
            TopicPartition(*tp): offset for tp, offset in (positions or {}).items()
        }
        """Partition -> next offset after the batches handed over."""
        self._catching_up: dict[TopicPartition, int] = {}
        """Partition -> the end offset it had when it was assigned, until read to it."""
        self._in_batch = asyncio.Lock()
        """Held from a batch's hand-over to its commit: a revoke waits for it."""
        self._gen: AsyncIterator[Batch] | None = None

    # ----------------------------------------------------------------------- for ops

    def assignment(self) -> set[TopicPartition]:
        """The partitions read now (empty while disconnected)."""
        return set(self.consumer.assignment()) if self.consumer is not None else set()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The end offset learnt by the last read (None before one): lag without a round trip."""
        return self.consumer.highwater(partition) if self.consumer is not None else None

    async def position(self, partition: TopicPartition) -> int | None:
        """The next offset of ``partition`` after the batches handed over (None: unknown)."""
        known = self._positions.get(partition)
        if known is not None or self.consumer is None:
            return known
        if partition not in self.consumer.assignment():
            return None
        return await self.consumer.position(partition)

    # ----------------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Batch]:
        if self._gen is None:
            self._gen = self._batches()
        return self._gen

    async def close(self) -> None:
        """Stop reading (the batch in hand is not committed)."""
        gen, self._gen = self._gen, None
        if gen is not None:
            await gen.aclose()  # type: ignore[attr-defined]

    # ----------------------------------------------------------------------- the loop

    async def _batches(self) -> AsyncIterator[Batch]:
        tries = 0
        ready: deque[Batch] = deque()
        while True:
            consumer: Consumer | None = None
            ahead: asyncio.Task[Batch] | None = None
            try:
                consumer = await self._connect()
                tries = 0
                self.ledger.outage.up()
                while True:
                    if not ready:
                        if self._catching_up or self.live or ahead is not None:
                            polled = ahead or asyncio.ensure_future(self._read(consumer))
                            ahead = None
                            ready.append(await polled)
                        if not self._catching_up and not self.live:
                            self.live = True  # catch-up ended: the first live batch, at once
                            ready.append(self._batch(True, []))
                    batch = ready.popleft()
                    for raw, error in batch.bad:
                        if self.parks:
                            await self.park(raw, error, "undecodable")
                        else:
                            skipped(raw, self.name, error)
                    if self.ahead and ahead is None and not ready:
                        ahead = asyncio.ensure_future(self._read(consumer))
                    async with self._in_batch:
                        yield batch
                        self._positions.update(batch.offsets)
                        if self.group is not None and batch.offsets:
                            await self._commit(consumer, batch.offsets)
            except Exception as exc:
                if not outage(exc):
                    raise
                self.ledger.outage.down(f"{self.name} consumer: {type(exc).__name__}: {exc}")
            finally:
                ready.clear()  # read again from the handed-over positions
                if ahead is not None:
                    ahead.cancel()
                    await asyncio.wait([ahead])
                    if not ahead.cancelled():
                        ahead.exception()  # retrieved: a read of a dropped batch
                self.consumer = None
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        await consumer.stop()
            await asyncio.sleep(self.ledger.settings.reconnect_backoff().delay(tries))
            tries += 1

    async def _connect(self) -> Consumer:
        ledger = self.ledger
        consumer: Consumer = ledger.open_consumer(group_id=self.group, **self.options)
        try:
            if self.group is not None and self.key is None:
                consumer.subscribe(list(self.topics), listener=_Listener(self))
                await consumer.start()
            else:
                await consumer.start()
                tps = []
                for topic in self.topics:
                    count = await ledger.partitions(topic)
                    if self.key is not None:
                        tps.append(TopicPartition(topic, partition_for(self.key, count)))
                    else:
                        tps += [TopicPartition(topic, p) for p in range(count)]
                consumer.assign(tps)
                for tp in tps:
                    if tp in self._positions:
                        consumer.seek(tp, self._positions[tp])
                    elif self.group is None:
                        # Offset 0 rather than seek_to_beginning: no broker round trip, and a
                        # start deleted by retention resets to the earliest.
                        consumer.seek(tp, 0)
                if not self.live:
                    await self._catch_up_to(consumer, tps)
        except BaseException:
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        self.consumer = consumer
        return consumer

    async def _catch_up_to(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            if await consumer.position(tp) < ends[tp]:
                self._catching_up[tp] = ends[tp]

    async def _read(self, consumer: Consumer) -> Batch:
        """One read: from the first topic still catching up, else from every partition."""
        partitions: list[TopicPartition] = []
        if self._catching_up:
            first = min(self.topics.index(tp.topic) for tp in self._catching_up)
            partitions = [tp for tp in self._catching_up if tp.topic == self.topics[first]]
        fetched = await consumer.getmany(
            *partitions,
            timeout_ms=500 if partitions else self.wait_ms,
            max_records=self.max_records,
        )
        live = not self._catching_up
        raws = [raw for got in fetched.values() for raw in got]
        batch = self._batch(live, raws)
        for tp, got in fetched.items():
            if got:
                batch.offsets[tp] = got[-1].offset + 1
        for tp in partitions:
            if await consumer.position(tp) >= self._catching_up[tp]:
                del self._catching_up[tp]
        await self._decoded(batch)
        return batch

    def _batch(self, live: bool, raws: list[Any]) -> Batch:
        return Batch(live, raws, [], {}, self)

    async def _decoded(self, batch: Batch) -> None:
        if not self.decode:
            return
        key = self.key.encode() if self.key is not None else None
        wanted = self.wanted
        decoded = self.ledger.decoded
        counts: dict[str, int] = {}
        for i, raw in enumerate(batch.raws, 1):
            if (key is not None and raw.key != key) or (wanted is not None and not wanted(raw)):
                continue
            record = decoded(raw, self.name)
            if isinstance(record, EventDecodeError):
                batch.bad.append((raw, record))
            elif record is not None:
                batch.records.append(record)
                batch.by_place[(raw.topic, raw.partition, raw.offset)] = raw
                counts[raw.topic] = counts.get(raw.topic, 0) + 1
            if self.ahead and i % DECODE_SLICE == 0:
                await asyncio.sleep(0)
        for topic, count in counts.items():
            self.ledger.consumed(topic, count)

    async def _commit(self, consumer: Consumer, offsets: dict[TopicPartition, int]) -> None:
        """Commit a handled batch to the group, through an outage; a batch whose partitions
        moved to another member meanwhile is not committed (that member reads it again)."""
        started = asyncio.get_running_loop().time()
        try:
            await retrying(
                partial(consumer.commit, offsets),
                outage=self.ledger.outage,
                transient=broker_unavailable,
                backoff=self.ledger.settings.reconnect_backoff(),
            )
        except CommitFailedError as exc:
            log.warning(
                "%s: offsets of a batch not committed (%s); it is read again", self.name, exc
            )
            return
        if self.watch is not None:
            await _heard(self.watch.committed(offsets, started))

    async def park(self, raw: Any, error: Exception | str, reason: str) -> None:
        """Park ``raw`` on the dead-letter topic (through a broker outage)."""
        ledger = self.ledger
        await retrying(
            partial(ledger.dead_letter, raw, error, self.name, reason),
            outage=ledger.outage,
            transient=broker_unavailable,
            backoff=ledger.settings.reconnect_backoff(),
        )

    # ----------------------------------------------------------------------- a group's member

    async def revoked(self, partitions: list[TopicPartition]) -> None:
        """Let the batch in hand be handled and committed before its partitions move."""
        self.rebalancing = True
        async with self._in_batch:
            for tp in partitions:
                self._positions.pop(tp, None)
                self._catching_up.pop(tp, None)
        if self.watch is not None:
            await _heard(self.watch.revoked(partitions))

    async def assigned(self, partitions: list[TopicPartition]) -> None:
        """A new assignment from the group."""
        self.generations += 1
        self.rebalancing = False
        if self.watch is not None:
            await _heard(self.watch.assigned(partitions))
