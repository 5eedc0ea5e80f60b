"""A restarted processors worker catches up from the compacted topics' snapshot.

Jobs that are settled (terminal and accounted for) in the published views are not
read back into the worker's store at restart; a record for one of them that
arrives later makes the worker read that job's history first, so what it then
publishes is what a worker that read everything would have published.
"""

from __future__ import annotations

import operator
from functools import partial

import pytest

from projections.accounting import account
from projections.job_state import project
from schemas.events import AttemptScheduled, Event, JobSubmitted, MeterTick, ProcessExited
from services.ledger import Ledger, compose
from services.ledger.client import partition_for
from services.settings import Settings
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import (
    fast,
    latest,
    services,
    submitted,
    wait_history,
    wait_latest,
    wait_processed,
    wait_terminal,
)

pytestmark = pytest.mark.integration


def jobs_on_one_partition(settings: Settings, count: int) -> list[JobSubmitted]:
    """``count`` new jobs whose ids all fall on partition 0 of the job-keyed topics."""
    out: list[JobSubmitted] = []
    while len(out) < count:
        job = submitted()
        if partition_for(job.job_id, settings.job_partitions) == 0:
            out.append(job)
    return out


async def run_to_the_end(ledger: Ledger, node: ScriptedNode, jobs: list[JobSubmitted]) -> None:
    await ledger.append_many(jobs)
    for _ in jobs:
        run = await node.accept(await node.next_command(AttemptScheduled))
        await run.finish(exit_code=0)
    for job in jobs:
        history = await wait_terminal(ledger, job.job_id, timeout=45)
        ticks = await compose.history(ledger, job.job_id, "meter-ticks")
        expected = account(history, [t for t in ticks if isinstance(t, MeterTick)])
        await wait_latest(ledger, "accounting", job.job_id, partial(operator.eq, expected))
        await wait_latest(ledger, "job-state", job.job_id, partial(operator.eq, project(history)))


async def test_a_restarted_worker_skips_settled_jobs_until_a_record_for_one_arrives(
    topics: Settings,
) -> None:
    # Settled jobs are dropped at restart only: this test counts which ones the restart
    # skipped, so the running worker keeps every settled job it loads.
    settings = fast(topics).model_copy(update={"processors_keep_settled": 4096})
    done, (late_job,) = jobs_on_one_partition(settings, 3), jobs_on_one_partition(settings, 1)
    async with Ledger(settings, "test") as ledger:
        node = await ScriptedNode(ledger, "node-a", gpus=4).start()
        try:
            async with services(settings):
                await run_to_the_end(ledger, node, done)
                await wait_processed(settings, ledger)
            histories = {job.job_id: await compose.history(ledger, job.job_id) for job in done}
            published = {job.job_id: await latest(ledger, "job-state", job.job_id) for job in done}
            accounted = {job.job_id: await latest(ledger, "accounting", job.job_id) for job in done}

            async with services(settings) as (_, processors):
                assert processors is not None
                store = processors.store
                # A new job on the same partition makes the new worker rebuild it.
                await run_to_the_end(ledger, node, [late_job])
                settled_at_restart = set(store.settled)
                held_at_restart = {job.job_id for job in done} & set(store.jobs)

                # A late copy of a settled job's ProcessExited (a redelivery, say).
                again = done[0].job_id
                exited = next(e for e in histories[again] if isinstance(e, ProcessExited))
                await ledger.append(exited)
                await wait_history(
                    ledger, again, lambda h: len(h) > len(histories[again]), what="late copy"
                )
                await wait_processed(settings, ledger)
                loaded: list[Event] = store.log(again).read()
                still_settled = set(store.settled)
            view_after = await latest(ledger, "job-state", again)
            record_after = await latest(ledger, "accounting", again)
            history_after = await compose.history(ledger, again)
        finally:
            await node.stop()

    assert settled_at_restart == {job.job_id for job in done}
    assert held_at_restart == set(), "a settled job's history was read at restart"
    assert still_settled == {job.job_id for job in done[1:]}
    once = list(dict.fromkeys(e.event_id for e in histories[again]))
    assert [e.event_id for e in loaded] == once
    # As a worker that had read everything: the duplicate changes nothing.
    assert {e.event_id for e in history_after} == {e.event_id for e in histories[again]}
    assert view_after == published[again] == project(histories[again])
    assert record_after == accounted[again]
