"""Read models derived by the projections and published on compacted topics.

``JobView`` goes to ``gridledger.job-state``; ``AccountingRecord`` to
``gridledger.accounting``. Both are keyed by ``job_id`` and carry Avro schemas
like the events do.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal, get_args

from pydantic import Field

from schemas.events import ReleaseReason
from schemas.spec import JobSpec, Limits, Resources, RetrySpec
from schemas.types import CheckpointRef, Evidence, FitReport, FrozenModel

JobStatus = Literal[
    "submitted",
    "queued",
    "scheduled",
    "starting",
    "running",
    "finishing",
    "lost_contact",
    "retrying",
    "succeeded",
    "succeeded_with_errors",
    "failed",
    "cancelled",
    "rejected",
]
"""Every job status, in lifecycle order (one list: the API models and the CLI use it)."""
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
TERMINAL_STATUSES = frozenset(
    {"succeeded", "succeeded_with_errors", "failed", "cancelled", "rejected"}
)
UNPLACED_STATUSES = frozenset({"submitted", "queued", "retrying"})
"""Open, with no attempt in flight: the job waits to be placed and holds no compute, so a
placement may move it to ``scheduled`` and a cancel or NoCapacity ends it at once."""
AttemptStatus = Literal[
    "scheduled",
    "starting",
    "running",
    "finishing",
    "lost",
    "ended",
    "superseded",
]
"""Every attempt status: ``lost`` when the watchdog declared it so (it stays lost whatever
arrives late), ``ended`` once released or never accepted, ``superseded`` when stopped
because another attempt's result won."""
IN_FLIGHT_STATUSES: tuple[AttemptStatus, ...] = ("scheduled", "starting", "running", "finishing")
"""An attempt on its way, in lifecycle order (a fact never moves it backwards): it holds, or
is about to hold, GPUs on its node. The job's status follows its current attempt's."""


class FailureInfo(FrozenModel):
    """The classification of the failure that decided the job's (or attempt's) fate."""

    failure_class: str
    attribution: str
    retryable: bool
    summary: str
    advice: str
    evidence: Evidence
    rule_id: str
    classifier_version: str
    attempt: int = 0


class OutputInfo(FrozenModel):
    """One declared output as the job's view shows it: where it was stored, or why not."""

    path: str
    status: str
    """stored, or the OutputFailed reason (missing, store_failed, refused_link ...)."""
    attempt: int = 0
    """The attempt that stored (or failed to store) it; a retry reports its outputs again."""
    uri: str = ""
    sha256: str = ""
    bytes: int = 0
    required: bool = True
    message: str = ""


class AttemptView(FrozenModel):
    """One attempt of a job, from placement to release: where it ran and how it ended."""

    attempt: int
    status: AttemptStatus = "scheduled"
    node_id: str = ""
    provider: str = ""
    region: str = ""
    gpu_count: int = 0
    gpu_model: str = ""
    scheduled_at: datetime | None = None
    dispatch_deadline: datetime | None = None
    accepted_at: datetime | None = None
    held_from: datetime | None = None
    released_at: datetime | None = None
    started_at: datetime | None = None
    exited_at: datetime | None = None
    container_id: str = ""
    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool | None = None
    runtime_s: float | None = None
    last_log_lines: list[str] = Field(default_factory=list)
    resume_from: CheckpointRef | None = None
    unresponsive_since: datetime | None = None
    lost_deadline: datetime | None = None
    lost_at: datetime | None = None
    last_heartbeat_at: datetime | None = None
    """As reported by the watchdog (AttemptUnresponsive / AttemptLost)."""
    image: str = ""
    image_id: str = ""
    image_error: str = ""
    """not_found or registry_unreachable, with the registry's message."""
    start_error: str = ""
    """docker error kind and message when the container could not start."""
    runtime_exceeded: bool = False
    cancelled_at: datetime | None = None
    release_reason: ReleaseReason = ""
    failure_class: str = ""
    attribution: str = ""


