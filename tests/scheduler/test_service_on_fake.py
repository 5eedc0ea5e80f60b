"""The scheduler service on the FakeLedger: the same loop, no broker.

The scheduler takes a ledger port (``build_scheduler(settings, ledger=...)``); on
the fake it rebuilds from the log, places a job on a scripted node and, restarted,
decides nothing twice. tests/scheduler/test_service.py holds the same scenario
against the real broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections.job_state import project
from schemas.events import AttemptScheduled, Event, JobQueued, JobRejected, RecordRefused
from schemas.spec import spec_digest
from services.ledger import compose
from services.ledger.client import DLQ_CONSUMER, DLQ_ERROR, DLQ_REASON, encoded, record_bytes
from services.scheduler import build_scheduler
from services.settings import Settings
from tests.fakes.ledger import FakeLedger
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import fast, submitted, wait_history
from tests.waiting import eventually


def placements(history: Sequence[Event]) -> list[AttemptScheduled]:
    return [e for e in history if isinstance(e, AttemptScheduled)]


async def test_the_scheduler_places_on_the_fake_ledger_and_a_restart_decides_nothing_twice(
    settings: Settings,
) -> None:
    ledger = await FakeLedger(fast(settings.model_copy(update={"topic_prefix": "fake."}))).start()
    node = await ScriptedNode(ledger, "node-a", gpus=1).start(heartbeats=False)
    await node.node_heartbeat()
    job = submitted()
    await ledger.append(job)
    first = build_scheduler(ledger.settings, ledger=ledger)
    await first.start()
    try:
        await first.wait_ready()
        placed = await wait_history(
            ledger, job.job_id, lambda h: bool(placements(h)), what="placement"
        )
    finally:
        await first.stop()
    second = build_scheduler(ledger.settings, ledger=ledger)
    await second.start()
    try:
        await second.wait_ready()
        rounds = second.rounds
        # Decision rounds pass (on the timer) without a second placement or queueing.
        await eventually(lambda: second.rounds >= rounds + 3, what="decision rounds")
        assert second.state.fleet.reservations == {(job.job_id, 1): ("node-a", (0,))}
    finally:
        await second.stop()
        await node.stop()
    history = await compose.history(ledger, job.job_id)
    (scheduled,) = placements(history)
    assert (scheduled.node_id, scheduled.gpu_indices) == ("node-a", [0])
    assert len([e for e in history if isinstance(e, JobQueued)]) == 1
    assert placements(placed) == [scheduled]


async def test_a_record_the_scheduler_cannot_apply_is_parked_and_the_next_job_is_placed(
    settings: Settings,
) -> None:
    """Whatever makes the state raise on a record (a bug hostile input reaches) parks that
    record as unapplicable, naming its job, instead of a crash that every restart's rebuild
    would hit again; another tenant's job is placed as usual."""
    ledger = await FakeLedger(fast(settings.model_copy(update={"topic_prefix": "fake."}))).start()
    node = await ScriptedNode(ledger, "node-a", gpus=1).start(heartbeats=False)
    await node.node_heartbeat()
    poison, victim = submitted("job-poison"), submitted("job-victim")
    await ledger.append_many([poison, victim])
    scheduler = build_scheduler(ledger.settings, ledger=ledger)
    observe = scheduler.state.observe

    def fragile(event: Event, heard: Any = None) -> Any:
        if event.job_id == poison.job_id:
            raise ArithmeticError("a state bug this job's record reaches")
        return observe(event, heard)

    scheduler.state.observe = fragile  # type: ignore[method-assign,assignment]
    await scheduler.start()
    try:
        await scheduler.wait_ready()
        await wait_history(
            ledger, victim.job_id, lambda h: bool(placements(h)), what="the victim's placement"
        )
        history = await wait_history(
            ledger,
            poison.job_id,
            lambda h: any(isinstance(e, JobRejected) for e in h),
            what="the parked job's end",
        )
    finally:
        await scheduler.stop()
        await node.stop()
    # The parked job still ends, once, and says whose side it is on.
    (rejected,) = [e for e in history if isinstance(e, JobRejected)]
    assert rejected.failure_class == "record_refused"
    assert "dead-letter" in rejected.advice
    assert project(history).status == "rejected"
    (parked,) = [r async for r in ledger.read_raw(ledger.settings.topic("dead-letter"))]
    headers = dict(parked.headers)
    assert headers[DLQ_REASON] == b"unapplicable"
    assert headers[DLQ_CONSUMER] == b"scheduler"
    assert parked.key == poison.job_id.encode()
    assert b"a state bug" in headers[DLQ_ERROR]


async def test_the_placement_of_the_largest_spec_fits_where_its_submission_just_does(
    settings: Settings,
) -> None:
    """The spec is stored once: a placement carries its digest, image, resources and limits,
    not the spec, so under a limit the submission just fits the placement is appended and
    nothing is parked (the node's command, which carries the spec, is the processors':
    tests/processors/test_record_limits.py)."""
    job = submitted(
        "job-huge", env={"A": "a" * 30_000, "B": "b" * 30_000}, command=["sh", "-c", "c" * 60_000]
    )
    submitted_bytes = record_bytes(encoded([("t", job.key, job)])[0])
    base = fast(settings.model_copy(update={"topic_prefix": "fake."}))
    ledger = await FakeLedger(
        base.model_copy(update={"kafka_max_message_bytes": submitted_bytes + 64})
    ).start()
    node = await ScriptedNode(ledger, "node-a", gpus=1).start(heartbeats=False)
    await node.node_heartbeat()
    await ledger.append(job)
    scheduler = build_scheduler(ledger.settings, ledger=ledger)
    await scheduler.start()
    try:
        await scheduler.wait_ready()
        history = await wait_history(
            ledger, job.job_id, lambda h: bool(placements(h)), what="the placement"
        )
    finally:
        await scheduler.stop()
        await node.stop()
    (placed,) = placements(history)
    assert placed.spec is None and placed.spec_digest == spec_digest(job.spec)
    assert (placed.image, placed.resources, placed.limits) == (
        job.spec.image,
        job.spec.resources,
        job.spec.limits,
    )
    assert record_bytes(encoded([("t", placed.key, placed)])[0]) < 2048
    assert not any(isinstance(e, RecordRefused) for e in history)
    assert [r async for r in ledger.read_raw(ledger.settings.topic("dead-letter"))] == []
