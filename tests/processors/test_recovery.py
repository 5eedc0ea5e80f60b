"""Crash recovery and idempotence of the processors on the real broker (issue 5).

- The processors worker is a subprocess SIGKILLed mid-stream and started again:
  every job still ends with exactly one terminal event, no derived event is
  appended twice, and the accounting records equal the pure recomputation
  (and, for jobs already final before the kill, the records published before it).
- Every input fact appended twice, then the whole history appended again after
  the end, changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from projections.accounting import account
from projections.job_state import project
from schemas.events import AttemptScheduled, MeterTick
from services.ledger import Ledger, compose
from services.ledger.client import DLQ_CONSUMER, DLQ_ERROR, DLQ_REASON, partition_for
from services.settings import Settings
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import (
    FAST,
    breaks_the_retry_decider,
    fast,
    latest,
    services,
    submitted,
    terminals,
    wait_history,
    wait_latest,
    wait_processed,
    wait_terminal,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DERIVED_PRODUCERS = ("classifier", "retry-decider", "watchdog", "dispatch")


def worker(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    """``gridledger processors`` as a subprocess for the test's topics and app id."""
    env = dict(os.environ)
    env.update({f"GRIDLEDGER_{k.upper()}": str(v) for k, v in FAST.items()})
    env.update(
        GRIDLEDGER_HOME=str(settings.home),
        GRIDLEDGER_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        GRIDLEDGER_TOPIC_PREFIX=settings.topic_prefix,
        GRIDLEDGER_PROCESSORS_APP_ID=settings.processors_app_id,
    )
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "processors", "--log-level", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def serve_node(node: ScriptedNode, failing: set[str]) -> None:
    """Run every attempt the node is given: a checkpoint, ~1 s of work, then exit."""

    async def one(scheduled: AttemptScheduled) -> None:
        run = await node.accept(scheduled)
        await run.checkpoint("step-1", step=1)
        await asyncio.sleep(0.6 + (hash(scheduled.job_id) % 5) / 10)
        if scheduled.job_id in failing:
            await run.finish(
                exit_code=1, last_log_lines=["ModuleNotFoundError: No module named 'x'"]
            )
        else:
            await run.finish(exit_code=0)

    tasks = []
    try:
        while True:
            tasks.append(asyncio.create_task(one(await node.next_command(AttemptScheduled, 120))))
    finally:
        for task in tasks:
            task.cancel()


async def test_sigkill_of_the_worker_mid_stream_loses_and_duplicates_nothing(topics, tmp_path):
    settings = fast(topics)
    log = tmp_path / "processors.log"
    jobs = [submitted() for _ in range(8)]
    failing = {jobs[1].job_id, jobs[6].job_id}
    proc = worker(settings, log)
    async with services(settings, processors=False), Ledger(settings, "test") as ledger:
        nodes = [await ScriptedNode(ledger, f"node-{i}", gpus=4).start() for i in range(2)]
        serving = [asyncio.create_task(serve_node(n, failing)) for n in nodes]
        try:
            await ledger.append_many(jobs[:4])
            # Mid-stream: one job is done, the others are still running or deciding.
            await wait_terminal(ledger, jobs[0].job_id, timeout=45)
            before = {}
            for job in jobs[:4]:
                record = await latest(ledger, "accounting", job.job_id)
                if record is not None and record.final:
                    before[job.job_id] = record
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            killed_at = time.monotonic()
            await ledger.append_many(jobs[4:])  # submitted while no processor runs
            proc = worker(settings, log)
            histories = {}
            for job in jobs:
                histories[job.job_id] = await wait_terminal(ledger, job.job_id, timeout=60)
            records = {}
            for job in jobs:
                ticks = [
                    e
                    for e in await compose.history(ledger, job.job_id, "meter-ticks")
                    if isinstance(e, MeterTick)
                ]
                expected = account(histories[job.job_id], ticks)
                records[job.job_id] = await wait_latest(
                    ledger, "accounting", job.job_id, partial(operator.eq, expected), timeout=30
                )
            # A late duplicate would be on the ledger once the worker committed everything.
            await wait_processed(settings, ledger)
            final_histories = {j.job_id: await compose.history(ledger, j.job_id) for j in jobs}
        finally:
            for task in serving:
                task.cancel()
            for node in nodes:
                await node.stop()
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
            if proc.poll() is None:
                proc.kill()
    assert time.monotonic() - killed_at < 90
    for job in jobs:
        history = final_histories[job.job_id]
        assert len(terminals(history)) == 1, [e.type for e in history]
        derived = [e.event_id for e in history if e.producer.split("/")[0] in DERIVED_PRODUCERS]
        assert len(derived) == len(set(derived)), "a derived event was appended twice"
        expected_status = "failed" if job.job_id in failing else "succeeded"
        assert records[job.job_id].status == expected_status and records[job.job_id].final
    for job_id, record in before.items():
        assert records[job_id] == record, "accounting of a finished job changed after restart"
    assert before, "no job was final before the kill; the test did not kill mid-stream"


