"""The job-state reducer: a job's events folded into its JobView.

See docs/architecture.md, "The lifecycle".

``evolve`` is a ``singledispatch`` mutator over frozen models; ``project`` is the
fold. The reducer never raises on an unexpected or out-of-order event: it
records an anomaly on the view and keeps the first terminal state. Only the
terminal events (JobSucceeded, JobSucceededWithErrors, JobFailed, JobCancelled,
JobRejected) make a job terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import singledispatch
from typing import Any

from projections.failures import classify_rejection
from projections.history import is_job_event
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
from schemas.spec import JobSpec, carried
from schemas.types import CheckpointRef, Evidence
from schemas.views import (
    IN_FLIGHT_STATUSES,
    TERMINAL_STATUSES,
    UNPLACED_STATUSES,
    AttemptStatus,
    AttemptView,
    FailureInfo,
    JobStatus,
    JobView,
    OutputInfo,
)


@dataclass(frozen=True)
class ViewBudget:
    """What a JobView keeps at most of what a job's code and agent report, so that a view
    with every attempt it may make stays well under the record limit of the ``job-state``
    topic (docs/architecture.md, "Poison records"); the view holds no spec, only what
    :func:`submitted_fields` keeps of it. Part of the fold, so the processors, the sink
    and replay keep exactly the same."""

    log_bytes: int = 8 * 1024
    """An attempt's ``last_log_lines``: the latest lines that fit in this many UTF-8 bytes."""
    line_chars: int = 2048
    """One kept log or evidence line, or one evidence detail (the agent cuts at 2,000)."""
    text_chars: int = 4096
    """A failure's summary and advice."""
    anomalies: int = 100
    """Anomalies recorded; later ones are counted in the last note, not kept."""
    checkpoints: int = 64
    """Checkpoints listed: the latest ones (as a retry picks them, ``stored_at`` then fold
    order); the full list stays in the history."""


VIEW_BUDGET = ViewBudget()


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "…"


