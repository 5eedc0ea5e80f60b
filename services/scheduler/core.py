"""The scheduler's state and decisions, without Kafka or the clock.

:class:`SchedulerState` folds node-events and job-events (``observe``) and
decides (``decide(now)``): pre-flight fit for new submissions, JobQueued for
retries, placements, and NoCapacity at the queue deadline. Every decided event
is observed immediately, so the next decision in the same pass sees its
reservation, and reading it back from the topic later changes nothing.

Decided events get ids derived from the event that caused them (JobSubmitted,
RetryScheduled, JobQueued), so a restarted scheduler that re-decides the same
thing produces a duplicate, which every fold drops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from projections.evidence import number
from projections.fit import rejected
from schemas.events import (
    EVENT_TYPES,
    TERMINAL_EVENTS,
    AttemptAccepted,
    AttemptLost,
    AttemptScheduled,
    CancelRequested,
    CheckpointStored,
    ComputeReleased,
    DispatchTimedOut,
    Event,
    FailureClassified,
    JobQueued,
    JobSubmitted,
    NoCapacity,
    NodeEvent,
    RetryScheduled,
    Role,
    with_role,
)
from schemas.spec import JobSpec, carried
from schemas.types import Avoidance, CheckpointRef, FitReport
from services.scheduler.fleet import Fleet
from services.scheduler.placement import Placement, PlacementRequest, place
from services.scheduler.queue import PlacementQueue

PROCESSOR = "scheduler"
D = TypeVar("D", bound=Event)

FOLDED = with_role(Role.SCHEDULER_INPUT)
"""The events :meth:`SchedulerState.observe` folds; it ignores every other type.

