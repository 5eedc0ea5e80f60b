"""Builders of literal job histories, as the api, scheduler, agent and watchdog write them.

``JobHistory`` stamps envelopes (readable, deterministic event ids and a clock
that only moves when the test says so), generates the meter ticks of held
compute, and, when ``live`` is on, appends what the classifier and the retry
decider derive (``projections.decisions.react``) right after each fact, the
way the live processors would.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from projections.decisions import react
from projections.fit import NodeCapacity, check_fit, rejected
from schemas.events import (
    AttemptAccepted,
    AttemptCancelled,
    AttemptHeartbeat,
    AttemptLost,
    AttemptResponsive,
    AttemptScheduled,
    AttemptUnresponsive,
    CancelRequested,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    ContainerStartFailed,
    DispatchTimedOut,
    Event,
    FinishingTimedOut,
    ImageResolved,
    ImageUnavailable,
    JobQueued,
    JobRejected,
    JobSubmitted,
    MeterTick,
    NoCapacity,
    OutputFailed,
    OutputStored,
    ProcessExited,
)
from schemas.spec import JobSpec, carried, spec_digest
from schemas.types import CheckpointRef, GpuDevice

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
GIB = 1024**3
E = TypeVar("E", bound=Event)


def job_spec(**overrides: Any) -> JobSpec:
    """A small training job: one GPU, writes model.pt, checkpoints under ckpt/."""
    data: dict[str, Any] = {
        "name": "train-small",
        "image": "gridledger/trainer:1.0",
        "command": ["python", "train.py"],
        "resources": {"gpus": 1, "memory_gb": 16},
        "outputs": [{"path": "model.pt"}],
        "checkpoints": "ckpt",
    }
    data.update(overrides)
    return JobSpec.model_validate(data)


def fleet(*nodes: tuple[str, str, int, int]) -> list[NodeCapacity]:
    """Nodes as (node_id, gpu model, GPU count, GiB per GPU)."""
    return [
        NodeCapacity(
            node_id=node_id,
            provider="aws",
            region="us-east-1",
            gpus=[GpuDevice(index=i, model=model, memory_total_mb=gib * 1024) for i in range(n)],
        )
        for node_id, model, n, gib in nodes
    ]


class JobHistory:
    """One job's history under construction. Methods return the event they appended."""

    def __init__(
        self,
        job_id: str = "job-1",
        spec: JobSpec | None = None,
        *,
        tenant: str = "acme",
        start: datetime = T0,
        live: bool = True,
        tick_s: float = 30.0,
    ) -> None:
        self.job_id, self.tenant, self.live, self.tick_s = job_id, tenant, live, tick_s
        self.spec = spec or job_spec()
        self.events: list[Event] = []
        self.ticks: list[MeterTick] = []
        self.heartbeats: list[AttemptHeartbeat] = []
        self.now = start
        self.attempt = 0
        self.node = ""
        self.gpu_count = 0
        self.gpu_model = ""
        self._seq = 0
        self._holding = False
        self._node_alive = True
        self._heartbeats_on = True
        self._ticked_until = start
        self._tick_index = 0
        self._last_heartbeat: datetime | None = None

    # ------------------------------------------------------------------ plumbing

    def wait(self, seconds: float) -> JobHistory:
        """Let time pass; held compute keeps ticking while its node is alive."""
        self.now += timedelta(seconds=seconds)
        if self._holding and self._node_alive:
            self._tick_to(self.now, final=False)
            if self._heartbeats_on:
                self._last_heartbeat = self.now
        return self

    def emit(self, cls: type[E], producer: str, attempt: int | None = None, **fields: Any) -> E:
        self._seq += 1
        event = cls(
            event_id=f"{self.job_id}-{self._seq:03d}",
            job_id=self.job_id,
            attempt=self.attempt if attempt is None else attempt,
            occurred_at=self.now,
            producer=producer,
            **fields,
        )
        return self.add(event)

    def add(self, event: E) -> E:
        """Append an event built elsewhere (by a production builder), reacting if live."""
        self.events.append(event)
        if self.live:
            pending: list[Event] = [event]
            while pending:
                new = react(self.events, pending.pop(0))
                self.events += new
                pending += new
        return event

    def _tick_to(self, until: datetime, final: bool) -> None:
        while self._ticked_until + timedelta(seconds=self.tick_s) <= until:
            self._tick(self.tick_s, final=False)
        if final:
            self._tick((until - self._ticked_until).total_seconds(), final=True)

    def _tick(self, interval_s: float, final: bool) -> None:
        self._seq += 1
        self.ticks.append(
            MeterTick(
                event_id=f"{self.job_id}-t{self._seq:03d}",
                job_id=self.job_id,
                attempt=self.attempt,
                occurred_at=self._ticked_until + timedelta(seconds=interval_s),
                producer=f"agent/{self.node}",
                node_id=self.node,
                tick_index=self._tick_index,
                interval_start=self._ticked_until,
                interval_s=interval_s,
                gpu_count=self.gpu_count,
                gpu_model=self.gpu_model,
                gpu_seconds=interval_s * self.gpu_count,
                final=final,
            )
        )
        self._tick_index += 1
        self._ticked_until += timedelta(seconds=interval_s)

    @property
    def agent(self) -> str:
        return f"agent/{self.node}"

    # ------------------------------------------------------------------ api

    def submit(self) -> JobSubmitted:
        return self.emit(
            JobSubmitted,
            "api",
            tenant=self.tenant,
            submitter="alice",
            spec=self.spec,
            spec_digest=spec_digest(self.spec),
        )

    def reject_for_fit(self, nodes: list[NodeCapacity]) -> JobRejected:
        """The scheduler's pre-flight rejection, built as production builds it."""
        report = check_fit(self.spec, nodes)
        assert not report.fits, report
        (submitted,) = (e for e in self.events if isinstance(e, JobSubmitted))
        return self.add(
            rejected(submitted, report, by="scheduler", producer="scheduler", now=self.now)
        )

    def cancel(self, reason: str = "no longer needed") -> CancelRequested:
        return self.emit(
            CancelRequested, "api", requested_by="alice", reason=reason, node_id=self.node
        )

    # ------------------------------------------------------------------ scheduler

    def queue(self, timeout_s: float = 600) -> JobQueued:
        attempt = 0 if self.attempt == 0 else self.attempt + 1
        self._queue_attempt = attempt
        self._queued_at = self.now
        deadline = self.now + timedelta(seconds=timeout_s)
        return self.emit(JobQueued, "scheduler", attempt=attempt, queue_deadline=deadline)

    def no_capacity(self) -> NoCapacity:
        return self.emit(
            NoCapacity,
            "scheduler",
            attempt=self._queue_attempt,
            queued_since=self._queued_at,
            queue_deadline=self.now,
            detail="all 2 nodes with A10G GPUs were busy",
        )

    def schedule(
        self,
        node: str = "node-a",
        provider: str = "aws",
        gpus: int = 1,
        model: str = "A10G",
        resume_from: CheckpointRef | None = None,
        region: str = "us-east-1",
    ) -> AttemptScheduled:
        self.attempt += 1
        self.node, self.gpu_count, self.gpu_model = node, gpus, model
        self._node_alive = self._heartbeats_on = True
        return self.emit(
            AttemptScheduled,
            "scheduler",
            node_id=node,
            provider=provider,
            region=region,
            gpu_count=gpus,
            gpu_model=model,
            gpu_indices=list(range(gpus)),
            dispatch_deadline=self.now + timedelta(seconds=60),
            **carried(self.spec),
            tenant=self.tenant,
            resume_from=resume_from,
        )

    # ------------------------------------------------------------------ agent

    def accept(self) -> AttemptAccepted:
        return self.emit(AttemptAccepted, self.agent, node_id=self.node)

    def hold(self) -> ComputeHeld:
        self._holding, self._ticked_until, self._tick_index = True, self.now, 0
        self._last_heartbeat = self.now
        return self.emit(
            ComputeHeld,
            self.agent,
            node_id=self.node,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            gpu_indices=list(range(self.gpu_count)),
        )

    def image_ok(self) -> ImageResolved:
        return self.emit(ImageResolved, self.agent, image=self.spec.image, image_id="sha256:abc")

    def image_unavailable(self, reason: str, message: str) -> ImageUnavailable:
        return self.emit(
            ImageUnavailable, self.agent, image=self.spec.image, reason=reason, message=message
        )

    def container_started(self) -> ContainerStarted:
        return self.emit(
            ContainerStarted, self.agent, container_id=f"c-{self.attempt}", node_id=self.node
        )

    def start_failed(self, kind: str, message: str) -> ContainerStartFailed:
        return self.emit(ContainerStartFailed, self.agent, error_kind=kind, message=message)

    def start(self, **schedule: Any) -> JobHistory:
        """Queue (when needed), schedule, accept, hold, resolve the image, start the container."""
        self.schedule(**schedule)
        self.wait(2).accept()
        self.hold()
        self.wait(3).image_ok()
        self.wait(1).container_started()
        return self

    def exit(
        self,
        code: int = 0,
        logs: tuple[str, ...] = (),
        *,
        oom_killed: bool = False,
        signal: int | None = None,
        runtime_exceeded: bool = False,
    ) -> ProcessExited:
        return self.emit(
            ProcessExited,
            self.agent,
            exit_code=code,
            signal=signal,
            oom_killed=oom_killed,
            runtime_s=60.0,
            last_log_lines=list(logs),
            runtime_exceeded=runtime_exceeded,
            memory_limit_bytes=int(self.spec.resources.memory_gb * GIB),
        )

    def checkpoint(self, name: str, step: int) -> CheckpointStored:
        return self.emit(
            CheckpointStored,
            self.agent,
            name=name,
            step=step,
            uri=f"file:///artifacts/{self.job_id}/{self.attempt}/{name}",
            sha256=f"sha-{name}",
            bytes=1_000_000,
        )

    def output(self, path: str = "model.pt") -> OutputStored:
        uri = f"file:///artifacts/{self.job_id}/{self.attempt}/{path}"
        return self.emit(OutputStored, self.agent, path=path, uri=uri, sha256="sha-out", bytes=42)

    def output_failed(
        self, path: str, reason: str, message: str = "", required: bool = True
    ) -> OutputFailed:
        return self.emit(
            OutputFailed, self.agent, path=path, reason=reason, required=required, message=message
        )

    def release(self, reason: str = "exited") -> ComputeReleased:
        if self._holding and self._node_alive:
            self._tick_to(self.now, final=True)
        self._holding = False
        return self.emit(ComputeReleased, self.agent, node_id=self.node, reason=reason)

    def attempt_cancelled(self) -> AttemptCancelled:
        return self.emit(AttemptCancelled, self.agent, node_id=self.node)

    def heartbeat(self) -> AttemptHeartbeat:
        """A heartbeat on its own topic (kept apart from the job-events)."""
        self._seq += 1
        beat = AttemptHeartbeat(
            event_id=f"{self.job_id}-h{self._seq:03d}",
            job_id=self.job_id,
            attempt=self.attempt,
            occurred_at=self.now,
            producer=self.agent,
            node_id=self.node,
            seq=len(self.heartbeats),
        )
        self.heartbeats.append(beat)
        return beat

    def node_dies(self) -> JobHistory:
        """The node vanishes: no more heartbeats, ticks or agent events."""
        self._node_alive = False
        return self

    def heartbeats_pause(self) -> JobHistory:
        """Heartbeats stop reaching Kafka (a network blip); the meter keeps spooling."""
        self._heartbeats_on = False
        return self

    def unheard_node_returns(self) -> JobHistory:
        """The node declared lost was only unheard (a broker outage): it held the GPUs all
        along, and its spooled facts and meter ticks now arrive."""
        self._holding = self._node_alive = self._heartbeats_on = True
        self._last_heartbeat = self.now
        return self

    def late(self, attempt: int, node: str) -> JobHistory:
        """Emit the following agent facts for an earlier ``attempt`` on ``node`` (its spool
        delivering after a verdict); :meth:`current` switches back."""
        self._current = (self.attempt, self.node, self._holding, self._ticked_until)
        self._current_ticks = self._tick_index
        earlier = [t for t in self.ticks if t.attempt == attempt]
        self.attempt, self.node, self._holding = attempt, node, True
        self._ticked_until = earlier[-1].occurred_at if earlier else self.now
        self._tick_index = len(earlier)
        return self

    def current(self) -> JobHistory:
        self.attempt, self.node, self._holding, self._ticked_until = self._current
        self._tick_index = self._current_ticks
        return self

    def heartbeats_resume(self) -> JobHistory:
        self._heartbeats_on = True
        self._last_heartbeat = self.now
        return self

    # ------------------------------------------------------------------ watchdog

    def unresponsive(self, lost_after_s: float = 60) -> AttemptUnresponsive:
        last = self._last_heartbeat or self.now
        return self.emit(
            AttemptUnresponsive,
            "watchdog",
            node_id=self.node,
            last_heartbeat_at=last,
            silence_s=(self.now - last).total_seconds(),
            lost_deadline=self.now + timedelta(seconds=lost_after_s),
        )

    def responsive(self) -> AttemptResponsive:
        return self.emit(AttemptResponsive, "watchdog", node_id=self.node, silence_s=45.0)

    def lost(self) -> AttemptLost:
        self._holding = False
        return self.emit(
            AttemptLost,
            "watchdog",
            node_id=self.node,
            last_heartbeat_at=self._last_heartbeat,
            deadline=self.now,
        )

    def dispatch_timed_out(self) -> DispatchTimedOut:
        return self.emit(DispatchTimedOut, "watchdog", node_id=self.node, deadline=self.now)

    def finishing_timed_out(self) -> FinishingTimedOut:
        return self.emit(FinishingTimedOut, "watchdog", node_id=self.node, deadline=self.now)