class JobView(FrozenModel):
    """The current state of one job, folded from its job-events."""

    SCHEMA_VERSION: ClassVar[int] = 4
    """2: the spec's ``labels``; 3: its ``secrets`` (names only); 4: the spec stored once:
    ``spec`` stays null, the view carries ``spec_digest``, ``image``, ``resources``,
    ``limits``, ``retry`` and ``labels`` of it."""

    job_id: str
    tenant: str = ""
    name: str = ""
    status: JobStatus = "submitted"
    spec: JobSpec | None = None
    """Null since v4 (views before carried the whole spec): the spec is the job's
    JobSubmitted's, stored once in the sink's ``jobs.spec``."""
    spec_digest: str = ""
    """``schemas.spec.spec_digest`` of the job's spec, once submitted."""
    image: str = ""
    resources: Resources | None = None
    limits: Limits | None = None
    retry: RetrySpec | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    """What the view's readers need of the spec: the retry decider its ``retry``,
    accounting its ``labels``, the job lists its image and resources."""
    submitted_at: datetime | None = None
    updated_at: datetime | None = None
    terminal_at: datetime | None = None
    terminal_event: str = ""
    """Type of the one terminal event, once there is one."""
    queue_deadline: datetime | None = None
    deadline: datetime | None = None
    """When the current uncertain state (lost_contact, finishing) must be resolved."""
    attempt: int = 0
    attempts: list[AttemptView] = Field(default_factory=list)
    failure: FailureInfo | None = None
    fit: FitReport | None = None
    checkpoints: list[CheckpointRef] = Field(default_factory=list)
    outputs: list[OutputInfo] = Field(default_factory=list)
    next_attempt_not_before: datetime | None = None
    resume_from: CheckpointRef | None = None
    """The checkpoint the current (or next) attempt starts from: from AttemptScheduled
    (a job submitted with ``spec.resume_from``) or RetryScheduled."""
    avoid_nodes: list[str] = Field(default_factory=list)
    avoid_providers: list[str] = Field(default_factory=list)
    reason: str = ""
    """Why the job is where it is: the retry reason while retrying, the final one once terminal."""
    cancel_requested_at: datetime | None = None
    status_before_lost_contact: str = ""
    """The state lost_contact interrupted; AttemptResponsive returns to it."""
    anomalies: list[str] = Field(default_factory=list)
    """Events that did not fit the lifecycle; recorded, never raised."""
    applied_event_ids: list[str] = Field(default_factory=list)
    event_count: int = 0


class AttemptAccounting(FrozenModel):
    """One attempt's compute: held (lifecycle) against metered (ticks), and who pays it."""

    attempt: int
    node_id: str = ""
    provider: str = ""
    region: str = ""
    """Where the attempt was placed (its AttemptScheduled); '' when it never was."""
    held_from: datetime | None = None
    released_at: datetime | None = None
    held_seconds: float = 0.0
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_seconds: float = 0.0
    """held_seconds x gpu_count, from the lifecycle events."""
    metered_gpu_seconds: float = 0.0
    """Sum of the attempt's meter ticks in the window the lifecycle counted (those that
    started by ``released_at``; all of them while open), each tick index counted once.
    ``reconciled`` compares it with ``gpu_seconds``."""
    uncounted_gpu_seconds: float = 0.0
    """Sum of the meter ticks that started after ``released_at``: the meter saw the
    attempt run on after the lifecycle stopped counting it (a lost attempt whose node
    was only unheard). Neither billed nor credited; shown so nothing metered is hidden."""
    uncounted_ticks: list[int] = Field(default_factory=list)
    """Indices of those ticks."""
    tick_count: int = 0
    missing_ticks: list[int] = Field(default_factory=list)
    """Tick indices below the highest one received that never arrived."""
    final_tick_seen: bool = False
    release_source: str = ""
    """released (ComputeReleased), lost (AttemptLost: held until the last heartbeat),
    open (still held: counted up to the latest event) or empty when never held."""
    outcome: str = ""
    """succeeded, failed, cancelled, lost, superseded (stopped because another attempt
    won; credited), after_end (placed after the job had ended; credited), pending (no
    decision yet) or not_held."""
    attribution: str = ""
    failure_class: str = ""
    billable_gpu_seconds: float = 0.0
    credited_gpu_seconds: float = 0.0
    reconciled: bool = True


class AccountingRecord(FrozenModel):
    """What one job held, what was metered, what is owed and what is credited."""

    SCHEMA_VERSION: ClassVar[int] = 3
    """2: ``uncounted_gpu_seconds`` / ``uncounted_ticks`` (the meter reconciled over the
    counted window). 3: ``labels``, and each attempt's ``provider`` and ``region``."""

    job_id: str
    tenant: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    """The spec's ``labels``: what usage is grouped by besides tenant, model and place."""
    status: JobStatus = "submitted"
    final: bool = False
    """True once the job is terminal and every attempt has released its compute."""
    policy_version: str = ""
    attempts: list[AttemptAccounting] = Field(default_factory=list)
    held_seconds: float = 0.0
    gpu_seconds: float = 0.0
    metered_gpu_seconds: float = 0.0
    uncounted_gpu_seconds: float = 0.0
    """Metered after the counted end of an attempt (``AttemptAccounting``), summed."""
    billable_gpu_seconds: float = 0.0
    credited_gpu_seconds: float = 0.0
    reconciled: bool = True
    updated_at: datetime | None = None


VIEW_TYPES = {cls.__name__: cls for cls in (JobView, AccountingRecord)}
