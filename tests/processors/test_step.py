"""The processors' batch step on the FakeLedger (no Kafka, no faust).

- Facts fed one at a time (each derived event read back before the next fact, as
  the scheduler and agents would) give exactly the derived events of
  ``decisions.settle``; the last published view and accounting record equal the
  pure folds of the resulting history.
- The same records in batches of 1, 7 and 1000 give the same derived events, views
  and records: batching changes nothing.
- An undecodable record is dead-lettered once and the batch goes on; so is one that
  decodes but that a processor cannot apply (``unapplicable``, with the error).
"""

from __future__ import annotations

import logging
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS, settle
from projections.history import unique
from projections.job_state import project
from schemas import codec
from schemas.errors import LedgerError
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptHeartbeat,
    Event,
    FailureClassified,
    JobSubmitted,
    MeterTick,
    ProcessExited,
)
from services.ledger.client import DLQ_CONSUMER, DLQ_ERROR, DLQ_REASON
from services.processors import build_processors
from services.settings import Settings
from services.simulator.histories import job_history
from services.simulator.mix import JobMix
from tests.fakes.feed import Feed
from tests.fakes.ledger import FakeLedger
from tests.golden.golden import fixture_paths, load
from tests.processors.harness import breaks_the_retry_decider, submitted

SETTINGS = Settings(topic_prefix="step-test.", job_partitions=3)
TOPIC = SETTINGS.topic


def worker(ledger: FakeLedger) -> Any:
    processors = build_processors(ledger.settings, ledger=ledger)
    now = datetime.now(UTC)
    for partition in range(SETTINGS.job_partitions):
        processors.store.loaded_at[partition] = now  # nothing to rebuild: the ledger is new
    return processors


async def fake(settings: Settings = SETTINGS) -> FakeLedger:
    return await FakeLedger(settings).start()


CONSUMED = (TOPIC("job-events"), TOPIC("meter-ticks"), TOPIC("heartbeats"))


_FEEDS: weakref.WeakKeyDictionary[Any, Feed] = weakref.WeakKeyDictionary()


async def drain(processors: Any, ledger: FakeLedger, size: int) -> None:
    """Every unread record of the consumed topics through the worker's step, ``size`` at a
    time, through the one subscription (decoded, undecodable ones parked there)."""
    if processors not in _FEEDS:
        _FEEDS[processors] = Feed(ledger, CONSUMED, processors.step.consumer_name, size)
    await _FEEDS[processors].drain(processors.step.run)


def outcome(ledger: FakeLedger, job_id: str) -> tuple[list[Event], Any, Any]:
    history = list(unique(ledger.values(TOPIC("job-events"), job_id)))
    views = ledger.values(TOPIC("job-state"), job_id)
    records = ledger.values(TOPIC("accounting"), job_id)
    return history, views[-1] if views else None, records[-1] if records else None


def is_fact(event: Event) -> bool:
    return event.producer not in DECISION_PRODUCERS


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: p.stem)
async def test_facts_one_at_a_time_give_the_settled_history_and_its_folds(path):
    events, ticks, _ = load(path)
    facts = [e for e in events if is_fact(e)]
    ledger = await fake()
    processors = worker(ledger)
    for fact in facts:
        await ledger.append(fact)
        await drain(processors, ledger, 1000)
    for tick in ticks:
        await ledger.append(tick)
    await drain(processors, ledger, 1000)
    job_id = facts[0].job_id
    history, view, record = outcome(ledger, job_id)
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
        ledger = await fake()
        processors = worker(ledger)
        for history in histories:
            for event in history:
                await ledger.append(event)
        await drain(processors, ledger, size)
        outcomes.append({h[0].job_id: outcome(ledger, h[0].job_id) for h in histories})
    assert outcomes[0] == outcomes[1] == outcomes[2]
    for history in histories:
        events, view, record = outcomes[0][history[0].job_id]
        ticks = [e for e in history if isinstance(e, MeterTick)]
        assert len([e for e in events if isinstance(e, TERMINAL_EVENTS)]) == 1
        assert view == project(events) and view.terminal_at is not None
        assert record == account(events, ticks) and record.final


async def test_an_undecodable_record_is_dead_lettered_once_and_the_batch_goes_on():
    ledger = await fake()
    processors = worker(ledger)
    job = JobSubmitted(
        job_id="job-x",
        occurred_at=datetime.now(UTC),
        producer="api/test",
        tenant="t",
        spec={"image": "busybox", "command": ["true"]},
    )
    await ledger.send_raw(TOPIC("job-events"), b"job-x", b"\xc3\x01 garbage", [])
    await ledger.append(job)
    await drain(processors, ledger, 1000)
    parked = [r async for r in ledger.read_raw(TOPIC("dead-letter"))]
    assert [dict(r.headers)[DLQ_CONSUMER].decode() for r in parked] == [
        "processors/dispatch+state+watchdog+classifier+accounting"
    ]
    assert outcome(ledger, "job-x")[1] == project([job])


