"""Appending the scheduler's decisions: one Kafka batch per partition, acks awaited per batch.

A placement pass decides thousands of events at once. ``Ledger.append_many``
sends them record by record (a producer call, a partitioner call and a future
per record), which was a quarter of the scheduler's time through Kafka. Here
the decisions are encoded by the one codec, grouped by partition into the
producer's own batches (``create_batch``/``send_batch``) and acknowledged per
batch. The guarantees are the Ledger's: its producer (``acks=all``,
idempotent), the same key -> partition mapping (:func:`partition_for`), the same
headers, and the order of one job's events kept (one partition's batches are
queued one after the other, in the order of ``events``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka.errors import KafkaError

from schemas import codec
from schemas.errors import LedgerError
from schemas.events import Event
from services.ledger import Ledger
from services.ledger.client import Appended, partition_for

_Slot = tuple[int, int]
"""(index of the batch in its partition's list, offset of the record within the batch)."""


async def append_batched(ledger: Ledger, events: Sequence[Event]) -> list[Appended]:
    """Append ``events`` in order per partition; waits for every batch. Where each one landed."""
    if not events:
        return []
    producer = ledger.producer
    batches: dict[tuple[str, int], list[Any]] = {}
    slots: list[tuple[tuple[str, int], _Slot]] = []
    counts: dict[str, int] = {}
    for event in events:
        topic = ledger.topic_of(event)
        if topic not in counts:
            counts[topic] = await ledger.partitions(topic)
        key = event.key
        tp = (topic, partition_for(key, counts[topic]))
        payload, hdrs = codec.encode(event), codec.headers(event)
        pending = batches.setdefault(tp, [])
        meta = None
        if pending:
            meta = pending[-1].append(timestamp=None, key=key.encode(), value=payload, headers=hdrs)
        if meta is None:  # no batch yet for this partition, or the last one is full
            pending.append(producer.create_batch())
            meta = pending[-1].append(timestamp=None, key=key.encode(), value=payload, headers=hdrs)
            if meta is None:  # aiokafka always takes the first record of a batch
                raise LedgerError(f"cannot batch {event.type} {event.event_id} for {tp[0]}")
        slots.append((tp, (len(pending) - 1, meta.offset)))

    async def submit(tp: tuple[str, int], builders: list[Any]) -> list[asyncio.Future[Any]]:
        futures = []
        for builder in builders:
            builder.close()  # nothing else may join a batch once it is queued
            futures.append(await producer.send_batch(builder, tp[0], partition=tp[1]))
        return futures

    try:
        submitted = await asyncio.gather(*(submit(tp, b) for tp, b in batches.items()))
        acked = {
            tp: [await f for f in futures] for tp, futures in zip(batches, submitted, strict=True)
        }
    except KafkaError as exc:
        raise LedgerError(f"the broker did not acknowledge the decisions: {exc}") from exc
    return [
        Appended(tp[0], tp[1], acked[tp][batch].offset + offset) for tp, (batch, offset) in slots
    ]
