"""Fill bench topics with simulated job histories (pre-encoded, sent without per-record waits)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from schemas import codec
from schemas.events import Event
from schemas.spec import JobSpec
from services.clock import utcnow
from services.ledger import Ledger
from services.simulator.histories import SPEC, job_history
from services.simulator.mix import JobMix

BENCH_MIX = JobMix.parse("success=80,user_error=10,oom=10", duration="2-6")


@dataclass
class Encoded:
    """One record ready to send: topic, key, value and headers already encoded."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    job_id: str
    last: bool = False
    """The last event of its job's history."""


@dataclass
class Loaded:
    """What a load sent: events and jobs."""

    events: int = 0
    jobs: int = 0
    by_topic: Counter[str] = field(default_factory=Counter)


def histories(
    count: int, prefix: str = "job", mix: JobMix = BENCH_MIX, spec: JobSpec = SPEC
) -> list[list[Event]]:
    """Job histories until at least ``count`` events (each job 15-30 events)."""
    out: list[list[Event]] = []
    total, i = 0, 0
    end = utcnow()
    while total < count:
        h = job_history(f"{prefix}-{i:07d}", end + timedelta(milliseconds=i), mix, spec=spec)
        out.append(h)
        total += len(h)
        i += 1
    return out


def encode(ledger: Ledger, jobs: list[list[Event]]) -> list[Encoded]:
    """The records of simulated histories, encoded once, so sending measures only the broker."""
    out = []
    for history in jobs:
        for n, event in enumerate(history):
            out.append(
                Encoded(
                    ledger.topic_of(event),
                    event.key.encode(),
                    codec.encode(event),
                    codec.headers(event),
                    event.job_id,
                    n == len(history) - 1,
                )
            )
    return out


async def send(ledger: Ledger, records: list[Encoded]) -> Loaded:
    """Send every record (per-key order kept by the producer), then flush."""
    loaded = Loaded()
    producer = ledger.producer
    for r in records:
        await producer.send(r.topic, value=r.value, key=r.key, headers=r.headers)
        loaded.events += 1
        loaded.by_topic[r.topic] += 1
        loaded.jobs += r.last
    await producer.flush()
    return loaded


async def load(ledger: Ledger, count: int, prefix: str = "job") -> Loaded:
    """Append ``count`` simulated job histories to the ledger."""
    return await send(ledger, encode(ledger, histories(count, prefix)))