Give a type :attr:`Role.SCHEDULER_INPUT` together with a branch in ``observe``: the
service skips records of any other type by their ``gridledger-type`` header, without
decoding them.
"""

FOLDED_TYPE_NAMES: frozenset[str] = frozenset(
    name for name, cls in EVENT_TYPES.items() if issubclass(cls, FOLDED)
)

FitCheck = Callable[[JobSpec, Fleet], FitReport | None]
"""Pre-flight fit of a spec against the fleet's inventory; None when the fleet is empty."""


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler's timings: when a node counts as gone, the dispatch deadline, the retry
    fallback."""

    node_timeout_s: float = 30.0
    dispatch_timeout_s: float = 60.0
    retry_fallback_s: float = 5.0
    """How long a retry waits for a node it was not told to avoid before falling back to
    an avoided provider, then an avoided node (see :mod:`.placement`)."""
    producer: str = "scheduler"
    done_kept: int = 100_000
    """Finished jobs remembered (the most recent): a record for one of them changes
    nothing. Older ones are forgotten, so the state (and its snapshot) does not grow with
    the history; a job that stored a checkpoint keeps its owner for ``resume_from``."""


log = logging.getLogger(__name__)

MAX_ANOMALIES = 100
"""Ignored records the scheduler remembers (for its log and tests)."""


@dataclass
class JobEntry:
    """What the scheduler knows about one job that is not terminal yet."""

    job_id: str
    tenant: str
    spec: JobSpec
    submitted: JobSubmitted
    phase: str = "submitted"
    """submitted, queued, scheduled, retry_pending, waiting (for the deciders), done."""
    attempt: int = 0
    """The attempt being queued or placed."""
    queued: JobQueued | None = None
    not_before: datetime | None = None
    resume_from: CheckpointRef | None = None
    avoid_nodes: frozenset[str] = frozenset()
    avoid_providers: frozenset[str] = frozenset()
    vram_gb: float | None = None
    """Per-GPU memory need from the fit report; None while the fleet was empty at submit."""
    retry: RetryScheduled | None = None
    failures: dict[int, str] = field(default_factory=dict)
    """Attempt -> the failure class it was classified with (named when avoiding its node)."""
    cancelled: bool = False
    scheduled_attempts: set[int] = field(default_factory=set)
    accepted_attempts: set[int] = field(default_factory=set)
    ended_attempts: set[int] = field(default_factory=set)


class SchedulerState:
    """Fleet, jobs, queue and reservations; see the module docstring."""

    def __init__(self, config: SchedulerConfig, fit_check: FitCheck) -> None:
        self.config = config
        self.fit_check = fit_check
        self.fleet = Fleet()
        self.jobs: dict[str, JobEntry] = {}
        self.done: dict[str, None] = {}
        """The latest ``config.done_kept`` finished jobs, oldest first."""
        self.queue = PlacementQueue()
        """Jobs waiting for placement."""
        self.pending: dict[str, None] = {}
        """Job ids with a decision to make outside the queue (pre-flight, retry queueing)."""
        self.checkpoints: dict[str, CheckpointRef] = {}
        """Latest stored checkpoint of every job (for ``spec.resume_from``)."""
        self.owners: dict[str, str] = {}
        """The tenant of every open, recently finished (:attr:`done`) or checkpointed job: a
        job resumes only from its own tenant's."""
        self.anomalies: list[str] = []
        """Records it ignored on purpose (a second JobSubmitted for a job), newest last."""
        self.epoch = 0
        """The leader epoch stamped on every decision (``projections.fence``): set by the
        service once this scheduler leads."""

    # ----------------------------------------------------------------------- observe

    def observe(self, event: Event, heard_at: datetime | None = None) -> None:
        """Fold one node- or job-event (a node event heard at ``heard_at``, see
        :meth:`Fleet.apply`). Idempotent: duplicates and replays change nothing."""
        if not isinstance(event, FOLDED):
            return
        if isinstance(event, NodeEvent):
            self.fleet.apply(event, heard_at)
            return
        if isinstance(event, CheckpointStored):
            self.checkpoints[event.job_id] = event.ref()
            return
        job_id = event.job_id
        if job_id in self.done:
            return
        if isinstance(event, JobSubmitted):
            self._on_submitted(event)
            return
        entry = self.jobs.get(job_id)
        if entry is None:
            return  # a job submitted before the topics' retention, or a foreign key
        if isinstance(event, TERMINAL_EVENTS):
            self._finish(entry)
        elif isinstance(event, JobQueued):
            self._on_queued(entry, event)
        elif isinstance(event, AttemptScheduled):
            self._on_scheduled(entry, event)
        elif isinstance(event, AttemptAccepted):
            entry.accepted_attempts.add(event.attempt)
        elif isinstance(event, DispatchTimedOut) and event.attempt in entry.accepted_attempts:
            # The node accepted before the timeout was appended: the classifier ignores the
            # timeout (log order) and the attempt holds its GPUs until it is released or lost.
            return
        elif isinstance(event, ComputeReleased | AttemptLost | DispatchTimedOut):
            entry.ended_attempts.add(event.attempt)
            self.fleet.release((job_id, event.attempt))
            if isinstance(event, AttemptLost):
                self.fleet.lost(event.node_id, event.occurred_at)
        elif isinstance(event, RetryScheduled):
            if event.next_attempt > max(entry.scheduled_attempts, default=0) and (
                entry.retry is None or event.next_attempt > entry.retry.next_attempt
            ):
                entry.retry = event
                entry.phase = "retry_pending"
                self.queue.remove(job_id)
                self.pending[job_id] = None
        elif isinstance(event, NoCapacity):
            entry.phase = "waiting"
            self.queue.remove(job_id)
        elif isinstance(event, FailureClassified):
            entry.failures.setdefault(event.attempt, event.failure_class)
        elif isinstance(event, CancelRequested):
            entry.cancelled = True
            self.queue.remove(job_id)
            self.pending.pop(job_id, None)

    def _on_submitted(self, event: JobSubmitted) -> None:
        """The first JobSubmitted of a job id makes the job; a second one with another event
        id (a collision, or a forged record of another tenant) is ignored and noted, so the
        first job keeps its spec, tenant and placement."""
        job_id = event.job_id
        first = self.jobs.get(job_id)
        if first is None and job_id not in self.owners:
            self.owners[job_id] = event.tenant
            self.jobs[job_id] = JobEntry(job_id, event.tenant, event.spec, event)
            self.pending[job_id] = None
        elif first is None or first.submitted.event_id != event.event_id:
            note = (
                f"{job_id}: a second JobSubmitted {event.event_id} (tenant {event.tenant}) "
                "ignored; the job was already submitted"
            )
            self.anomalies = [*self.anomalies[-(MAX_ANOMALIES - 1) :], note]
            log.warning("%s", note)

    def _on_queued(self, entry: JobEntry, event: JobQueued) -> None:
        attempt = max(1, event.attempt)
        if attempt in entry.scheduled_attempts or (
            entry.queued and entry.queued.attempt >= event.attempt
        ):
            return
        self.pending.pop(entry.job_id, None)
        entry.queued, entry.attempt, entry.phase = event, attempt, "queued"
        retry = entry.retry if entry.retry and entry.retry.next_attempt == event.attempt else None
        entry.not_before = retry.not_before if retry else None
        entry.resume_from = retry.resume_from if retry else None
        entry.avoid_nodes = frozenset(retry.avoid_nodes) if retry else frozenset()
        entry.avoid_providers = frozenset(retry.avoid_providers) if retry else frozenset()
        if not entry.cancelled:
            request = self.request(entry) if entry.vram_gb is not None else None
            self.queue.add(entry.job_id, event.queue_deadline, entry.not_before, request)

    def request(self, entry: JobEntry) -> PlacementRequest:
        """The placement request of the job's attempt being queued (its fit known)."""
        assert entry.vram_gb is not None
        return PlacementRequest.for_spec(
            entry.job_id,
            entry.attempt,
            entry.spec,
            entry.vram_gb,
            entry.avoid_nodes,
            entry.avoid_providers,
            self._fallback_at(entry),
        )

    def _fallback_at(self, entry: JobEntry) -> datetime | None:
        """When the retry may fall back to what it avoids: the fallback wait after it
        became placeable (queued, and its backoff over)."""
        if entry.queued is None:
            return None
        start = entry.queued.occurred_at
        if entry.not_before is not None and entry.not_before > start:
            start = entry.not_before
        return start + timedelta(seconds=self.config.retry_fallback_s)

    def _avoidance(self, entry: JobEntry, placement: Placement | None, now: datetime) -> Avoidance:
        retry = entry.retry
        failed = retry.attempt if retry is not None else entry.attempt - 1
        cls = entry.failures.get(failed, "")
        fallback_at = self._fallback_at(entry)
        placeable_since = (
            fallback_at - timedelta(seconds=self.config.retry_fallback_s) if fallback_at else now
        )
        return Avoidance(
            nodes=sorted(entry.avoid_nodes),
            providers=sorted(entry.avoid_providers),
            fell_back_to=placement.fell_back_to if placement else "",
            waited_s=round(max(0.0, (now - placeable_since).total_seconds()), 3),
            because=f"attempt {failed} failed {cls}".strip() if failed > 0 else "",
        )

    def _on_scheduled(self, entry: JobEntry, event: AttemptScheduled) -> None:
        if event.attempt in entry.scheduled_attempts:
            return
        entry.scheduled_attempts.add(event.attempt)
        entry.phase, entry.attempt = "scheduled", event.attempt
        self.queue.remove(entry.job_id)
        if event.attempt not in entry.ended_attempts:
            self.fleet.reserve(
                (entry.job_id, event.attempt), event.node_id, tuple(event.gpu_indices)
            )

    def _finish(self, entry: JobEntry) -> None:
        for attempt in entry.scheduled_attempts:
            self.fleet.release((entry.job_id, attempt))
        self.queue.remove(entry.job_id)
        self.pending.pop(entry.job_id, None)
        del self.jobs[entry.job_id]
        self.done[entry.job_id] = None
        if len(self.done) > self.config.done_kept:
            oldest = next(iter(self.done))
            del self.done[oldest]
            if oldest not in self.checkpoints:
                self.owners.pop(oldest, None)

    # ----------------------------------------------------------------------- decide

    def decide(self, now: datetime) -> list[Event]:
        """Every decision due at ``now``; each is already observed when returned."""
        out: list[Event] = []
        for job_id in list(self.pending):
            entry = self.jobs[job_id]
            self.pending.pop(job_id, None)
            decision: Event | None = None
            if entry.cancelled:
                continue  # the retry decider ends it (JobCancelled); nothing to queue
            if entry.phase == "submitted":
                decision = self._preflight(entry, now)
            elif entry.phase == "retry_pending" and entry.retry is not None:
                decision = self._requeue(entry, entry.retry, now)
            if decision is not None:
                out.append(decision)
                self.observe(decision)
        out.extend(self._place_queue(now))
        return out

    def _decided(
        self, cls: type[D], cause: Event, now: datetime, suffix: str = "", **fields: Any
    ) -> D:
        """A decision on ``cause`` made ``now`` by this scheduler instance (named in
        ``producer``; the id names only the scheduler, so any instance derives the same)."""
        return cls.derived(
            cause,
            PROCESSOR,
            suffix,
            occurred_at=now,
            producer=self.config.producer,
            leader_epoch=self.epoch,
            **fields,
        )

    def _preflight(self, entry: JobEntry, now: datetime) -> Event:
        submitted = entry.submitted
        report = self.fit_check(entry.spec, self.fleet)
        if report is not None and not report.fits:
            return rejected(
                submitted,
                report,
                by=PROCESSOR,
                producer=self.config.producer,
                now=now,
                leader_epoch=self.epoch,
            )
        entry.vram_gb = report.required_vram_gb if report is not None else None
        deadline = submitted.occurred_at + timedelta(seconds=entry.spec.limits.queue_timeout_s)
        return self._decided(
            JobQueued,
            submitted,
            now,
            attempt=0,
            queue_deadline=deadline,
            reason="waiting for capacity"
            if report is not None
            else "waiting for capacity (no node registered yet; fit checked when one is)",
        )

    def _requeue(self, entry: JobEntry, retry: RetryScheduled, now: datetime) -> JobQueued:
        start = max(retry.not_before, now)
        return self._decided(
            JobQueued,
            retry,
            now,
            attempt=retry.next_attempt,
            queue_deadline=start + timedelta(seconds=entry.spec.limits.queue_timeout_s),
            reason=f"retry of attempt {retry.attempt}: {retry.reason}".rstrip(": "),
        )

    def _place_queue(self, now: datetime) -> list[Event]:
        out: list[Event] = []
        for job_id in self.queue.expired(now):
            entry = self.jobs[job_id]
            assert entry.queued is not None
            out.append(self._no_capacity(entry, entry.queued, now))
            self.observe(out[-1])
        self.queue.release_due(now)
        for job_id in self.queue.unfitted():
            entry = self.jobs[job_id]
            assert entry.queued is not None
            report = self.fit_check(entry.spec, self.fleet)
            if report is None:
                break  # still no node registered
            if not report.fits:
                # Derived from the JobQueued, like its placement: a suffix of its own.
                late = rejected(
                    entry.queued,
                    report,
                    by=PROCESSOR,
                    producer=self.config.producer,
                    now=now,
                    suffix="reject",
                    leader_epoch=self.epoch,
                )
                out.append(late)
                self.observe(out[-1])
                continue
            entry.vram_gb = report.required_vram_gb
            self.queue.fitted(job_id, self.request(entry))
        for job_id in self.queue.heads():
            entry = self.jobs[job_id]
            request = self.queue.request_of(job_id)
            assert request is not None and entry.queued is not None
            placement = place(self.fleet, request, now, self.config.node_timeout_s)
            if placement is None:
                self.queue.skip(job_id)
                continue
            out.append(self._scheduled(entry, entry.queued, placement, now))
            self.observe(out[-1])
        return out

    def _scheduled(
        self, entry: JobEntry, queued: JobQueued, placement: Placement, now: datetime
    ) -> AttemptScheduled:
        avoidance = (
            self._avoidance(entry, placement, now)
            if entry.avoid_nodes or entry.avoid_providers
            else None
        )
        resume = entry.resume_from
        source = entry.spec.resume_from
        # Only a checkpoint of the tenant's own job (the API refuses others with a 404;
        # this holds for a record that did not come through it).
        if (
            resume is None
            and entry.attempt == 1
            and source
            and self.owners.get(source) == entry.tenant
        ):
            resume = self.checkpoints.get(source)
        return self._decided(
            AttemptScheduled,
            queued,
            now,
            attempt=entry.attempt,
            node_id=placement.node_id,
            provider=placement.provider,
            region=placement.region,
            gpu_count=len(placement.gpu_indices),
            gpu_model=placement.gpu_model,
            gpu_indices=list(placement.gpu_indices),
            dispatch_deadline=now + timedelta(seconds=self.config.dispatch_timeout_s),
            **carried(entry.spec, entry.submitted.spec_digest),
            tenant=entry.tenant,
            resume_from=resume,
            avoidance=avoidance,
            reason=placement_reason(placement, avoidance, self.config.retry_fallback_s),
        )

    def _no_capacity(self, entry: JobEntry, queued: JobQueued, now: datetime) -> NoCapacity:
        spec = entry.spec
        need = f"{spec.resources.gpus} GPU(s)"
        if entry.vram_gb:
            need += f" with at least {entry.vram_gb:.1f} GiB each"
        if spec.resources.gpu_models:
            need += f" of {', '.join(spec.resources.gpu_models)}"
        detail = f"no live node had {need} free before the queue deadline"
        if entry.avoid_nodes or entry.avoid_providers:
            avoided = self._avoidance(entry, None, now)
            because = f", where {avoided.because}" if avoided.because else ""
            detail += (
                f" (a retry avoiding {_avoided_words(avoided)}{because}; after "
                f"{number(self.config.retry_fallback_s)} s it was offered those too, but no "
                "node was live, not suspect and free)"
            )
        if spec.placement.avoid_nodes:
            detail += f" (the job avoids {', '.join(sorted(spec.placement.avoid_nodes))})"
        return self._decided(
            NoCapacity,
            queued,
            now,
            "no-capacity",
            queued_since=queued.occurred_at,
            queue_deadline=queued.queue_deadline,
            detail=detail,
        )


