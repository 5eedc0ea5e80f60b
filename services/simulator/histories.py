"""Whole job histories at once, for load generation (pipeline, replay and sink benchmarks).

A history is what the scheduler and a simulated agent would append for one job
(JobSubmitted, JobQueued, AttemptScheduled, then the attempt's facts from
:class:`.facts.AttemptFacts` with heartbeats, log chunks and meter ticks), with
timestamps laid out over the job's duration ending at ``end``. Only outcomes
that need no watchdog are generated here (node losses need real time to pass:
use :class:`.fleet.SimFleet` for those).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from schemas.events import AttemptScheduled, Event, JobQueued, JobSubmitted
from schemas.spec import JobSpec, carried, spec_digest
from services.simulator.facts import AttemptFacts, Outcome
from services.simulator.mix import JobMix

SPEC = JobSpec(image="sim/train:latest", command=["python", "train.py"])


def job_history(
    job_id: str,
    end: datetime,
    mix: JobMix,
    *,
    node_id: str = "sim-00000",
    heartbeat_s: float = 1.0,
    tick_s: float = 1.0,
    spec: JobSpec = SPEC,
) -> list[Event]:
    """Every event of one single-attempt job, in append order, the last one at ``end``."""
    outcome = mix.outcome(job_id, 1)
    if outcome == Outcome.NODE_LOST:
        outcome = Outcome.SUCCESS
    duration = mix.duration_s(job_id, 1)
    t0 = end - timedelta(seconds=duration + 0.2)
    submitted = JobSubmitted(
        job_id=job_id,
        occurred_at=t0,
        producer="api/sim",
        tenant="sim",
        spec=spec,
        spec_digest=spec_digest(spec),
    )
    queued = JobQueued.derived(
        submitted,
        "scheduler",
        "queued",
        occurred_at=t0 + timedelta(milliseconds=50),
        queue_deadline=t0 + timedelta(seconds=600),
    )
    scheduled = AttemptScheduled.derived(
        queued,
        "scheduler",
        "1",
        attempt=1,
        occurred_at=t0 + timedelta(milliseconds=100),
        node_id=node_id,
        provider="sim-a",
        region="sim-a-r0",
        gpu_count=1,
        gpu_model="A100-80GB",
        gpu_indices=[0],
        dispatch_deadline=t0 + timedelta(seconds=60),
        **carried(spec, submitted.spec_digest),
        tenant="sim",
    )
    facts = AttemptFacts(scheduled.for_node(spec), node_id, tick_s)
    held = t0 + timedelta(milliseconds=200)
    events: list[Event] = [submitted, queued, scheduled, *facts.start(held)]
    at = held + timedelta(seconds=heartbeat_s)
    step = 0
    while at < end:
        step += 1
        events += [facts.heartbeat(at), facts.log(at, [f"step {step}"]), *facts.due_ticks(at)]
        at += timedelta(seconds=heartbeat_s)
    return events + facts.finish(end, outcome)
