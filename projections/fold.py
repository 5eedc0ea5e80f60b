"""The job fold on the hot paths: one mutable state per job, frozen into a JobView only
when a view is published.

``projections.job_state.evolve`` is the specification: a pure function over frozen
models that copies the view (pydantic ``model_copy``) on every change, which was most
of the cost of folding a job (bench/README.md). :class:`JobState` applies the same rules
to a slotted object in place; :meth:`JobState.freeze` gives the JobView that ``evolve``
would have given for the same events, once per job per batch, and :meth:`JobState.datum`
the view's Avro datum straight from the state (no ``model_dump``; the spec is not in
the view, only what its readers need of it). ``tests/projections/test_fast_fold.py``
shows, on generated histories with late facts, duplicates and reordering, that both
equal the fold of
``evolve``. A rule changes in ``job_state`` first, then here.

Pure: the state is the caller's, nothing else is read or kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from functools import singledispatch
from typing import Any

from pydantic import BaseModel

from projections.failures import classify_rejection
from projections.history import is_job_event
from projections.job_state import (
    VIEW_BUDGET,
    _cut,
    _failure,
    current,
    last_lines,
    latest_checkpoints,
    output_info,
    submitted_fields,
)
from schemas.avro import NAMESPACE
from schemas.events import (
    AttemptAccepted,
    AttemptCancelled,
    AttemptLost,
    AttemptResponsive,
    AttemptScheduled,
    AttemptSuperseded,
    AttemptUnresponsive,
    CancelRequested,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStarted,
    ContainerStartFailed,
    DispatchTimedOut,
    Event,
    FailureClassified,
    FinishingTimedOut,
    ImageResolved,
    ImageUnavailable,
    JobCancelled,
    JobFailed,
    JobQueued,
    JobRejected,
    JobSubmitted,
    JobSucceeded,
    JobSucceededWithErrors,
    NoCapacity,
    OutputFailed,
    OutputStored,
    ProcessExited,
    RecordRefused,
    RetryScheduled,
    RetryWithdrawn,
)
from schemas.spec import JobSpec, Limits, Resources, RetrySpec
from schemas.trusted import construct
from schemas.types import CheckpointRef, Evidence, FitReport
from schemas.views import (
    IN_FLIGHT_STATUSES,
    TERMINAL_STATUSES,
    UNPLACED_STATUSES,
    AttemptView,
    FailureInfo,
    JobView,
    OutputInfo,
)

_ATTEMPT_FIELDS = tuple(AttemptView.model_fields)
_ATTEMPT_DEFAULTS = tuple(
    (name, info.get_default(call_default_factory=False))
    for name, info in AttemptView.model_fields.items()
    if name != "attempt"
)
_ATTEMPT_LISTS = tuple(n for n, i in AttemptView.model_fields.items() if i.default_factory is list)
_VIEW_FIELDS = tuple(JobView.model_fields)
_VIEW_LISTS = tuple(n for n, i in JobView.model_fields.items() if i.default_factory is list)
_VIEW_SCALARS = tuple(n for n, i in JobView.model_fields.items() if i.default_factory is not list)
"""Every other field; ``labels`` (a map) too: the fold replaces it whole, never changes it."""
_VIEW_RECORDS = ("failure", "fit", "resume_from", "resources", "limits", "retry")
"""The view's fields that are a nested record or null (an Avro union)."""


class AttemptState:
    """One attempt of a job, mutable: the fields of :class:`AttemptView`."""

    __slots__ = _ATTEMPT_FIELDS

    attempt: int
    status: str
    node_id: str
    provider: str
    region: str
    gpu_count: int
    gpu_model: str
    scheduled_at: datetime | None
    dispatch_deadline: datetime | None
    accepted_at: datetime | None
    held_from: datetime | None
    released_at: datetime | None
    started_at: datetime | None
    exited_at: datetime | None
    container_id: str
    exit_code: int | None
    signal: int | None
    oom_killed: bool | None
    runtime_s: float | None
    last_log_lines: list[str]
    resume_from: CheckpointRef | None
    unresponsive_since: datetime | None
    lost_deadline: datetime | None
    lost_at: datetime | None
    last_heartbeat_at: datetime | None
    image: str
    image_id: str
    image_error: str
    start_error: str
    runtime_exceeded: bool
    cancelled_at: datetime | None
    release_reason: str
    failure_class: str
    attribution: str

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        for name, default in _ATTEMPT_DEFAULTS:
            setattr(self, name, [] if name in _ATTEMPT_LISTS else default)

    def values(self) -> dict[str, Any]:
        """Field -> value, as the view's ``__dict__`` or its Avro datum has them."""
        return {name: getattr(self, name) for name in _ATTEMPT_FIELDS}

    def freeze(self) -> AttemptView:
        """The AttemptView of this state (nothing shared that the state changes later)."""
        values = self.values()
        for name in _ATTEMPT_LISTS:
            values[name] = list(values[name])
        return construct(AttemptView, values)