def last_lines(lines: Sequence[str], budget: ViewBudget = VIEW_BUDGET) -> list[str]:
    """The latest of ``lines`` (each cut to ``line_chars``) within ``log_bytes``; the last
    line is kept whatever its size."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        line = _cut(line, budget.line_chars)
        size += len(line.encode()) + 1
        if size > budget.log_bytes and kept:
            break
        kept.append(line)
    return kept[::-1]


def evolve(view: JobView | None, event: Event) -> JobView:
    """Apply one event to the view (None before the first event) and return the new view.

    An event whose ``event_id`` was already applied returns the view unchanged.
    Heartbeats, log chunks, meter ticks and node events are not job-events and
    are ignored without an anomaly.
    """
    if view is None:
        view = JobView(job_id=event.job_id)
        if is_job_event(event) and not isinstance(event, JobSubmitted):
            view = _anomaly(view, event, "arrived before JobSubmitted")
    if not is_job_event(event) or event.event_id in view.applied_event_ids:
        return view
    if resubmission(view, event):
        # Noted once, and nothing else of it kept: not its spec, tenant or time; its id
        # stays out of the applied ones, so every copy of it is a resubmission too.
        if any(event.event_id in note for note in view.anomalies):
            return view
        return _anomaly(view, event, "a second JobSubmitted for this job id; ignored")
    if event.job_id != view.job_id:
        return _anomaly(view, event, f"belongs to job {event.job_id!r}; ignored")
    view = _apply(event, view)
    updated = (
        event.occurred_at if view.updated_at is None else max(view.updated_at, event.occurred_at)
    )
    return view.model_copy(
        update={
            "applied_event_ids": [*view.applied_event_ids, event.event_id],
            "event_count": view.event_count + 1,
            "updated_at": updated,
        }
    )


def resubmission(view: JobView | None, event: Event) -> bool:
    """Whether ``event`` is a second JobSubmitted for a job already submitted, with another
    event id: a colliding id or a forged record, maybe of another tenant. Every reader
    ignores it (the fold notes an anomaly on the first job's view, without its spec or
    tenant, once however often it is delivered); the sink keeps it out of the job's stored
    history."""
    return (
        isinstance(event, JobSubmitted)
        and view is not None
        and view.submitted_at is not None
        and event.event_id not in view.applied_event_ids
    )


def submitted_fields(spec: JobSpec, digest: str = "") -> dict[str, Any]:
    """What a view keeps of the spec its JobSubmitted carries (``digest``: the one it
    recorded): the fields its readers need (``schemas.spec.carried``, the name, the retry
    budget, the labels). The spec itself is stored once, with JobSubmitted
    (docs/architecture.md, "The spec, stored once")."""
    return {
        **carried(spec, digest),
        "name": spec.name,
        "retry": spec.retry,
        "labels": spec.labels,
    }


def current(view: JobView) -> JobView:
    """A view as this fold makes it: one stored before views left the spec out (a v3
    record of ``job-state`` or the sink's ``jobs.view``) gets the fields of
    :func:`submitted_fields` instead of its spec, so it folds on like any other."""
    if view.spec is None:
        return view
    return view.model_copy(update={**submitted_fields(view.spec), "spec": None})


def project(events: Iterable[Event]) -> JobView:
    """Fold a job's events into its view; the same events always give the same view."""
    view: JobView | None = None
    for event in events:
        view = evolve(view, event)
    if view is None:
        raise ValueError("project() needs at least one event of the job")
    return view


# --------------------------------------------------------------------------- helpers


def _anomaly(view: JobView, event: Event, text: str) -> JobView:
    notes, kept = view.anomalies, VIEW_BUDGET.anomalies - 1
    if len(notes) < kept:
        note = _cut(f"{event.type} {event.event_id} (attempt {event.attempt}): {text}", 512)
        return view.model_copy(update={"anomalies": [*notes, note]})
    # The budget's last note counts the anomalies past it.
    more = 1 + (int(notes[kept].split()[0]) if len(notes) > kept else 0)
    note = f"{more} more anomalies, not kept"
    return view.model_copy(update={"anomalies": [*notes[:kept], note]})


def _terminal(view: JobView) -> bool:
    return view.status in TERMINAL_STATUSES


def _get_attempt(view: JobView, n: int) -> AttemptView | None:
    return next((a for a in view.attempts if a.attempt == n), None)


def _put_attempt(view: JobView, attempt: AttemptView) -> JobView:
    others = [a for a in view.attempts if a.attempt != attempt.attempt]
    attempts = sorted([*others, attempt], key=lambda a: a.attempt)
    return view.model_copy(update={"attempts": attempts})


def _update_attempt(
    view: JobView, event: Event, status: AttemptStatus | None = None, **fields: Any
) -> JobView:
    """Update the event's attempt; an attempt never scheduled is created, with an anomaly."""
    current = _get_attempt(view, event.attempt)
    if current is None:
        view = _anomaly(view, event, f"attempt {event.attempt} was never scheduled")
        current = AttemptView(attempt=event.attempt)
    if status is not None:
        if current.lost_at is not None:
            # A late fact of an attempt declared lost is recorded as it is (exit code,
            # release time ...), but the attempt stays lost: the verdict was acted on.
            status = "lost"
        elif current.status == "superseded":
            status = "superseded"  # stopped because another attempt won
        fields["status"] = status
    return _put_attempt(view, current.model_copy(update=fields))


def _advance(view: JobView, event: Event, status: JobStatus) -> JobView:
    """Move the job forward to ``status`` on a fact of its current attempt.

    A fact of an attempt already declared lost never moves the job: the decision on the
    loss (a retry) stands until the decider reconciles the late facts (RetryWithdrawn,
    AttemptSuperseded); without this a late ProcessExited put a retrying job back in
    ``finishing`` where nothing ends it.
    """
    late = _get_attempt(view, event.attempt)
    if late is not None and late.lost_at is not None:
        return view
    if event.attempt != view.attempt:
        if event.attempt > view.attempt:
            return _anomaly(view, event, f"the current attempt is {view.attempt}")
        return view  # a late fact of an earlier attempt: recorded on that attempt only
    if _terminal(view):
        if status in ("starting", "running"):
            return _anomaly(view, event, f"the attempt moved on after the job ended {view.status}")
        return view  # the release and outputs of a finished attempt arrive after the decision
    rank = IN_FLIGHT_STATUSES.index(status)
    if view.status == "lost_contact":
        # Facts from the node while we are unsure of it: remember them for AttemptResponsive.
        before = view.status_before_lost_contact or "scheduled"
        if before in IN_FLIGHT_STATUSES and IN_FLIGHT_STATUSES.index(before) < rank:
            before = status
        return view.model_copy(update={"status_before_lost_contact": before})
    if view.status in IN_FLIGHT_STATUSES and IN_FLIGHT_STATUSES.index(view.status) > rank:
        return _anomaly(view, event, f"out of order: the job is already {view.status}")
    if view.status not in IN_FLIGHT_STATUSES:
        view = _anomaly(view, event, f"arrived while the job was {view.status}")
    return view.model_copy(update={"status": status})


def _set_status(view: JobView, event: Event, status: JobStatus, **fields: Any) -> JobView:
    """Set a status that only scheduler/decider events set; never after terminal."""
    if _terminal(view):
        return _anomaly(view, event, f"would make the job {status}; it already ended {view.status}")
    return view.model_copy(update={"status": status, **fields})


def _failure(event: FailureClassified) -> FailureInfo:
    # FailureInfo is the classification's own fields, as recorded on the event, within
    # the view's budget.
    info = FailureInfo.model_validate(event.model_dump(include=set(FailureInfo.model_fields)))
    chars, evidence = VIEW_BUDGET.line_chars, info.evidence
    return info.model_copy(
        update={
            "summary": _cut(info.summary, VIEW_BUDGET.text_chars),
            "advice": _cut(info.advice, VIEW_BUDGET.text_chars),
            "evidence": evidence.model_copy(
                update={
                    "log_lines": [_cut(line, chars) for line in evidence.log_lines],
                    "details": {k: _cut(v, chars) for k, v in evidence.details.items()},
                }
            ),
        }
    )


def _end(view: JobView, event: Event, status: JobStatus, **fields: Any) -> JobView:
    """The one terminal transition: the first terminal event wins, later ones are anomalies."""
    if _terminal(view):
        return _anomaly(view, event, f"second terminal event ignored; the job ended {view.status}")
    return view.model_copy(
        update={
            "status": status,
            "terminal_at": event.occurred_at,
            "terminal_event": event.type,
            "deadline": None,
            **fields,
        }
    )


# --------------------------------------------------------------------------- the mutator


@singledispatch
def _apply(event: Event, view: JobView) -> JobView:
    return _anomaly(view, event, "no handler for this event type; ignored")


@_apply.register
def _(event: JobSubmitted, view: JobView) -> JobView:
    if view.submitted_at is not None:
        return _anomaly(view, event, "the job was already submitted; ignored")
    return view.model_copy(
        update={
            "tenant": event.tenant,
            **submitted_fields(event.spec, event.spec_digest),
            "submitted_at": event.occurred_at,
        }
    )


@_apply.register
def _(event: JobRejected, view: JobView) -> JobView:
    if any(a.held_from for a in view.attempts):
        view = _anomaly(view, event, "rejected after compute was held")
    c = classify_rejection(event)
    failure = FailureInfo(**c.model_dump(exclude={"occurred_at"}))
    return _end(view, event, "rejected", failure=failure, fit=event.fit, reason=event.summary)


@_apply.register
def _(event: JobQueued, view: JobView) -> JobView:
    if view.status in UNPLACED_STATUSES:
        return view.model_copy(update={"status": "queued", "queue_deadline": event.queue_deadline})
    return _anomaly(view, event, f"queued while the job was {view.status}; status kept")


@_apply.register
def _(event: AttemptScheduled, view: JobView) -> JobView:
    if _get_attempt(view, event.attempt) is not None:
        return _anomaly(view, event, f"attempt {event.attempt} was already scheduled; ignored")
    attempt = AttemptView(
        attempt=event.attempt,
        node_id=event.node_id,
        provider=event.provider,
        region=event.region,
        gpu_count=event.gpu_count,
        gpu_model=event.gpu_model,
        scheduled_at=event.occurred_at,
        dispatch_deadline=event.dispatch_deadline,
        resume_from=event.resume_from,
    )
    view = _put_attempt(view, attempt)
    if event.attempt < view.attempt:
        return _anomaly(view, event, f"scheduled after attempt {view.attempt}; status kept")
    view = view.model_copy(
        update={"attempt": event.attempt, "resume_from": event.resume_from or view.resume_from}
    )
    if view.status not in UNPLACED_STATUSES:
        return _anomaly(view, event, f"scheduled while the job was {view.status}; status kept")
    return view.model_copy(update={"status": "scheduled", "status_before_lost_contact": ""})


@_apply.register
def _(event: NoCapacity, view: JobView) -> JobView:
    return view  # a fact; the classifier and the decider turn it into the decision


@_apply.register
def _(event: AttemptAccepted, view: JobView) -> JobView:
    view = _update_attempt(view, event, accepted_at=event.occurred_at, status="starting")
    return _advance(view, event, "starting")


@_apply.register
def _(event: ComputeHeld, view: JobView) -> JobView:
    previous = _get_attempt(view, event.attempt)
    view = _update_attempt(
        view,
        event,
        node_id=event.node_id,
        held_from=event.occurred_at,
        gpu_count=event.gpu_count,
        gpu_model=event.gpu_model or (previous.gpu_model if previous else ""),
        status="starting",
    )
    return _advance(view, event, "starting")


@_apply.register
def _(event: ImageResolved, view: JobView) -> JobView:
    view = _update_attempt(view, event, image=event.image, image_id=event.image_id)
    return _advance(view, event, "starting")


@_apply.register
def _(event: ImageUnavailable, view: JobView) -> JobView:
    error = f"{event.reason}: {event.message}" if event.message else event.reason
    view = _update_attempt(view, event, image=event.image, image_error=error, status="finishing")
    return _advance(view, event, "finishing")


@_apply.register
def _(event: ContainerStarted, view: JobView) -> JobView:
    view = _update_attempt(
        view, event, started_at=event.occurred_at, container_id=event.container_id, status="running"
    )
    return _advance(view, event, "running")


@_apply.register
def _(event: ContainerStartFailed, view: JobView) -> JobView:
    error = f"{event.error_kind}: {event.message}" if event.message else event.error_kind
    view = _update_attempt(view, event, start_error=error, status="finishing")
    return _advance(view, event, "finishing")


@_apply.register
def _(event: ProcessExited, view: JobView) -> JobView:
    view = _update_attempt(
        view,
        event,
        exited_at=event.occurred_at,
        exit_code=event.exit_code,
        signal=event.signal,
        oom_killed=event.oom_killed,
        runtime_s=event.runtime_s,
        runtime_exceeded=event.runtime_exceeded,
        last_log_lines=last_lines(event.last_log_lines),
        status="finishing",
    )
    return _advance(view, event, "finishing")


@_apply.register
def _(event: CheckpointStored, view: JobView) -> JobView:
    return view.model_copy(
        update={"checkpoints": latest_checkpoints([*view.checkpoints, event.ref()])}
    )


def latest_checkpoints(
    checkpoints: list[CheckpointRef], budget: ViewBudget = VIEW_BUDGET
) -> list[CheckpointRef]:
    """``checkpoints`` without the oldest ones past ``budget.checkpoints`` (oldest by
    ``stored_at``, then fold order: the order in which a retry picks the latest), the
    order of the rest kept."""
    while len(checkpoints) > budget.checkpoints:
        oldest = min(
            range(len(checkpoints)),
            key=lambda i: (checkpoints[i].stored_at is not None, checkpoints[i].stored_at, i),
        )
        checkpoints = checkpoints[:oldest] + checkpoints[oldest + 1 :]
    return checkpoints


def _put_output(view: JobView, output: OutputInfo) -> JobView:
    others = [o for o in view.outputs if (o.attempt, o.path) != (output.attempt, output.path)]
    return view.model_copy(update={"outputs": [*others, output]})


def output_info(event: OutputStored | OutputFailed) -> OutputInfo:
    """The view's entry for one declared output's fact (both folds read it from here)."""
    if isinstance(event, OutputStored):
        return OutputInfo(
            path=event.path,
            status="stored",
            attempt=event.attempt,
            uri=event.uri,
            sha256=event.sha256,
            bytes=event.bytes,
        )
    return OutputInfo(
        path=event.path,
        status=event.reason,
        attempt=event.attempt,
        required=event.required,
        message=event.message,
    )


@_apply.register
def _(event: OutputStored, view: JobView) -> JobView:
    return _put_output(view, output_info(event))


@_apply.register
def _(event: OutputFailed, view: JobView) -> JobView:
    return _put_output(view, output_info(event))


@_apply.register
def _(event: ComputeReleased, view: JobView) -> JobView:
    attempt = _get_attempt(view, event.attempt)
    status: AttemptStatus = "lost" if attempt is not None and attempt.lost_at else "ended"
    view = _update_attempt(
        view, event, released_at=event.occurred_at, release_reason=event.reason, status=status
    )
    return _advance(view, event, "finishing")


@_apply.register
def _(event: AttemptUnresponsive, view: JobView) -> JobView:
    since = event.last_heartbeat_at or event.occurred_at
    view = _update_attempt(
        view,
        event,
        unresponsive_since=since,
        last_heartbeat_at=event.last_heartbeat_at,
        lost_deadline=event.lost_deadline,
    )
    if event.attempt != view.attempt or _terminal(view):
        return view
    if view.status == "lost_contact":
        return view.model_copy(update={"deadline": event.lost_deadline})
    if view.status not in IN_FLIGHT_STATUSES:
        return _anomaly(view, event, f"arrived while the job was {view.status}")
    return view.model_copy(
        update={
            "status": "lost_contact",
            "status_before_lost_contact": view.status,
            "deadline": event.lost_deadline,
        }
    )


@_apply.register
def _(event: AttemptResponsive, view: JobView) -> JobView:
    attempt = _get_attempt(view, event.attempt)
    if attempt is not None and attempt.lost_at is not None:
        return _anomaly(view, event, "the attempt was already declared lost; ignored")
    if attempt is None or attempt.unresponsive_since is None:
        view = _anomaly(view, event, "no AttemptUnresponsive came before it")
    view = _update_attempt(view, event, unresponsive_since=None, lost_deadline=None)
    if view.status != "lost_contact" or event.attempt != view.attempt:
        return view
    back = view.status_before_lost_contact or "running"
    return view.model_copy(
        update={"status": back, "status_before_lost_contact": "", "deadline": None}
    )


@_apply.register
def _(event: AttemptLost, view: JobView) -> JobView:
    view = _update_attempt(
        view,
        event,
        lost_at=event.occurred_at,
        last_heartbeat_at=event.last_heartbeat_at,
        status="lost",
    )
    if event.attempt != view.attempt or _terminal(view):
        return view
    if view.status == "lost_contact":  # the usual path: AttemptUnresponsive came first
        return view.model_copy(update={"deadline": None})
    if view.status not in IN_FLIGHT_STATUSES:
        return _anomaly(view, event, f"arrived while the job was {view.status}")
    before = view.status
    return view.model_copy(
        update={"status": "lost_contact", "status_before_lost_contact": before, "deadline": None}
    )


@_apply.register
def _(event: DispatchTimedOut, view: JobView) -> JobView:
    attempt = _get_attempt(view, event.attempt)
    if attempt is not None and attempt.accepted_at is not None:
        return _anomaly(view, event, "the node had already accepted the attempt")
    return _update_attempt(view, event, status="ended")


@_apply.register
def _(event: FinishingTimedOut, view: JobView) -> JobView:
    return view  # a fact; the decision follows


@_apply.register
def _(event: RecordRefused, view: JobView) -> JobView:
    return view  # a fact the decider ends the job on (JobFailed, record_refused)


@_apply.register
def _(event: CancelRequested, view: JobView) -> JobView:
    if view.cancel_requested_at is not None:
        return view
    return view.model_copy(update={"cancel_requested_at": event.occurred_at})


@_apply.register
def _(event: AttemptCancelled, view: JobView) -> JobView:
    view = _update_attempt(view, event, cancelled_at=event.occurred_at, status="finishing")
    return _advance(view, event, "finishing")


@_apply.register
def _(event: FailureClassified, view: JobView) -> JobView:
    if _get_attempt(view, event.attempt) is not None:
        view = _update_attempt(
            view, event, failure_class=event.failure_class, attribution=event.attribution
        )
    if _terminal(view):
        return _anomaly(view, event, f"classified after the job ended {view.status}")
    return view.model_copy(update={"failure": _failure(event)})


@_apply.register
def _(event: RetryScheduled, view: JobView) -> JobView:
    return _set_status(
        view,
        event,
        "retrying",
        next_attempt_not_before=event.not_before,
        resume_from=event.resume_from or view.resume_from,
        avoid_nodes=sorted({*view.avoid_nodes, *event.avoid_nodes}),
        avoid_providers=sorted({*view.avoid_providers, *event.avoid_providers}),
        reason=event.reason,
        deadline=None,
        status_before_lost_contact="",
    )


@_apply.register
def _(event: RetryWithdrawn, view: JobView) -> JobView:
    # The lost attempt finished cleanly after all; its success follows at once.
    return _set_status(view, event, "finishing", next_attempt_not_before=None, reason=event.reason)


@_apply.register
def _(event: AttemptSuperseded, view: JobView) -> JobView:
    # A decision about an attempt that lost to another one; the agent's facts follow.
    return _update_attempt(view, event, status="superseded")


@_apply.register
def _(event: JobSucceeded, view: JobView) -> JobView:
    return _end(view, event, "succeeded", failure=None, reason="")


@_apply.register
def _(event: JobSucceededWithErrors, view: JobView) -> JobView:
    return _end(view, event, "succeeded_with_errors", reason=event.summary)


@_apply.register
def _(event: JobFailed, view: JobView) -> JobView:
    failure = view.failure
    if failure is None or failure.failure_class != event.failure_class:
        # No classification came first (or another one): the terminal event is the evidence.
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
    return _end(view, event, "failed", failure=failure, reason=event.reason)


@_apply.register
def _(event: JobCancelled, view: JobView) -> JobView:
    return _end(view, event, "cancelled", reason=event.summary)
