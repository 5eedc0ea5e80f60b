"""The processors' batch step on an in-memory broker (no Kafka, no faust).

- Facts fed one at a time (each derived event read back before the next fact, as
  the scheduler and agents would) give exactly the derived events of
  ``decisions.settle``; the last published view and accounting record equal the
  pure folds of the resulting history.
- The same records in batches of 1, 7 and 1000 give the same derived events, views
  and records: batching changes nothing.
- An undecodable record is dead-lettered once and the batch goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS, settle
from projections.history import unique
from projections.job_state import project
from schemas import codec
from schemas.errors import EventDecodeError, LedgerError
from schemas.events import TERMINAL_EVENTS, Event, JobSubmitted, MeterTick
from services.ledger.client import DLQ_CONSUMER, partition_for
from services.processors import build_processors
from services.settings import Settings
from services.simulator.histories import job_history
from services.simulator.mix import JobMix
from tests.golden.golden import fixture_paths, load

SETTINGS = Settings(topic_prefix="step-test.", job_partitions=3)
TOPIC = SETTINGS.topic


class Broker:
    """Partitioned in-memory logs with one reader position per partition."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[SimpleNamespace]] = {}
        self.read: dict[tuple[str, int], int] = {}

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, headers: Any = None
    ) -> asyncio.Future[SimpleNamespace]:
        partition = partition_for(key.decode() if key else "", SETTINGS.job_partitions)
        log = self.logs.setdefault((topic, partition), [])
        log.append(
            SimpleNamespace(
                topic=topic,
                partition=partition,
                offset=len(log),
                key=key,
                value=value,
                headers=headers or [],
            )
        )
        done: asyncio.Future[SimpleNamespace] = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(topic=topic, partition=partition, offset=len(log) - 1))
        return done

    def take(self, topics: tuple[str, ...], most: int) -> list[SimpleNamespace]:
        """Up to ``most`` unread records, round-robin over partitions (per-partition order)."""
        out: list[SimpleNamespace] = []
        while len(out) < most:
            before = len(out)
            for (topic, partition), log in sorted(self.logs.items()):
                at = self.read.get((topic, partition), 0)
                if topic in topics and at < len(log) and len(out) < most:
                    out.append(log[at])
                    self.read[(topic, partition)] = at + 1
            if len(out) == before:
                break
        return out

    def values(self, topic: str, key: str) -> list[Any]:
        """The decodable values of ``key`` on ``topic``, in log order."""
        partition = partition_for(key, SETTINGS.job_partitions)
        out = []
        for r in self.logs.get((topic, partition), []):
            if r.key == key.encode() and r.value is not None:
                with contextlib.suppress(EventDecodeError):
                    out.append(codec.decode(r.value))
        return out


def worker(broker: Broker, settings: Settings = SETTINGS) -> Any:
    processors = build_processors(settings)
    processors.ledger._producer = broker  # type: ignore[assignment]
    now = datetime.now(UTC)
    for partition in range(SETTINGS.job_partitions):
        processors.store.loaded_at[partition] = now  # nothing to rebuild: the broker is new
    return processors


CONSUMED = (TOPIC("job-events"), TOPIC("meter-ticks"), TOPIC("heartbeats"))


async def drain(processors: Any, broker: Broker, size: int) -> None:
    while batch := broker.take(CONSUMED, size):
        await processors.step.run(batch)


async def append(broker: Broker, event: Event) -> None:
    await broker.send(TOPIC(type(event).TOPIC), value=codec.encode(event), key=event.key.encode())


def outcome(broker: Broker, job_id: str) -> tuple[list[Event], Any, Any]:
    history = unique(broker.values(TOPIC("job-events"), job_id))
    views = broker.values(TOPIC("job-state"), job_id)
    records = broker.values(TOPIC("accounting"), job_id)
    return history, views[-1] if views else None, records[-1] if records else None


def is_fact(event: Event) -> bool:
    return event.producer not in DECISION_PRODUCERS


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: p.stem)
async def test_facts_one_at_a_time_give_the_settled_history_and_its_folds(path):
    events, ticks, _ = load(path)
    facts = [e for e in events if is_fact(e)]
    broker = Broker()
    processors = worker(broker)
    for fact in facts:
        await append(broker, fact)
        await drain(processors, broker, 1000)
    for tick in ticks:
        await append(broker, tick)
    await drain(processors, broker, 1000)
    job_id = facts[0].job_id
    history, view, record = outcome(broker, job_id)
    expected = [e for e in settle(facts) if not is_fact(e)]
    assert [e for e in history if not is_fact(e)] == expected
    assert view == project(history)
    assert record == account(history, ticks)