class JobState:
    """One job's state, mutable: the fields of :class:`JobView`, folded in place by
    :meth:`apply`. ``attempts`` holds :class:`AttemptState` objects in attempt order."""

    __slots__ = (*_VIEW_FIELDS, "applied_ids", "frozen_view")

    job_id: str
    tenant: str
    name: str
    status: str
    spec: JobSpec | None
    spec_digest: str
    image: str
    resources: Resources | None
    limits: Limits | None
    retry: RetrySpec | None
    labels: dict[str, str]
    submitted_at: datetime | None
    updated_at: datetime | None
    terminal_at: datetime | None
    terminal_event: str
    queue_deadline: datetime | None
    deadline: datetime | None
    attempt: int
    attempts: list[AttemptState]
    failure: FailureInfo | None
    fit: FitReport | None
    checkpoints: list[CheckpointRef]
    outputs: list[OutputInfo]
    next_attempt_not_before: datetime | None
    resume_from: CheckpointRef | None
    avoid_nodes: list[str]
    avoid_providers: list[str]
    reason: str
    cancel_requested_at: datetime | None
    status_before_lost_contact: str
    anomalies: list[str]
    applied_event_ids: list[str]
    event_count: int

    def __init__(self, job_id: str) -> None:
        for name, info in JobView.model_fields.items():
            default = [] if name in _VIEW_LISTS else info.get_default(call_default_factory=True)
            setattr(self, name, default)
        self.job_id = job_id
        self.applied_ids: set[str] = set()
        self.frozen_view: JobView | None = None
        """What :meth:`freeze` gave, until the next event changes the state."""

    # --------------------------------------------------------------------- in and out

    @classmethod
    def of(cls, view: JobView) -> JobState:
        """The state of a view folded elsewhere (a view read back from a table or a topic;
        one stored with its spec is read as ``job_state.current`` has it)."""
        view = current(view)
        state = cls(view.job_id)
        for name in _VIEW_SCALARS:
            setattr(state, name, getattr(view, name))
        for name in _VIEW_LISTS:
            setattr(state, name, list(getattr(view, name)))
        attempts = []
        for frozen in view.attempts:
            attempt = AttemptState(frozen.attempt)
            for name in _ATTEMPT_FIELDS:
                setattr(attempt, name, getattr(frozen, name))
            attempts.append(attempt)
        state.attempts = attempts
        state.applied_ids = set(view.applied_event_ids)
        state.frozen_view = view
        return state

    def copy(self) -> JobState:
        """A state that changes independently of this one."""
        other = JobState.__new__(JobState)
        for name in _VIEW_SCALARS:
            setattr(other, name, getattr(self, name))
        for name in _VIEW_LISTS:
            setattr(other, name, list(getattr(self, name)))
        attempts = []
        for mine in self.attempts:
            attempt = AttemptState.__new__(AttemptState)
            for name in _ATTEMPT_FIELDS:
                setattr(attempt, name, getattr(mine, name))
            attempts.append(attempt)
        other.attempts = attempts
        other.applied_ids = set(self.applied_ids)
        other.frozen_view = self.frozen_view
        return other

    def freeze(self) -> JobView:
        """The JobView ``evolve`` gives for the events applied (nothing shared that the
        state changes later)."""
        if self.frozen_view is None:
            values = {name: getattr(self, name) for name in _VIEW_SCALARS}
            for name in _VIEW_LISTS:
                values[name] = list(getattr(self, name))
            values["attempts"] = [a.freeze() for a in self.attempts]
            self.frozen_view = construct(JobView, values)
        return self.frozen_view

    def datum(self) -> dict[str, Any]:
        """The frozen view's Avro datum: ``codec.encode`` writes the same bytes for it as
        for ``freeze()``. A nested record in a union (the failure, the limits ...) names
        its branch (``_branch``), so the Avro writer does not try each branch on it."""
        out = {name: getattr(self, name) for name in _VIEW_SCALARS}
        for name in _VIEW_LISTS:
            out[name] = list(getattr(self, name))
        for name in _VIEW_RECORDS:
            out[name] = _branch(out[name])
        out["checkpoints"] = [c.model_dump() for c in self.checkpoints]
        out["outputs"] = [o.model_dump() for o in self.outputs]
        attempts = []
        for a in self.attempts:
            values = a.values()
            values["resume_from"] = _branch(a.resume_from)
            attempts.append(values)
        out["attempts"] = attempts
        return out

    # --------------------------------------------------------------------- the fold

    def apply(self, event: Event) -> None:
        """``evolve(view, event)`` in place."""
        if not is_job_event(event) or event.event_id in self.applied_ids:
            return
        self.frozen_view = None
        if self.resubmission(event):
            if not any(event.event_id in note for note in self.anomalies):
                self.note(event, "a second JobSubmitted for this job id; ignored")
            return
        if event.job_id != self.job_id:
            self.note(event, f"belongs to job {event.job_id!r}; ignored")
            return
        _apply(event, self)
        updated = self.updated_at
        if updated is None or event.occurred_at > updated:
            self.updated_at = event.occurred_at
        self.applied_ids.add(event.event_id)
        self.applied_event_ids.append(event.event_id)
        self.event_count += 1

    def resubmission(self, event: Event) -> bool:
        """``job_state.resubmission`` of this state's view."""
        return (
            isinstance(event, JobSubmitted)
            and self.submitted_at is not None
            and event.event_id not in self.applied_ids
        )

    @property
    def terminal(self) -> bool:
        """The job has ended."""
        return self.status in TERMINAL_STATUSES

    def note(self, event: Event, text: str) -> None:
        """Record an anomaly, within the view's budget (``job_state._anomaly``)."""
        notes, kept = self.anomalies, VIEW_BUDGET.anomalies - 1
        if len(notes) < kept:
            notes.append(
                _cut(f"{event.type} {event.event_id} (attempt {event.attempt}): {text}", 512)
            )
            return
        more = 1 + (int(notes[kept].split()[0]) if len(notes) > kept else 0)
        del notes[kept:]
        notes.append(f"{more} more anomalies, not kept")

    def get(self, n: int) -> AttemptState | None:
        """Attempt ``n``, None when it was never scheduled nor reported."""
        for a in self.attempts:
            if a.attempt == n:
                return a
        return None

    def put(self, attempt: AttemptState) -> None:
        """Add (or replace) an attempt, the attempts kept in attempt order."""
        attempts = [a for a in self.attempts if a.attempt != attempt.attempt]
        attempts.append(attempt)
        attempts.sort(key=lambda a: a.attempt)
        self.attempts = attempts

    def update(self, event: Event, status: str | None = None, **fields: Any) -> AttemptState:
        """``job_state._update_attempt``: the event's attempt (created, with an anomaly, when
        never scheduled) takes ``fields`` and ``status`` (a lost attempt stays lost, a
        superseded one superseded)."""
        current = self.get(event.attempt)
        if current is None:
            self.note(event, f"attempt {event.attempt} was never scheduled")
            current = AttemptState(event.attempt)
            self.put(current)
        if status is not None:
            if current.lost_at is not None:
                status = "lost"
            elif current.status == "superseded":
                status = "superseded"
            current.status = status
        for name, value in fields.items():
            setattr(current, name, value)
        return current

    def advance(self, event: Event, status: str) -> None:
        """``job_state._advance``: the job moves forward to ``status`` on a fact of its
        current attempt."""
        late = self.get(event.attempt)
        if late is not None and late.lost_at is not None:
            return
        if event.attempt != self.attempt:
            if event.attempt > self.attempt:
                self.note(event, f"the current attempt is {self.attempt}")
            return
        if self.terminal:
            if status in ("starting", "running"):
                self.note(event, f"the attempt moved on after the job ended {self.status}")
            return
        rank = IN_FLIGHT_STATUSES.index(status)
        if self.status == "lost_contact":
            before = self.status_before_lost_contact or "scheduled"
            if before in IN_FLIGHT_STATUSES and IN_FLIGHT_STATUSES.index(before) < rank:
                before = status
            self.status_before_lost_contact = before
            return
        if self.status in IN_FLIGHT_STATUSES and IN_FLIGHT_STATUSES.index(self.status) > rank:
            self.note(event, f"out of order: the job is already {self.status}")
            return
        if self.status not in IN_FLIGHT_STATUSES:
            self.note(event, f"arrived while the job was {self.status}")
        self.status = status

    def set_status(self, event: Event, status: str, **fields: Any) -> None:
        """``job_state._set_status``: a decision's status, never after the end."""
        if self.terminal:
            self.note(event, f"would make the job {status}; it already ended {self.status}")
            return
        self.status = status
        for name, value in fields.items():
            setattr(self, name, value)

    def end(self, event: Event, status: str, **fields: Any) -> None:
        """``job_state._end``: the first terminal event wins."""
        if self.terminal:
            self.note(event, f"second terminal event ignored; the job ended {self.status}")
            return
        self.status = status
        self.terminal_at = event.occurred_at
        self.terminal_event = event.type
        self.deadline = None
        for name, value in fields.items():
            setattr(self, name, value)


