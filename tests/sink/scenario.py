"""Scripted facts of whole jobs, appended with the Ledger so tests need no other service.

Times come from ``T0`` plus offsets, so every run writes the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from schemas.events import (
    AttemptAccepted,
    AttemptScheduled,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    Event,
    FailureClassified,
    ImageResolved,
    JobFailed,
    JobQueued,
    JobSubmitted,
    JobSucceeded,
    LeaderElected,
    LogChunk,
    MeterTick,
    NodeHeartbeat,
    NodeRegistered,
    ProcessExited,
)
from schemas.spec import JobSpec, Resources
from schemas.types import Evidence, GpuDevice, GpuUsage
from services.ledger import LedgerPort, compose, partition_for
from services.scheduler.leader import route_key

T0 = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
SPEC = JobSpec(
    name="train",
    image="gridledger/python:latest",
    command=["python3", "train.py"],
    resources=Resources(gpus=1),
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Script:
    """One job's facts per topic."""

    job_id: str
    job_events: list[Event] = field(default_factory=list)
    log_chunks: list[LogChunk] = field(default_factory=list)
    meter_ticks: list[MeterTick] = field(default_factory=list)

    def all(self) -> list[Event]:
        return [*self.job_events, *self.log_chunks, *self.meter_ticks]


def submitted(job_id: str, tenant: str = "dev", start: float = 0.0) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id, occurred_at=at(start), producer="api/test", tenant=tenant, spec=SPEC
    )


def run_facts(
    job_id: str,
    *,
    start: float = 0.0,
    exit_code: int = 0,
    node: str = "node-a",
    lines: int = 3,
    ticks: int = 3,
    submit: bool = True,
    tenant: str = "dev",
    finish: bool = True,
    exited: bool = True,
    leader_epoch: int = 0,
) -> Script:
    """A job that runs once on ``node`` and exits with ``exit_code``.

    The scheduler's decisions carry ``leader_epoch``: beside a running scheduler, pass
    :func:`epoch_in_force`, or every reader drops them as a deposed leader's.

    With ``finish`` the terminal decision is appended too (JobSucceeded, or
    FailureClassified + JobFailed), as the processors would.
    """
    s = Script(job_id)
    t = start
    a = 1
    if submit:
        s.job_events.append(submitted(job_id, tenant, t))
    s.job_events += [
        JobQueued(
            job_id=job_id,
            occurred_at=at(t + 1),
            producer="scheduler/test",
            queue_deadline=at(t + 600),
            leader_epoch=leader_epoch,
        ),
        AttemptScheduled(
            job_id=job_id,
            attempt=a,
            occurred_at=at(t + 2),
            producer="scheduler/test",
            node_id=node,
            gpu_count=1,
            gpu_model="A100-80GB",
            dispatch_deadline=at(t + 62),
            spec=SPEC,
            tenant=tenant,
            leader_epoch=leader_epoch,
        ),
        AttemptAccepted(
            job_id=job_id, attempt=a, occurred_at=at(t + 3), producer=f"agent/{node}", node_id=node
        ),
        ComputeHeld(
            job_id=job_id,
            attempt=a,
            occurred_at=at(t + 4),
            producer=f"agent/{node}",
            node_id=node,
            gpu_count=1,
            gpu_model="A100-80GB",
        ),
        ImageResolved(
            job_id=job_id,
            attempt=a,
            occurred_at=at(t + 5),
            producer=f"agent/{node}",
            image=SPEC.image,
        ),
        ContainerStarted(
            job_id=job_id,
            attempt=a,
            occurred_at=at(t + 6),
            producer=f"agent/{node}",
            container_id="c0ffee",
            node_id=node,
        ),
    ]
    last_lines = [f"step {i}" for i in range(lines)]
    if exit_code:
        last_lines.append("ModuleNotFoundError: No module named 'transformers'")
    for i, line in enumerate(last_lines):
        s.log_chunks.append(
            LogChunk(
                job_id=job_id,
                attempt=a,
                occurred_at=at(t + 7 + i * 0.1),
                producer=f"agent/{node}",
                stream="stdout",
                seq=i,
                first_line=i + 1,
                line_count=1,
                data=line + "\n",
            )
        )
    for i in range(ticks):
        s.meter_ticks.append(
            MeterTick(
                job_id=job_id,
                attempt=a,
                occurred_at=at(t + 14 + i * 10),
                producer=f"agent/{node}",
                node_id=node,
                tick_index=i,
                interval_start=at(t + 4 + i * 10),
                interval_s=10.0,
                gpu_count=1,
                gpu_model="A100-80GB",
                gpu_seconds=10.0,
                final=i == ticks - 1,
            )
        )
    end = t + 4 + ticks * 10
    if not exited:
        return s
    s.job_events += [
        ProcessExited(
            job_id=job_id,
            attempt=a,
            occurred_at=at(end),
            producer=f"agent/{node}",
            exit_code=exit_code,
            runtime_s=end - t - 6,
            last_log_lines=last_lines[-3:],
        ),
        ComputeReleased(
            job_id=job_id,
            attempt=a,
            occurred_at=at(end + 0.5),
            producer=f"agent/{node}",
            node_id=node,
            reason="exited",
        ),
    ]
    if finish:
        s.job_events += terminal(job_id, exit_code, end + 1)
    return s