def _avoided_words(avoidance: Avoidance) -> str:
    parts = []
    if avoidance.nodes:
        parts.append(f"node{'s' if len(avoidance.nodes) > 1 else ''} {', '.join(avoidance.nodes)}")
    if avoidance.providers:
        many = len(avoidance.providers) > 1
        parts.append(f"provider{'s' if many else ''} {', '.join(avoidance.providers)}")
    return " and ".join(parts)


def placement_reason(placement: Placement, avoidance: Avoidance | None, fallback_s: float) -> str:
    """The placement in one sentence: what it avoided and why, and what it fell back to."""
    where = f"node {placement.node_id}" + (
        f" (provider {placement.provider})" if placement.provider else ""
    )
    if avoidance is None:
        return ""
    avoided = _avoided_words(avoidance)
    because = f", where {avoidance.because}" if avoidance.because else ""
    if avoidance.fell_back_to == "provider":
        return (
            f"avoided {avoided}{because}; no node of another provider could hold it within "
            f"{number(fallback_s)} s, so it fell back to provider {placement.provider} on "
            f"{where}"
        )
    if avoidance.fell_back_to == "node":
        return (
            f"avoided {avoided}{because}; no other node could hold it within "
            f"{number(fallback_s)} s, so it fell back to the same {where}, which is live "
            "and not suspect"
        )
    return f"placed on {where}, avoiding {avoided}{because}"