def _record(value: BaseModel) -> str:
    """The Avro name of a model's record."""
    return f"{NAMESPACE}.{type(value).__name__}"


def _branch(value: BaseModel | None) -> tuple[str, dict[str, Any]] | None:
    """A nested record's datum as the branch of its union (fastavro's tuple notation)."""
    return None if value is None else (_record(value), value.model_dump())


def fold(events: Iterable[Event], state: JobState | None = None) -> JobState | None:
    """``events`` applied to ``state`` (a new one for the first event's job when None), as
    ``project``/``evolve`` fold them; None when there was no state and no event."""
    for event in events:
        if state is None:
            state = JobState(event.job_id)
            if is_job_event(event) and not isinstance(event, JobSubmitted):
                state.note(event, "arrived before JobSubmitted")
        state.apply(event)
    return state


# --------------------------------------------------------------------------- the mutator
# One handler per event type, each the in-place form of its namesake in job_state.

_Handler = Callable[[Any, JobState], None]


@singledispatch
def _apply(event: Event, s: JobState) -> None:
    s.note(event, "no handler for this event type; ignored")


def _on(*types: type[Event]) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        for t in types:
            _apply.register(t)(handler)
        return handler

    return register


@_on(NoCapacity, FinishingTimedOut, RecordRefused)
def _fact(event: Event, s: JobState) -> None:
    return  # facts a decision follows


