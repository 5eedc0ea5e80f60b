"""What is composed of the port's few operations, written once over any ledger.

:class:`~services.ledger.port.LedgerPort` holds only what a ledger must do itself
(append, subscribe, read a topic to its end, lease, ...). Everything a service or a test
builds from those is a plain function here, taking the port: the Kafka ledger and the
in-memory one (``tests/fakes/ledger.py``) share it, so neither carries a copy and the
contract tests (``tests/ledger/test_contract.py``) hold both to the same answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

from schemas.events import Event
from services.backoff import retrying
from services.ledger.client import decode, partition_for
from services.ledger.errors import broker_unavailable
from services.ledger.port import Appended, LedgerPort, LedgerRecord, RawRecord


async def read_partitions(
    ledger: LedgerPort,
    topic: str,
    partitions: Iterable[int] | None = None,
    consumer_name: str = "reader",
    dead_letter: bool = False,
) -> AsyncIterator[LedgerRecord]:
    """Every decodable value of ``topic`` from its start to its end as of the call; one that
    does not decode is skipped (or, with ``dead_letter``, parked by its owner)."""
    async for raw in ledger.read_raw(topic, partitions):
        record = await decode(ledger, raw, consumer_name, dead_letter)
        if record is not None:
            yield record


async def read_latest(
    ledger: LedgerPort,
    topic: str,
    partitions: Iterable[int] | None = None,
    consumer_name: str = "reader",
) -> dict[str, LedgerRecord]:
    """Key -> its latest decodable value on a compacted topic, up to its end now.

    Only the last record of each key is decoded (a tombstone removes the key): before
    the broker compacts a segment, a key's older versions are still there to read.
    """
    latest: dict[bytes, RawRecord] = {}
    async for raw in ledger.read_raw(topic, partitions):
        if raw.value is None:
            latest.pop(raw.key or b"", None)
        else:
            latest[raw.key or b""] = raw
    out: dict[str, LedgerRecord] = {}
    for raw in latest.values():
        record = await decode(ledger, raw, consumer_name, dead_letter=False)
        if record is not None:
            out[record.key] = record
    return out


async def history(ledger: LedgerPort, key: str, topic_suffix: str = "job-events") -> list[Event]:
    """One job's (or node's) events on a topic (by suffix), in order, read from its
    partition."""
    topic = ledger.settings.topic(topic_suffix)
    partition = partition_for(key, await ledger.partitions(topic))
    wanted = key.encode()
    out: list[Event] = []
    async for raw in ledger.read_raw(topic, [partition]):
        if raw.key == wanted:
            record = await decode(ledger, raw, "history", dead_letter=False)
            if record is not None and isinstance(record.value, Event):
                out.append(record.value)
    return out


async def follow(
    ledger: LedgerPort,
    topic_suffix: str,
    *,
    key: str | None = None,
    consumer_name: str = "follower",
) -> AsyncIterator[LedgerRecord]:
    """Follow a topic live from its beginning (no group); with ``key``, only that key's
    values. A reader that only looks: a record that does not decode is skipped (its
    topic's owner parks it), and an outage is waited out as by any subscription."""
    topics = [ledger.settings.topic(topic_suffix)]
    async with ledger.subscribe(topics, name=consumer_name, key=key, parks=False) as live:
        async for batch in live:
            for record in batch.records:
                yield record


async def append_until_acked(ledger: LedgerPort, events: Sequence[Event]) -> list[Appended]:
    """``ledger.append_many(events)``, retried with backoff while the broker is unavailable.

    For services whose state already assumes the events are on the ledger (the
    scheduler's placements, the processors' decisions): they wait the outage out
    instead of dropping or crashing. Events keep their ids across retries, so an
    append that did land before its acknowledgement was lost is a duplicate every
    consumer drops.
    """
    return await retrying(
        lambda: ledger.append_many(events),
        outage=ledger.outage,
        transient=broker_unavailable,
        backoff=ledger.settings.reconnect_backoff(),
    )