async def test_duplicated_input_events_change_nothing(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a", gpus=1, dup=True).start()
        try:
            job = submitted()
            await ledger.append_many([job, job])
            run = await node.accept(await node.next_command(AttemptScheduled))
            await run.checkpoint("step-1")
            await asyncio.sleep(0.5)
            await run.finish(exit_code=0)
            history = await wait_terminal(ledger, job.job_id)
            ticks = [
                e
                for e in await compose.history(ledger, job.job_id, "meter-ticks")
                if isinstance(e, MeterTick)
            ]
            record = await wait_latest(
                ledger, "accounting", job.job_id, lambda r: r == account(history, ticks)
            )
            view = await wait_latest(
                ledger, "job-state", job.job_id, lambda v: v == project(history)
            )
            # The whole history once more, after the end: nothing new may follow.
            ids = {e.event_id for e in history}
            await ledger.append_many(history)
            await ledger.append_many(ticks)
            await wait_processed(settings, ledger)
            again = await wait_history(
                ledger, job.job_id, lambda h: len(h) >= 2 * len(history), what="replayed copy"
            )
            record_after = await latest(ledger, "accounting", job.job_id)
            view_after = await latest(ledger, "job-state", job.job_id)
        finally:
            await node.stop()
    assert len(terminals(history)) == 1
    assert len({e.event_id for e in history if isinstance(e, AttemptScheduled)}) == 1
    assert {e.event_id for e in again} == ids, "duplicates caused new events"
    assert record_after == record and view_after == view
    assert record.final and record.metered_gpu_seconds == pytest.approx(
        record.gpu_seconds, abs=0.01
    )
    assert view.status == "succeeded" and len(view.attempts) == 1


async def test_an_undecodable_record_is_dead_lettered_once_and_processing_goes_on(topics):
    settings = fast(topics)
    async with services(settings), Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a").start()
        try:
            job = submitted()
            await ledger.send_raw(
                settings.topic("job-events"), job.job_id.encode(), b"\xc3\x01 garbage", []
            )
            await ledger.append(job)
            run = await node.accept(await node.next_command(AttemptScheduled))
            await run.finish(exit_code=0)
            history = await wait_terminal(ledger, job.job_id)
            # Both consumers are past the garbage: the scheduler placed the job behind it,
            # and the processors park a record before they commit its offset.
            await wait_processed(settings, ledger)
            consumer = ledger.consumer(settings.topic("dead-letter"))
            await consumer.start()
            try:
                batch = await consumer.getmany(timeout_ms=3000)
            finally:
                await consumer.stop()
        finally:
            await node.stop()
    assert len(terminals(history)) == 1
    consumers = [dict(r.headers)[DLQ_CONSUMER].decode() for rs in batch.values() for r in rs]
    # Each live consumer parks the record once (readers of history may park it again).
    assert [c for c in consumers if c.startswith("processors")] == [
        "processors/dispatch+state+watchdog+classifier+accounting"
    ]
    assert consumers.count("scheduler") == 1


async def test_a_record_a_processor_cannot_apply_is_parked_and_processing_goes_on(topics):
    settings = fast(topics)
    poisoned = submitted()
    # The next job in the same partition: a worker stopped by the poison would never get to it.
    partitions = settings.job_partitions
    after = next(
        job
        for job in (submitted() for _ in range(1000))
        if partition_for(job.job_id, partitions) == partition_for(poisoned.job_id, partitions)
    )
    async with (
        services(settings, scheduler=False) as (_, processors),
        Ledger(settings, "test") as ledger,
    ):
        await ledger.append_many([poisoned, breaks_the_retry_decider(poisoned), after])
        view = await wait_latest(ledger, "job-state", after.job_id, lambda v: True)
        await wait_processed(settings, ledger)  # committed past the poison, not stopped on it
        assert processors is not None and not processors.crashed.is_set()
        parked = [
            {name: value.decode() for name, value in r.headers}
            async for r in ledger.read_raw(settings.topic("dead-letter"))
        ]
    assert view.status == "submitted"
    assert [(h[DLQ_CONSUMER], h[DLQ_REASON], h[DLQ_ERROR]) for h in parked] == [
        (
            "processors/dispatch+state+watchdog+classifier+accounting",
            "unapplicable",
            "date value out of range",
        )
    ]