@_on(JobSubmitted)
def _submitted(event: JobSubmitted, s: JobState) -> None:
    if s.submitted_at is not None:
        s.note(event, "the job was already submitted; ignored")
        return
    s.tenant, s.submitted_at = event.tenant, event.occurred_at
    for name, value in submitted_fields(event.spec, event.spec_digest).items():
        setattr(s, name, value)


@_on(JobRejected)
def _rejected(event: JobRejected, s: JobState) -> None:
    if any(a.held_from for a in s.attempts):
        s.note(event, "rejected after compute was held")
    c = classify_rejection(event)
    failure = FailureInfo(**c.model_dump(exclude={"occurred_at"}))
    s.end(event, "rejected", failure=failure, fit=event.fit, reason=event.summary)


@_on(JobQueued)
def _queued(event: JobQueued, s: JobState) -> None:
    if s.status in UNPLACED_STATUSES:
        s.status, s.queue_deadline = "queued", event.queue_deadline
        return
    s.note(event, f"queued while the job was {s.status}; status kept")


@_on(AttemptScheduled)
def _scheduled(event: AttemptScheduled, s: JobState) -> None:
    if s.get(event.attempt) is not None:
        s.note(event, f"attempt {event.attempt} was already scheduled; ignored")
        return
    attempt = AttemptState(event.attempt)
    attempt.node_id, attempt.provider, attempt.region = event.node_id, event.provider, event.region
    attempt.gpu_count, attempt.gpu_model = event.gpu_count, event.gpu_model
    attempt.scheduled_at, attempt.dispatch_deadline = event.occurred_at, event.dispatch_deadline
    attempt.resume_from = event.resume_from
    s.put(attempt)
    if event.attempt < s.attempt:
        s.note(event, f"scheduled after attempt {s.attempt}; status kept")
        return
    s.attempt, s.resume_from = event.attempt, event.resume_from or s.resume_from
    if s.status not in UNPLACED_STATUSES:
        s.note(event, f"scheduled while the job was {s.status}; status kept")
        return
    s.status, s.status_before_lost_contact = "scheduled", ""


