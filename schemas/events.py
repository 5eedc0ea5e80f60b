"""Every event gridledger writes, as frozen pydantic models.

Each event carries the envelope (docs/architecture.md, "Events": ``event_id``,
``job_id``, ``attempt``, ``type``, ``occurred_at``, ``producer``, ``causation_id``,
``schema_version``) followed by its own fields. Events are facts in the past
tense; decisions (``FailureClassified``, ``RetryScheduled``, terminal events) are
events too, so a job's history explains itself.

The Avro schema of each event is generated from its model (:mod:`schemas.avro`)
and every version ever written is stored under ``client/gridledger_client/avro/``.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.spec import JobSpec, Limits, Resources
from schemas.types import Avoidance, CheckpointRef, Evidence, FitReport, GpuDevice, GpuUsage

ENVELOPE_VERSION = 1
"""Version of the Envelope record; bump every event's SCHEMA_VERSION with it."""

ENVELOPE_FIELDS = (
    "event_id",
    "job_id",
    "attempt",
    "type",
    "occurred_at",
    "producer",
    "causation_id",
    "schema_version",
)

FailureClass = str
"""One of :data:`projections.failures.FAILURE_CLASSES`; a string on the wire so classes can grow."""
Attribution = Literal["user", "platform", "capacity"]


def new_event_id() -> str:
    """A fresh id for a fact: random, since a fact happens once (derived events use
    :func:`derived_event_id`, so that recomputing them finds the same id)."""
    return str(uuid.uuid4())