async def test_a_record_a_processor_cannot_apply_is_parked_with_its_error_and_the_batch_goes_on():
    ledger = await fake()
    processors = worker(ledger)
    poisoned, after = submitted("job-poisoned"), submitted("job-after")
    await ledger.append(poisoned)
    await ledger.append(breaks_the_retry_decider(poisoned))
    await ledger.append(after)
    await drain(processors, ledger, 1000)
    [parked] = [r async for r in ledger.read_raw(TOPIC("dead-letter"))]
    headers = {name: value.decode() for name, value in parked.headers}
    assert (headers[DLQ_REASON], headers[DLQ_ERROR]) == ("unapplicable", "date value out of range")
    assert parked.value is not None
    assert isinstance(codec.decode(parked.value), FailureClassified)
    # Every other record, of the same job and of the next, is applied as before.
    assert outcome(ledger, "job-after")[1] == project([after])
    assert outcome(ledger, "job-poisoned")[1].status == "submitted"


@pytest.mark.parametrize("path", fixture_paths()[:4], ids=lambda p: p.stem)
async def test_a_broker_outage_is_waited_out_and_changes_nothing(path, monkeypatch, caplog):
    events, ticks, _ = load(path)
    facts = [e for e in events if is_fact(e)]
    quick = SETTINGS.model_copy(update={"reconnect_initial_s": 0.001, "reconnect_max_s": 0.005})
    ledger = await fake(quick)
    processors = worker(ledger)
    with caplog.at_level(logging.INFO):
        for n, fact in enumerate(facts):
            await ledger.append(fact)
            if n == 1:
                ledger.refuse(times=7)  # every send of this batch fails 7 times first
            await drain(processors, ledger, 1000)
    assert ledger.refused == 7
    history, view, _ = outcome(ledger, facts[0].job_id)
    assert [e for e in history if not is_fact(e)] == [e for e in settle(facts) if not is_fact(e)]
    assert view == project(history)
    said = [r.getMessage() for r in caplog.records if "Kafka at" in r.getMessage()]
    assert len(said) == 2, said  # one line when it goes, one when it is back
    assert "unreachable" in said[0] and "KafkaConnectionError" in said[0]
    assert "is back" in said[1]


async def test_an_error_that_is_not_an_outage_still_stops_the_batch():
    ledger = await fake()
    processors = worker(ledger)
    job = JobSubmitted(
        job_id="job-y",
        occurred_at=datetime.now(UTC),
        producer="api/test",
        tenant="t",
        spec={"image": "busybox", "command": ["true"]},
    )
    await ledger.append(job)
    ledger.refuse(LedgerError("a bug: record too large"))
    with pytest.raises(LedgerError, match="too large"):
        await drain(processors, ledger, 1000)
    assert ledger.refused == 1, "a bug is not retried"


async def test_a_running_worker_keeps_only_the_latest_settled_jobs_and_reloads_one_on_a_record():
    mix = JobMix.parse("success=60,user_error=20,oom=20", duration="2-4")
    end = datetime.now(UTC)
    histories = [job_history(f"job-{i}", end + timedelta(milliseconds=i), mix) for i in range(12)]
    published = []
    for keep in (len(histories), 2):
        ledger = await fake()
        processors = worker(ledger)
        processors.store.keep_settled = keep
        for history in histories:
            for event in history:
                await ledger.append(event)
        await drain(processors, ledger, 7)
        published.append({h[0].job_id: outcome(ledger, h[0].job_id) for h in histories})
    # Dropping settled jobs changes nothing anyone reads, and holds 2 jobs instead of 12.
    assert published[0] == published[1]
    store = processors.store
    assert len(store.jobs) == 2 and len(store.settled) == 10

    job_id = min(store.settled)
    dropped = next(h for h in histories if h[0].job_id == job_id)
    assert job_id not in store.jobs
    # A heartbeat for a settled job is not worth reloading its history for.
    beat = next(e for e in dropped if isinstance(e, AttemptHeartbeat))
    await ledger.append(beat.model_copy(update={"event_id": "late-beat", "seq": beat.seq + 99}))
    await drain(processors, ledger, 7)
    assert job_id not in store.jobs
    # A job-event for it (here a redelivered exit) reloads the history first: the worker
    # decides nothing twice and publishes what it published before.
    exited = next(e for e in dropped if isinstance(e, ProcessExited))
    derived = len(ledger.values(TOPIC("job-events"), job_id))
    await ledger.append(exited)
    await drain(processors, ledger, 7)
    assert job_id in store.jobs
    assert len(ledger.values(TOPIC("job-events"), job_id)) == derived + 1  # the redelivery only
    history, view, record = outcome(ledger, job_id)
    assert (view, record) == published[0][job_id][1:]
    assert view == project(history)