@_on(AttemptAccepted)
def _accepted(event: AttemptAccepted, s: JobState) -> None:
    s.update(event, "starting", accepted_at=event.occurred_at)
    s.advance(event, "starting")


@_on(ComputeHeld)
def _held(event: ComputeHeld, s: JobState) -> None:
    previous = s.get(event.attempt)
    model = event.gpu_model or (previous.gpu_model if previous else "")
    s.update(
        event,
        "starting",
        node_id=event.node_id,
        held_from=event.occurred_at,
        gpu_count=event.gpu_count,
        gpu_model=model,
    )
    s.advance(event, "starting")


@_on(ImageResolved)
def _image(event: ImageResolved, s: JobState) -> None:
    s.update(event, image=event.image, image_id=event.image_id)
    s.advance(event, "starting")


@_on(ImageUnavailable)
def _no_image(event: ImageUnavailable, s: JobState) -> None:
    error = f"{event.reason}: {event.message}" if event.message else event.reason
    s.update(event, "finishing", image=event.image, image_error=error)
    s.advance(event, "finishing")


@_on(ContainerStarted)
def _started(event: ContainerStarted, s: JobState) -> None:
    s.update(event, "running", started_at=event.occurred_at, container_id=event.container_id)
    s.advance(event, "running")


@_on(ContainerStartFailed)
def _start_failed(event: ContainerStartFailed, s: JobState) -> None:
    error = f"{event.error_kind}: {event.message}" if event.message else event.error_kind
    s.update(event, "finishing", start_error=error)
    s.advance(event, "finishing")


@_on(ProcessExited)
def _exited(event: ProcessExited, s: JobState) -> None:
    s.update(
        event,
        "finishing",
        exited_at=event.occurred_at,
        exit_code=event.exit_code,
        signal=event.signal,
        oom_killed=event.oom_killed,
        runtime_s=event.runtime_s,
        runtime_exceeded=event.runtime_exceeded,
        last_log_lines=last_lines(event.last_log_lines),
    )
    s.advance(event, "finishing")


@_on(CheckpointStored)
def _checkpoint(event: CheckpointStored, s: JobState) -> None:
    s.checkpoints = latest_checkpoints([*s.checkpoints, event.ref()])


def _put_output(s: JobState, output: OutputInfo) -> None:
    key = (output.attempt, output.path)
    s.outputs = [o for o in s.outputs if (o.attempt, o.path) != key]
    s.outputs.append(output)


@_on(OutputStored, OutputFailed)
def _output(event: OutputStored | OutputFailed, s: JobState) -> None:
    _put_output(s, output_info(event))


@_on(ComputeReleased)
def _released(event: ComputeReleased, s: JobState) -> None:
    attempt = s.get(event.attempt)
    status = "lost" if attempt is not None and attempt.lost_at else "ended"
    s.update(event, status, released_at=event.occurred_at, release_reason=event.reason)
    s.advance(event, "finishing")


@_on(AttemptUnresponsive)
def _unresponsive(event: AttemptUnresponsive, s: JobState) -> None:
    since = event.last_heartbeat_at or event.occurred_at
    s.update(
        event,
        unresponsive_since=since,
        last_heartbeat_at=event.last_heartbeat_at,
        lost_deadline=event.lost_deadline,
    )
    if event.attempt != s.attempt or s.terminal:
        return
    if s.status == "lost_contact":
        s.deadline = event.lost_deadline
        return
    if s.status not in IN_FLIGHT_STATUSES:
        s.note(event, f"arrived while the job was {s.status}")
        return
    s.status_before_lost_contact, s.status = s.status, "lost_contact"
    s.deadline = event.lost_deadline