async def test_batch_sizes_change_nothing():
    mix = JobMix.parse("success=60,user_error=20,oom=20", duration="2-4")
    end = datetime.now(UTC)
    histories = [job_history(f"job-{i}", end + timedelta(milliseconds=i), mix) for i in range(12)]
    outcomes = []
    for size in (1, 7, 1000):
        broker = Broker()
        processors = worker(broker)
        for history in histories:
            for event in history:
                await append(broker, event)
        await drain(processors, broker, size)
        outcomes.append({h[0].job_id: outcome(broker, h[0].job_id) for h in histories})
    assert outcomes[0] == outcomes[1] == outcomes[2]
    for history in histories:
        events, view, record = outcomes[0][history[0].job_id]
        ticks = [e for e in history if isinstance(e, MeterTick)]
        assert len([e for e in events if isinstance(e, TERMINAL_EVENTS)]) == 1
        assert view == project(events) and view.terminal_at is not None
        assert record == account(events, ticks) and record.final


async def test_an_undecodable_record_is_dead_lettered_once_and_the_batch_goes_on():
    broker = Broker()
    processors = worker(broker)
    job = JobSubmitted(
        job_id="job-x",
        occurred_at=datetime.now(UTC),
        producer="api/test",
        tenant="t",
        spec={"image": "busybox", "command": ["true"]},
    )
    await broker.send(TOPIC("job-events"), value=b"\xc3\x01 garbage", key=b"job-x")
    await append(broker, job)
    await drain(processors, broker, 1000)
    parked = [
        r for (topic, _), log in broker.logs.items() if topic == TOPIC("dead-letter") for r in log
    ]
    assert [dict(r.headers)[DLQ_CONSUMER].decode() for r in parked] == [
        "processors/dispatch+state+watchdog+classifier+accounting"
    ]
    assert outcome(broker, "job-x")[1] == project([job])


class FlakyBroker(Broker):
    """A broker that refuses the next ``down`` sends (as an unreachable one does)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = 0
        self.refused = 0

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, headers: Any = None
    ) -> asyncio.Future[SimpleNamespace]:
        if self.down:
            self.down -= 1
            self.refused += 1
            raise KafkaConnectionError("Unable to connect to 127.0.0.1:9092")
        return await super().send(topic, value, key, headers)


@pytest.mark.parametrize("path", fixture_paths()[:4], ids=lambda p: p.stem)
async def test_a_broker_outage_is_waited_out_and_changes_nothing(path, monkeypatch, caplog):
    events, ticks, _ = load(path)
    facts = [e for e in events if is_fact(e)]
    broker = FlakyBroker()
    quick = SETTINGS.model_copy(update={"reconnect_initial_s": 0.001, "reconnect_max_s": 0.005})
    processors = worker(broker, quick)
    processors.ledger.idempotent = False  # keep the fake producer across failures
    with caplog.at_level(logging.INFO):
        for n, fact in enumerate(facts):
            await append(broker, fact)
            broker.down = 7 if n == 1 else 0  # every send of this batch fails 7 times first
            await drain(processors, broker, 1000)
    assert broker.refused == 7
    history, view, _ = outcome(broker, facts[0].job_id)
    assert [e for e in history if not is_fact(e)] == [e for e in settle(facts) if not is_fact(e)]
    assert view == project(history)
    said = [r.getMessage() for r in caplog.records if "Kafka at" in r.getMessage()]
    assert len(said) == 2, said  # one line when it goes, one when it is back
    assert "unreachable" in said[0] and "KafkaConnectionError" in said[0]
    assert "is back" in said[1]


async def test_an_error_that_is_not_an_outage_still_stops_the_batch():
    broker = FlakyBroker()
    processors = worker(broker)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise LedgerError("a bug: record too large")

    broker.send = refuse  # type: ignore[method-assign]
    job = JobSubmitted(
        job_id="job-y",
        occurred_at=datetime.now(UTC),
        producer="api/test",
        tenant="t",
        spec={"image": "busybox", "command": ["true"]},
    )
    await Broker.send(broker, TOPIC("job-events"), value=codec.encode(job), key=b"job-y")
    with pytest.raises(LedgerError, match="too large"):
        await drain(processors, broker, 1000)