def derived_event_id(causation_id: str, processor: str, suffix: str = "") -> str:
    """Deterministic id for an event derived from another one.

    Re-processing the same input after a crash yields the same id, so folds and
    sinks drop the duplicate (docs/architecture.md, "Principles": idempotent everywhere).
    """
    # uuid.uuid5 by hand: the same bytes, without building a UUID object (4x cheaper, and
    # the scheduler and processors derive an id for every decision they make).
    name = f"gridledger:{processor}:{causation_id}:{suffix}".encode()
    digest = bytearray(hashlib.sha1(_URL_NAMESPACE + name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


_URL_NAMESPACE = uuid.NAMESPACE_URL.bytes


class Role(StrEnum):
    """What the services and folds do with an event type: each event class lists its roles
    in ``ROLES``, and every tuple of types a consumer matches on is derived from them
    (:func:`with_role`). Whether a type is a job-event or a stream is its ``TOPIC``."""

    TERMINAL = "terminal"
    """Ends the job: a history holds exactly one (``TERMINAL_EVENTS``)."""
    ENDS_ATTEMPT = "ends_attempt"
    """Ends a placed attempt: the watchdog has nothing left to watch after it
    (``services.processors.watchdog.ATTEMPT_ENDS``)."""
    TRIGGER = "trigger"
    """An unsuccessful attempt (or an unplaced job) is classified after it: the
    classifier's triggers (``projections.history.ENDING_EVENTS``)."""
    DECIDER_INPUT = "decider_input"
    """The retry decider decides on it; with the triggers, what ``react`` answers
    (``projections.decisions.REACTS_TO``)."""
    DECISION = "decision"
    """The classifier or the retry decider derives it (``projections.decisions``); replay
    compares these with what the current rules imply
    (``services.replay.decisions.DECISION_TYPES``)."""
    TO_NODE = "to_node"
    """The dispatch processor turns it into a command to a node; nothing else goes to one
    (``services.processors.dispatch.TO_NODE``)."""
    SCHEDULER_INPUT = "scheduler_input"
    """The scheduler's state folds it; it skips every other type undecoded
    (``services.scheduler.core.FOLDED``)."""
    FENCE = "fence"
    """On ``job-events`` but no job's: the schedulers' fence marker, folded by
    :mod:`projections.fence` and ignored by the job folds
    (``projections.history.STREAM_EVENTS``)."""


Roles = frozenset[Role]


class Event(BaseModel):
    """Base of every event: the envelope."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    TOPIC: ClassVar[str] = "job-events"
    """Topic suffix the event is appended to (see ``services.settings.TOPIC_NAMES``)."""
    SCHEMA_VERSION: ClassVar[int] = 1
    ROLES: ClassVar[Roles] = frozenset()
    """What consumers do with the type (:class:`Role`); every event class declares its own."""

    event_id: str = Field(default_factory=new_event_id, json_schema_extra={"avro_default": False})
    job_id: str = ""
    """Empty for node-scoped events."""
    attempt: int = Field(0, ge=0)
    """0 before the first attempt."""
    type: str = ""
    occurred_at: datetime
    producer: str = ""
    """service/instance that wrote it, e.g. 'agent/node-a'."""
    causation_id: str | None = None
    schema_version: int = 0

    @model_validator(mode="before")
    @classmethod
    def _own_type(cls, data: Any) -> Any:
        """Fill ``type`` and ``schema_version`` from the class when they are not given.

        A validator rather than an ``__init__`` override: pydantic calls a custom
        ``__init__`` from every ``model_validate`` too, which tripled the cost of
        decoding an event.
        """
        if isinstance(data, dict) and ("type" not in data or "schema_version" not in data):
            data = {"type": cls.__name__, "schema_version": cls.SCHEMA_VERSION, **data}
        return data

    @field_validator("occurred_at")
    @classmethod
    def _utc_micros(cls, value: datetime) -> datetime:
        if value.tzinfo is UTC:
            return value  # what the codec and the clock give; nothing to convert
        if value.tzinfo is None:
            raise ValueError("must be timezone-aware (UTC)")
        return value.astimezone(UTC)

    @property
    def key(self) -> str:
        """Kafka key: the job id (node id for node-keyed events)."""
        return self.job_id

    @classmethod
    def derived(cls, cause: Event, by: str, suffix: str = "", /, **fields: Any) -> Self:
        """This event, derived by ``by`` from ``cause``: the one way to make an event from
        the event that led to it (decisions, watchdog verdicts, scheduling, dispatch, agent
        facts).

        The id is ``derived_event_id(cause.event_id, by, suffix)`` and ``causation_id`` is
        the cause's id, so handling the same cause again (a redelivery, a restart, a
        replay) yields the same event, which every fold and sink drops as a duplicate.
        ``suffix`` tells apart several events ``by`` derives from one cause. ``job_id``,
        ``attempt`` and ``occurred_at`` are the cause's and ``producer`` is ``by`` unless
        ``fields`` say otherwise: a live service names its instance in ``producer``
        (``scheduler/host-1``) while ``by`` stays instance-free, so ids do not depend on
        which instance decided; a verdict on a wait occurs ``now``, not when the wait began.
        """
        for own in ("event_id", "causation_id"):
            if own in fields:
                raise TypeError(
                    f"{cls.__name__}.derived: {own} follows from the cause; "
                    "pass another suffix to derive a different event"
                )
        envelope = {
            "job_id": cause.job_id,
            "attempt": cause.attempt,
            "occurred_at": cause.occurred_at,
            "producer": by,
        }
        return cls(
            event_id=derived_event_id(cause.event_id, by, suffix),
            causation_id=cause.event_id,
            **(envelope | fields),
        )


class NodeEvent(Event):
    """An event about a node rather than a job; keyed by ``node_id``."""

    TOPIC: ClassVar[str] = "node-events"
    node_id: str

    @property
    def key(self) -> str:
        """The partition key: a node's events stay in order on one partition."""
        return self.node_id


# --------------------------------------------------------------------------- job lifecycle


class JobSubmitted(Event):
    """The API accepted a job: the first event of every history, carrying the spec all later
    decisions read."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    SCHEMA_VERSION: ClassVar[int] = 4
    """v2: the spec's ``labels`` (v1 payloads decode with none); v3 its ``secrets``
    (names only); v4 ``spec_digest``."""

    tenant: str
    submitter: str = ""
    spec: JobSpec
    spec_digest: str = ""
    """``schemas.spec.spec_digest(spec)``, made once by the API as it appends ("" before v4:
    readers compute it, ``schemas.spec.carried``)."""


class SchedulerDecision(Event):
    """A decision of the scheduler: it carries the leader epoch of the scheduler that made
    it, and every reader drops one of an epoch older than the last :class:`LeaderElected`
    before it in its partition (:mod:`projections.fence`), so a deposed leader's decision
    is never applied."""

    leader_epoch: int = Field(0, ge=0)
    """The epoch of the leader that decided (0: written before schedulers were fenced)."""


class JobRejected(SchedulerDecision):
    """Terminal before any compute is held."""

    ROLES: ClassVar[Roles] = frozenset({Role.TERMINAL, Role.TRIGGER, Role.SCHEDULER_INPUT})

    SCHEMA_VERSION: ClassVar[int] = 2
    """v2 added ``leader_epoch`` (v1 payloads decode with 0)."""

    failure_class: FailureClass
    """does_not_fit or invalid_spec."""
    summary: str
    advice: str
    fit: FitReport | None = None


class JobQueued(SchedulerDecision):
    """No node can hold the job now; it waits, ending as ``capacity_unavailable`` at
    ``queue_deadline``."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    SCHEMA_VERSION: ClassVar[int] = 2
    """v2 added ``leader_epoch`` (v1 payloads decode with 0)."""

    queue_deadline: datetime
    reason: str = ""


class AttemptScheduled(SchedulerDecision):
    """The scheduler placed an attempt on a node. Also routed to node-commands."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT, Role.TO_NODE})

    SCHEMA_VERSION: ClassVar[int] = 6
    """v2 added ``avoidance`` and ``reason`` (v1 payloads decode with none and ""); v3 the
    spec's ``labels``; v4 its ``secrets`` (names only); v5 ``leader_epoch``; v6 the spec
    stored once: ``spec`` optional (null on job-events), ``spec_digest``, ``image``,
    ``resources`` and ``limits``."""

    node_id: str
    provider: str = ""
    region: str = ""
    gpu_count: int
    gpu_model: str = ""
    gpu_indices: list[int] = Field(default_factory=list)
    dispatch_deadline: datetime
    spec: JobSpec | None = None
    """The whole spec only where a node runs it: on ``node-commands`` the dispatch
    processor fills it from the job's JobSubmitted (:meth:`for_node`); null on
    ``job-events`` (records written before v6 carry it there too)."""
    spec_digest: str = ""
    """``schemas.spec.spec_digest`` of the job's spec ("" in records before v6)."""
    image: str = ""
    resources: Resources | None = None
    limits: Limits | None = None
    """The spec's image, resources and limits: what a reader of job-events needs of it."""
    tenant: str = ""
    resume_from: CheckpointRef | None = None
    avoidance: Avoidance | None = None
    """For a retry that was told to avoid nodes or providers: which, and what it fell
    back to when nothing else could hold it."""
    reason: str = ""
    """The placement in a sentence (what was avoided, what it fell back to), for people."""

    def for_node(self, spec: JobSpec) -> AttemptScheduled:
        """The command a node runs: this decision with the job's whole spec (the one of its
        JobSubmitted) filled in, the same event id."""
        return self.model_copy(update={"spec": spec})

    @property
    def runnable(self) -> JobSpec:
        """The spec the node runs; only a command from :meth:`for_node` has it."""
        if self.spec is None:
            raise ValueError(f"AttemptScheduled {self.event_id} carries no spec to run")
        return self.spec


class NoCapacity(SchedulerDecision):
    """The queue deadline passed with no placement: the job ends, attributed to capacity."""

    ROLES: ClassVar[Roles] = frozenset({Role.TRIGGER, Role.SCHEDULER_INPUT})

    SCHEMA_VERSION: ClassVar[int] = 2
    """v2 added ``leader_epoch`` (v1 payloads decode with 0)."""

    queued_since: datetime
    queue_deadline: datetime
    detail: str = ""


class AttemptAccepted(Event):
    """The node's agent took the attempt: the dispatch deadline no longer applies."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    node_id: str


class ComputeHeld(Event):
    """The meter starts at ``occurred_at``."""

    ROLES: ClassVar[Roles] = frozenset()

    node_id: str
    gpu_count: int
    gpu_model: str = ""
    gpu_indices: list[int] = Field(default_factory=list)


ReleaseReason = Literal[
    "exited",
    "runtime_exceeded",
    "image_unavailable",
    "start_failed",
    "cancelled",
    "agent_shutdown",
    "agent_error",
    "container_lost",
    "",
]
"""Why an agent released an attempt's compute (``ComputeReleased.reason``). "" is the wire
default of the field (the schema keeps it) and, on a view, "not released yet"."""


class ComputeReleased(Event):
    """The meter stops at ``occurred_at``. Emitted on every end, success or not."""

    ROLES: ClassVar[Roles] = frozenset(
        {Role.ENDS_ATTEMPT, Role.TRIGGER, Role.DECIDER_INPUT, Role.SCHEDULER_INPUT}
    )

    node_id: str
    reason: ReleaseReason = ""


class ImageResolved(Event):
    """The agent has the image locally (``pulled`` when it had to fetch it)."""

    ROLES: ClassVar[Roles] = frozenset()

    image: str
    image_id: str = ""
    pulled: bool = False


class ImageUnavailable(Event):
    """The image could not be had: the attempt ends before a container exists."""

    ROLES: ClassVar[Roles] = frozenset()

    image: str
    reason: Literal["not_found", "registry_unreachable"]
    message: str = ""


class ContainerStarted(Event):
    """The container runs: from here on, the process's exit decides the attempt."""

    ROLES: ClassVar[Roles] = frozenset()

    container_id: str
    node_id: str = ""


class ContainerStartFailed(Event):
    """Docker refused to start the container; ``error_kind`` is what the classifier matches."""

    ROLES: ClassVar[Roles] = frozenset()

    error_kind: str
    """entrypoint_not_found, invalid_config, daemon_error ..."""
    message: str = ""


class ProcessExited(Event):
    """The job's process ended: the facts (exit code, signal, OOM, last log lines) its failure is
    classified on."""

    ROLES: ClassVar[Roles] = frozenset()

    SCHEMA_VERSION: ClassVar[int] = 2
    """v2 added ``memory_limit_bytes`` (v1 payloads decode with 0: unknown)."""

    exit_code: int
    signal: int | None = None
    oom_killed: bool = False
    runtime_s: float = 0.0
    last_log_lines: list[str] = Field(default_factory=list)
    runtime_exceeded: bool = False
    """The agent stopped the process because ``limits.max_runtime_s`` was reached."""
    memory_limit_bytes: int = 0
    """The container's memory limit; an OOM kill means something only against it."""


class CheckpointStored(Event):
    """A checkpoint reached the object store: a retry (or a job resuming from this one) starts from
    it."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    name: str
    step: int | None = None
    uri: str
    sha256: str
    bytes: int

    def ref(self) -> CheckpointRef:
        """The reference a later attempt (or job) resumes from."""
        return CheckpointRef(
            job_id=self.job_id,
            attempt=self.attempt,
            name=self.name,
            uri=self.uri,
            sha256=self.sha256,
            bytes=self.bytes,
            step=self.step,
            stored_at=self.occurred_at,
        )


class OutputStored(Event):
    """A declared output reached the object store, with the digest a download checks."""

    ROLES: ClassVar[Roles] = frozenset()

    path: str
    uri: str
    sha256: str
    bytes: int


OutputFailureReason = Literal[
    "missing",
    "store_failed",
    "refused_link",
    "refused_special_file",
    "refused_folder",
    "refused_outside",
    "refused_unreadable",
    "over_file_cap",
    "over_job_cap",
    "over_checkpoint_count",
]
"""Why an output (or checkpoint) was not stored. ``store_failed``: the artifact store refused
or could not be reached (the platform's side). ``missing``: nothing at the path. Every
``refused_*`` and ``over_*`` reason is what the job wrote or declared (the user's side; see
services/agent/confine.py for each rule)."""


class OutputFailed(Event):
    """A declared output (or a checkpoint file) is missing or was not stored: see
    :data:`OutputFailureReason` and projections/failures.py for what each reason makes of
    the job."""

    ROLES: ClassVar[Roles] = frozenset()

    path: str
    reason: OutputFailureReason
    required: bool = True
    message: str = ""


class AttemptUnresponsive(Event):
    """The watchdog heard nothing from the attempt for too long: the job is ``lost_contact`` until
    ``lost_deadline``."""

    ROLES: ClassVar[Roles] = frozenset()

    node_id: str
    last_heartbeat_at: datetime | None = None
    silence_s: float
    lost_deadline: datetime


class AttemptResponsive(Event):
    """Heartbeats came back before the lost deadline: the uncertainty is cleared."""

    ROLES: ClassVar[Roles] = frozenset()

    node_id: str
    silence_s: float = 0.0


class AttemptLost(Event):
    """The silence outlasted the lost deadline: the attempt is given up on (and may be retried),
    whatever arrives late."""

    ROLES: ClassVar[Roles] = frozenset({Role.ENDS_ATTEMPT, Role.TRIGGER, Role.SCHEDULER_INPUT})

    node_id: str
    last_heartbeat_at: datetime | None = None
    deadline: datetime | None = None


class DispatchTimedOut(Event):
    """No agent accepted the placement by its deadline: the attempt ends without having run."""

    ROLES: ClassVar[Roles] = frozenset({Role.ENDS_ATTEMPT, Role.TRIGGER, Role.SCHEDULER_INPUT})

    node_id: str
    deadline: datetime


class FinishingTimedOut(Event):
    """The attempt's end (release, outputs) did not all arrive by the deadline: the job is decided
    on what did."""

    ROLES: ClassVar[Roles] = frozenset({Role.ENDS_ATTEMPT, Role.TRIGGER})

    node_id: str = ""
    deadline: datetime


class RecordRefused(Event):
    """A record the job's history leads to was too large for its topic: a service parked it
    on the dead-letter topic instead of publishing it (its view, its accounting record, a
    decision). The retry decider ends the job ``record_refused`` on it (platform side)."""

    ROLES: ClassVar[Roles] = frozenset({Role.DECIDER_INPUT})

    record_topic: str
    """The topic suffix the record was for (``job-state``, ``accounting``, ``job-events``)."""
    record_type: str
    """What the record was: ``JobView``, ``AccountingRecord``, an event type."""
    size_bytes: int
    limit_bytes: int
    """The topic's ``max.message.bytes`` as the producer applies it."""


class CancelRequested(Event):
    """Someone asked for the job to stop; dispatch routes it to the node that runs it."""

    ROLES: ClassVar[Roles] = frozenset({Role.DECIDER_INPUT, Role.SCHEDULER_INPUT, Role.TO_NODE})

    requested_by: str = ""
    reason: str = ""
    node_id: str = ""
    """Filled when the request is routed to the node running the attempt."""


class AttemptCancelled(Event):
    """The agent stopped the attempt on a cancel (after its stop grace)."""

    ROLES: ClassVar[Roles] = frozenset()

    node_id: str


class FailureClassified(Event):
    """The classifier's verdict on a failed attempt: class, whose side, retryable, advice and the
    evidence for it."""

    ROLES: ClassVar[Roles] = frozenset({Role.DECIDER_INPUT, Role.SCHEDULER_INPUT, Role.DECISION})

    failure_class: FailureClass
    attribution: Attribution
    retryable: bool
    summary: str
    advice: str
    evidence: Evidence
    rule_id: str
    classifier_version: str


class RetryScheduled(Event):
    """The attempt ``attempt`` failed; ``next_attempt`` will be queued after ``delay_s``."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT, Role.DECISION})

    SCHEMA_VERSION: ClassVar[int] = 2
    """v2 added ``avoid_reason``."""

    next_attempt: int
    delay_s: float
    not_before: datetime
    resume_from: CheckpointRef | None = None
    avoid_nodes: list[str] = Field(default_factory=list)
    """Nodes the retry prefers not to use: the scheduler places it elsewhere when it can,
    and falls back to them (never to one still silent) after a short wait."""
    avoid_providers: list[str] = Field(default_factory=list)
    """Providers the retry prefers not to use, with the same fallback."""
    reason: str = ""
    avoid_reason: str = ""
    """Why those are avoided, naming the failed node and its provider ('' when nothing is)."""


class RetryWithdrawn(Event):
    """A retry ordered after attempt ``attempt`` was declared lost is called off: the
    attempt's own late facts show it finished cleanly, so its result stands."""

    ROLES: ClassVar[Roles] = frozenset({Role.DECISION})

    next_attempt: int
    """The attempt the withdrawn RetryScheduled would have started."""
    reason: str = ""


class AttemptSuperseded(Event):
    """Attempt ``attempt`` must stop: another attempt's result won (``winner``). The
    dispatch processor routes it to ``node_id`` as a cancel; its compute is credited."""

    ROLES: ClassVar[Roles] = frozenset({Role.DECISION, Role.TO_NODE})

    node_id: str
    winner: int
    """The attempt whose result the job keeps."""
    reason: str = ""


class JobSucceeded(Event):
    """Terminal: the process exited 0 and every required output was stored."""

    ROLES: ClassVar[Roles] = frozenset({Role.TERMINAL, Role.SCHEDULER_INPUT, Role.DECISION})


class JobSucceededWithErrors(Event):
    """The process exited 0 but a declared output failed to store."""

    ROLES: ClassVar[Roles] = frozenset({Role.TERMINAL, Role.SCHEDULER_INPUT, Role.DECISION})

    summary: str = ""


class JobFailed(Event):
    """Terminal: the failure was not retried (not retryable, or the retry budget is spent)."""

    ROLES: ClassVar[Roles] = frozenset({Role.TERMINAL, Role.SCHEDULER_INPUT, Role.DECISION})

    failure_class: FailureClass
    attribution: Attribution = "user"
    summary: str = ""
    advice: str = ""
    reason: str = ""
    """Why no retry: 'not retryable', 'retry budget exhausted (3 of 3)', ..."""


class JobCancelled(Event):
    """Terminal: the job was stopped on request."""

    ROLES: ClassVar[Roles] = frozenset({Role.TERMINAL, Role.SCHEDULER_INPUT, Role.DECISION})

    summary: str = ""


# --------------------------------------------------------------------------- per-attempt streams


class AttemptHeartbeat(Event):
    """The agent's periodic word that the attempt still runs, with what it uses; silence is what the
    watchdog watches."""

    ROLES: ClassVar[Roles] = frozenset()

    TOPIC: ClassVar[str] = "heartbeats"
    node_id: str
    seq: int
    gpus: list[GpuUsage] = Field(default_factory=list)
    host_memory_used_mb: int = 0
    cpu_pct: float = 0.0


class LogChunk(Event):
    """A piece of one stream of an attempt's log, numbered so a reader tells a gap from the end."""

    ROLES: ClassVar[Roles] = frozenset()

    TOPIC: ClassVar[str] = "log-chunks"
    stream: Literal["stdout", "stderr", "system"]
    seq: int
    """Per attempt and stream, from 0 with no gaps."""
    first_line: int
    """Line number (per attempt and stream, from 1) of the first line in ``data``."""
    line_count: int
    data: str
    """At most 64 KiB of UTF-8; lines end with '\\n' except a split long line's parts."""
    truncated: bool = False
    """True on the chunk that hit the per-attempt byte quota; nothing follows it."""


class MeterTick(Event):
    """One interval of GPU time the agent metered, checked against the held time the lifecycle
    gives."""

    ROLES: ClassVar[Roles] = frozenset()

    TOPIC: ClassVar[str] = "meter-ticks"
    node_id: str
    tick_index: int
    """0, 1, 2 ... per attempt; duplicates with the same index are the same tick."""
    interval_start: datetime
    interval_s: float
    gpu_count: int
    gpu_model: str = ""
    gpu_seconds: float
    final: bool = False
    """The last, possibly partial, tick of the attempt."""


# --------------------------------------------------------------------------- nodes


class NodeRegistered(NodeEvent):
    """An agent joined with its inventory: the scheduler's fleet is built from these."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    provider: str = ""
    region: str = ""
    inventory_source: Literal["nvml", "declared"]
    inventory_note: str = ""
    """Why the declared inventory is used, e.g. 'NVML unavailable: driver not loaded'."""
    gpus: list[GpuDevice] = Field(default_factory=list)
    host_memory_mb: int = 0
    agent_version: str = ""
    heartbeat_interval_s: float = 5.0


class NodeHeartbeat(NodeEvent):
    """A node's periodic state (free GPUs, running attempts); a node that stops sending is not
    placed on."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    seq: int
    free_gpu_indices: list[int] = Field(default_factory=list)
    gpus: list[GpuUsage] = Field(default_factory=list)
    running_attempts: list[str] = Field(default_factory=list)
    """'job_id/attempt' of every attempt running on the node."""


class NodeDrained(NodeEvent):
    """The node takes no new attempts."""

    ROLES: ClassVar[Roles] = frozenset({Role.SCHEDULER_INPUT})

    reason: str = ""


# --------------------------------------------------------------------------- prices


class PriceEntry(BaseModel):
    """One row of a price catalog: a GPU-hour's price from ``effective_from`` on
    (checked by ``projections.prices``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    gpu_model: str
    region: str = ""
    """Empty: every region of the provider without a row of its own."""
    per_gpu_hour: str
    """Exact decimal text, e.g. ``'3.400000'``."""
    effective_from: datetime
    """A whole UTC hour, at or after the catalog's publication."""

    @field_validator("effective_from")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("must be timezone-aware (UTC)")
        return value.astimezone(UTC)


class PriceCatalogPublished(Event):
    """The operator published a version of the price catalog (``gridledger prices load``):
    every price on the ledger, so that replay prices usage exactly as the sink did."""

    ROLES: ClassVar[Roles] = frozenset()

    TOPIC: ClassVar[str] = "prices"
    KEY: ClassVar[str] = "price-catalog"
    version: int
    currency: str
    entries: list[PriceEntry] = Field(default_factory=list)
    source: str = ""
    """The file it was loaded from (its name only)."""

    @property
    def key(self) -> str:
        """One key: every version on one partition, in order."""
        return self.KEY


class LeaderElected(Event):
    """A scheduler took the lead with ``epoch`` (docs/architecture.md, "The scheduler's
    leader").

    Appended first to the one partition of ``scheduler-lease`` as a claim (``epoch`` 0
    there): the broker's offset of the claim gives the epoch, one more than the offset,
    unique and growing, from the ledger itself. Then once to every partition of
    ``job-events`` with that epoch, as a fence: from there on, readers of that partition
    drop a :class:`SchedulerDecision` of an older epoch (:mod:`projections.fence`). Not a
    job's event: ``job_id`` is empty and ``route`` is the key that places the marker on
    its partition."""

    ROLES: ClassVar[Roles] = frozenset({Role.FENCE})

    epoch: int = Field(0, ge=0)
    candidate: str = ""
    """The scheduler instance that leads (``scheduler/<host>/<pid>``)."""
    partition: int = Field(0, ge=0)
    """The ``job-events`` partition this marker fences (0 on the lease topic)."""
    route: str = ""
    """The record's key: one that hashes to ``partition``."""

    @property
    def key(self) -> str:
        """The key that puts the marker on its partition."""
        return self.route


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        JobSubmitted,
        JobRejected,
        JobQueued,
        AttemptScheduled,
        NoCapacity,
        AttemptAccepted,
        ComputeHeld,
        ComputeReleased,
        ImageResolved,
        ImageUnavailable,
        ContainerStarted,
        ContainerStartFailed,
        ProcessExited,
        CheckpointStored,
        OutputStored,
        OutputFailed,
        AttemptUnresponsive,
        AttemptResponsive,
        AttemptLost,
        DispatchTimedOut,
        FinishingTimedOut,
        RecordRefused,
        CancelRequested,
        AttemptCancelled,
        FailureClassified,
        RetryScheduled,
        RetryWithdrawn,
        AttemptSuperseded,
        JobSucceeded,
        JobSucceededWithErrors,
        JobFailed,
        JobCancelled,
        AttemptHeartbeat,
        LogChunk,
        MeterTick,
        NodeRegistered,
        NodeHeartbeat,
        NodeDrained,
        PriceCatalogPublished,
        LeaderElected,
    )
}
"""Every event type by name."""


def with_role(*roles: Role) -> tuple[type[Event], ...]:
    """The event types that have any of ``roles``, in :data:`EVENT_TYPES` order."""
    wanted = frozenset(roles)
    return tuple(cls for cls in EVENT_TYPES.values() if cls.ROLES & wanted)


TERMINAL_EVENTS = with_role(Role.TERMINAL)
"""The events that end a job (:attr:`Role.TERMINAL`)."""