@_on(AttemptResponsive)
def _responsive(event: AttemptResponsive, s: JobState) -> None:
    attempt = s.get(event.attempt)
    if attempt is not None and attempt.lost_at is not None:
        s.note(event, "the attempt was already declared lost; ignored")
        return
    if attempt is None or attempt.unresponsive_since is None:
        s.note(event, "no AttemptUnresponsive came before it")
    s.update(event, unresponsive_since=None, lost_deadline=None)
    if s.status != "lost_contact" or event.attempt != s.attempt:
        return
    s.status = s.status_before_lost_contact or "running"
    s.status_before_lost_contact, s.deadline = "", None


@_on(AttemptLost)
def _lost(event: AttemptLost, s: JobState) -> None:
    s.update(event, "lost", lost_at=event.occurred_at, last_heartbeat_at=event.last_heartbeat_at)
    if event.attempt != s.attempt or s.terminal:
        return
    if s.status == "lost_contact":
        s.deadline = None
        return
    if s.status not in IN_FLIGHT_STATUSES:
        s.note(event, f"arrived while the job was {s.status}")
        return
    s.status_before_lost_contact, s.status, s.deadline = s.status, "lost_contact", None


@_on(DispatchTimedOut)
def _dispatch_timed_out(event: DispatchTimedOut, s: JobState) -> None:
    attempt = s.get(event.attempt)
    if attempt is not None and attempt.accepted_at is not None:
        s.note(event, "the node had already accepted the attempt")
        return
    s.update(event, "ended")


@_on(CancelRequested)
def _cancel(event: CancelRequested, s: JobState) -> None:
    if s.cancel_requested_at is None:
        s.cancel_requested_at = event.occurred_at


@_on(AttemptCancelled)
def _cancelled_attempt(event: AttemptCancelled, s: JobState) -> None:
    s.update(event, "finishing", cancelled_at=event.occurred_at)
    s.advance(event, "finishing")


@_on(FailureClassified)
def _classified(event: FailureClassified, s: JobState) -> None:
    if s.get(event.attempt) is not None:
        s.update(event, failure_class=event.failure_class, attribution=event.attribution)
    if s.terminal:
        s.note(event, f"classified after the job ended {s.status}")
        return
    s.failure = _failure(event)


@_on(RetryScheduled)
def _retry(event: RetryScheduled, s: JobState) -> None:
    s.set_status(
        event,
        "retrying",
        next_attempt_not_before=event.not_before,
        resume_from=event.resume_from or s.resume_from,
        avoid_nodes=sorted({*s.avoid_nodes, *event.avoid_nodes}),
        avoid_providers=sorted({*s.avoid_providers, *event.avoid_providers}),
        reason=event.reason,
        deadline=None,
        status_before_lost_contact="",
    )


@_on(RetryWithdrawn)
def _withdrawn(event: RetryWithdrawn, s: JobState) -> None:
    s.set_status(event, "finishing", next_attempt_not_before=None, reason=event.reason)


@_on(AttemptSuperseded)
def _superseded(event: AttemptSuperseded, s: JobState) -> None:
    s.update(event, "superseded")


@_on(JobSucceeded)
def _succeeded(event: JobSucceeded, s: JobState) -> None:
    s.end(event, "succeeded", failure=None, reason="")


@_on(JobSucceededWithErrors, JobCancelled)
def _ended_with_summary(event: JobSucceededWithErrors | JobCancelled, s: JobState) -> None:
    status = "cancelled" if isinstance(event, JobCancelled) else "succeeded_with_errors"
    s.end(event, status, reason=event.summary)


@_on(JobFailed)
def _failed(event: JobFailed, s: JobState) -> None:
    failure = s.failure
    if failure is None or failure.failure_class != event.failure_class:
        failure = FailureInfo(
            failure_class=event.failure_class,
            attribution=event.attribution,
            retryable=False,
            summary=event.summary,
            advice=event.advice,
            evidence=Evidence(rule_id=""),
            rule_id="",
            classifier_version="",
            attempt=event.attempt,
        )
    s.end(event, "failed", failure=failure, reason=event.reason)