def terminal(job_id: str, exit_code: int, t: float) -> list[Event]:
    if exit_code == 0:
        return [
            JobSucceeded(job_id=job_id, attempt=1, occurred_at=at(t), producer="processors/test")
        ]
    classified = FailureClassified(
        job_id=job_id,
        attempt=1,
        occurred_at=at(t),
        producer="processors/test",
        failure_class="missing_module",
        attribution="user",
        retryable=False,
        summary="the container is missing the Python module 'transformers'",
        advice="add transformers to the image (pip install transformers) and resubmit",
        evidence=Evidence(
            rule_id="missing_module",
            exit_code=exit_code,
            log_lines=["ModuleNotFoundError: No module named 'transformers'"],
        ),
        rule_id="missing_module",
        classifier_version="test",
    )
    failed = JobFailed(
        job_id=job_id,
        attempt=1,
        occurred_at=at(t + 0.1),
        producer="processors/test",
        failure_class="missing_module",
        attribution="user",
        summary=classified.summary,
        advice=classified.advice,
        reason="not retryable",
    )
    return [classified, failed]


def node_facts(node: str = "node-a") -> list[Event]:
    gpus = [GpuDevice(index=0, model="A100-80GB", memory_total_mb=81920)]
    return [
        NodeRegistered(
            node_id=node,
            occurred_at=at(-10),
            producer=f"agent/{node}",
            provider="local",
            region="lab",
            inventory_source="declared",
            inventory_note="NVML unavailable: driver not loaded",
            gpus=gpus,
            host_memory_mb=64000,
        ),
        NodeHeartbeat(
            node_id=node,
            occurred_at=at(-5),
            producer=f"agent/{node}",
            seq=0,
            free_gpu_indices=[0],
            gpus=[GpuUsage(index=0)],
        ),
        NodeHeartbeat(
            node_id=node,
            occurred_at=at(0),
            producer=f"agent/{node}",
            seq=1,
            free_gpu_indices=[],
            running_attempts=["job-1/1"],
            gpus=[GpuUsage(index=0)],
        ),
    ]


async def epoch_in_force(ledger: LedgerPort, job_id: str) -> int:
    """The leader epoch in force on ``job_id``'s partition of ``job-events`` (its highest
    fence marker; 0 before any): what a decision written beside a running scheduler needs."""
    topic = ledger.settings.topic("job-events")
    count = await ledger.partitions(topic)
    markers = await compose.history(ledger, route_key(partition_for(job_id, count), count))
    return max((m.epoch for m in markers if isinstance(m, LeaderElected)), default=0)
