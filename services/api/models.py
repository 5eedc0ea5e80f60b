"""The API's request and response shapes as pydantic models.

They are what the OpenAPI document is generated from (``services.api.openapi``),
so a generated client is typed; tests validate real responses against them, so
the document cannot drift from what the handlers send. Read models the
projections own (``JobView``, ``AccountingRecord``) are reused, not copied.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from schemas.events import ENVELOPE_FIELDS, EVENT_TYPES
from schemas.log_position import parse_position
from schemas.spec import JobSpec, Line
from schemas.types import FitReport
from schemas.views import AccountingRecord, JobStatus, JobView

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""The window a since/until may name: further out, a period's arithmetic leaves the
calendar (a 500 the adversarial suite's fuzzing found), and no usage is there anyway."""


class ApiModel(BaseModel):
    """The base of the API's request and reply models: an unknown field is an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- queries


class ListJobsQuery(ApiModel):
    """Query of ``GET /v1/jobs``; ``status`` may repeat or be comma-separated."""

    status: list[JobStatus] = Field(default_factory=list, description="only jobs in these states")
    limit: int = Field(50, ge=1, le=500, description="jobs per page")
    cursor: str | None = Field(
        None,
        description="the `next_cursor` of the previous page (opaque); omit for the first page; "
        "any other value is a 400",
    )


class AsOfQuery(ApiModel):
    """Query of ``GET /v1/jobs/{job_id}`` and ``/explain``: the job as the ledger knew it then."""

    as_of: AwareDatetime | None = Field(
        None,
        ge=EARLIEST,
        le=LATEST,
        description="fold only the job's records the ledger held at this time (ISO 8601 with "
        "its zone): job events by the broker's append time, meter ticks by their record time; "
        "never by occurred_at. Omitted: the live view",
    )


class CancelRequest(ApiModel):
    """The optional body of ``POST /v1/jobs/{job_id}/cancel``."""

    reason: Line = Field("", max_length=500, description="why, in a few words (one line)")


class AccountingQuery(ApiModel):
    """Query of ``GET /v1/accounting``: every record, a page at a time."""

    limit: int = Field(1000, ge=1, le=5000, description="records per page")
    cursor: str | None = Field(
        None,
        description="the `next_cursor` of the previous page (opaque); omit for the first page",
    )
    since: AwareDatetime | None = Field(
        None,
        ge=EARLIEST,
        le=LATEST,
        description="only records whose latest event is at or after this time",
    )
    until: AwareDatetime | None = Field(
        None,
        ge=EARLIEST,
        le=LATEST,
        description="only records whose latest event is before this time",
    )


class UsageQuery(ApiModel):
    """Query of ``GET /v1/usage``: usage lines by period and group, a page at a time."""

    period: Literal["hour", "day", "month"] = Field("day", description="UTC periods")
    by: list[str] = Field(
        default_factory=list,
        description="group by tenant, gpu_model, provider, region or label:<key> (repeat "
        "or comma-separate); none: one line per period",
    )
    since: AwareDatetime | None = Field(
        None,
        ge=EARLIEST,
        le=LATEST,
        description="the first period's start (a period boundary, UTC)",
    )
    until: AwareDatetime | None = Field(
        None,
        ge=EARLIEST,
        le=LATEST,
        description="the end of the last period, exclusive (a period boundary, UTC)",
    )
    limit: int = Field(1000, ge=1, le=5000, description="lines per page")
    cursor: str | None = Field(
        None,
        description="the `next_cursor` of the previous page (opaque); omit for the first page",
    )


JOB_EVENT_TYPES = frozenset(n for n, c in EVENT_TYPES.items() if c.TOPIC == "job-events")
"""What ``GET /v1/events?type=`` may name: the events ``job_events`` stores."""


class EventsQuery(ApiModel):
    """Query of ``GET /v1/events``; ``type`` may repeat or be comma-separated."""

    job: str | None = Field(
        None, max_length=64, description="only this job's events (one of the tenant's jobs)"
    )
    type: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="only these event types (JobSubmitted, JobFailed, ...)",
    )
    since: int | None = Field(
        None,
        ge=0,
        le=2**63 - 1,
        description="resume after this event id (an SSE `id:`; a `Last-Event-ID` header wins); "
        "0: from the tenant's first event; omitted: from now on",
    )

    @field_validator("type")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        unknown = sorted({t for t in value if t not in JOB_EVENT_TYPES})
        if unknown:
            shown = ", ".join(ascii(t)[:60] for t in unknown[:5])
            raise ValueError(f"no job event type {shown}; use {', '.join(sorted(JOB_EVENT_TYPES))}")
        return value


class LogsQuery(ApiModel):
    """The query of GET /v1/jobs/{job_id}/logs."""

    follow: bool = Field(False, description="stream live until the job ends")
    attempt: int | None = Field(None, ge=1, le=10_000, description="only this attempt")
    stream: Literal["stdout", "stderr", "system"] | None = None
    format: Literal["text", "ndjson"] = Field(
        "text", description="ndjson: one chunk per line (also `Accept: application/x-ndjson`)"
    )
    since: datetime | None = Field(
        None,
        description="only chunks read at or after this time (ISO 8601; UTC when no zone is given)",
    )
    tail: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="only the last N lines (with follow: then the new ones)",
    )
    after: str | None = Field(
        None,
        max_length=2000,
        description="resume after these chunks: ATTEMPT:STREAM:SEQ, comma-separated, the last "
        "chunk received of each attempt and stream (`gridledger logs -f` sends it after a "
        "dropped connection); nothing at or before them is sent again",
    )

    @field_validator("after")
    @classmethod
    def _position(cls, value: str | None) -> str | None:
        if value is not None:
            parse_position(value)  # a ValueError names the item
        return value


# --------------------------------------------------------------------------- responses


class Links(ApiModel):
    """Where a job's other resources are."""

    self: str
    events: str
    logs: str
    accounting: str
    cancel: str
    explain: str
    timeline: str
    artifacts: str


class Problem(ApiModel):
    """One thing wrong with a request: the field, what is wrong, and how to fix it."""

    field: str = Field(examples=["resources.gpus"])
    problem: str
    fix: str


class SpecWarning(Problem):
    """Something in an accepted spec worth changing, with the rule that found it."""

    rule: str = Field(examples=["name.credential_word"])


class ProblemDetail(BaseModel):
    """RFC 9457 ``application/problem+json``, with gridledger's ``error`` code: the body of
    every 4xx and 5xx answer."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    error: str
    retry_after_s: float | None = None


class Problems(ProblemDetail):
    """A request the API refused: what is wrong, field by field, and how to fix it."""

    problems: list[Problem]


class ErrorBody(ProblemDetail):
    """Any other refusal: a machine-readable ``error`` and a sentence saying what to do."""

    hint: str | None = None
    field: str | None = Field(None, description="the field the refusal is about, if one")


class Created(ApiModel):
    """A submitted job: recorded on the ledger (``recorded``: the read model has it too)."""

    job_id: str
    status: JobStatus
    event_id: str | None = Field(None, description="the JobSubmitted event (absent on a replay)")
    recorded: bool
    links: Links
    warnings: list[SpecWarning] = Field(
        default_factory=list,
        description="things in the spec worth changing that did not stop it, e.g. env values "
        "that look like credentials (use `secrets`); `rule` names the rule",
    )


class DryRun(ApiModel):
    """A spec checked as a submit would check it, against the fleet now; nothing recorded."""

    recorded: Literal[False]
    would: Literal["queue", "reject"] = Field(
        description="queue: it fits some node (or no node has registered yet); reject: "
        "does_not_fit, see fit.explanation"
    )
    nodes_checked: int = Field(description="registered, not drained nodes the fit was checked on")
    fit: FitReport
    spec: JobSpec = Field(description="the spec as it would be recorded, defaults filled in")
    warnings: list[SpecWarning] = Field(
        default_factory=list, description="what a submit would warn about (as in Created)"
    )


class JobSummary(ApiModel):
    """One row of the job list."""

    job_id: str
    name: str
    status: JobStatus
    attempt: int
    image: str
    gpus: int
    submitted_at: datetime | None
    updated_at: datetime | None
    terminal_at: datetime | None
    failure_class: str | None
    attribution: str | None
    summary: str | None


class JobPage(ApiModel):
    """A page of jobs, newest first; follow ``next_cursor`` until it is null."""

    jobs: list[JobSummary]
    count: int
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: last")


class AccountingSummary(ApiModel):
    """The job's accounting totals, as the job document carries them; null before any record."""

    final: bool | None
    held_seconds: float | None
    gpu_seconds: float | None
    metered_gpu_seconds: float | None
    billable_gpu_seconds: float | None
    credited_gpu_seconds: float | None
    reconciled: bool | None
    policy_version: str | None


class JobDocument(JobView):
    """The JobView with what a client needs next: its spec, terminal, accounting summary,
    links."""

    spec: JobSpec | None = Field(
        None, description="the job's spec as submitted (null before the submission is stored)"
    )
    terminal: bool
    accounting: AccountingSummary | None
    links: Links
    as_of: datetime | None = Field(
        None, description="set when the document is the job as of that time (`?as_of=`)"
    )


class EventRecord(BaseModel):
    """One event of a job's history: the envelope, ``seq``, and the event's own fields."""

    model_config = ConfigDict(extra="allow")

    seq: int = Field(description="position in the job's de-duplicated history (1, 2, ...)")
    event_id: str
    job_id: str
    attempt: int
    type: str
    occurred_at: datetime
    producer: str
    causation_id: str | None
    schema_version: int


assert set(ENVELOPE_FIELDS) <= set(EventRecord.model_fields)


class EventList(ApiModel):
    """The reply of GET /v1/jobs/{job_id}/events."""

    job_id: str
    events: list[EventRecord]


class LogLine(ApiModel):
    """One line of the NDJSON log stream: a chunk, a keepalive, what the filters skipped, or
    the end marker."""

    attempt: int | None = None
    stream: str | None = None
    seq: int | None = None
    first_line: int | None = None
    line_count: int | None = None
    data: str | None = None
    truncated: bool | None = None
    occurred_at: datetime | None = None
    keepalive: bool | None = Field(None, description="nothing new; the stream is alive")
    skipped: str | None = Field(
        None,
        description="the chunks `tail`/`since` left out (ATTEMPT:STREAM:SEQ, as `after` takes): "
        "a reader that resumes sends them in `after` too",
    )
    end: bool | None = Field(None, description="the last line; `status` is the job's")
    status: str | None = None


class Explanation(ApiModel):
    """The plain-words explanation ``gridledger explain`` prints, from the same function."""

    job_id: str
    status: JobStatus
    text: str
    as_of: datetime | None = Field(None, description="set when explained as of that time")


class HistoryExport(BaseModel):
    """A job's history as a self-describing file (README.md, "Auditing without the
    cluster"): each record on job-events and meter-ticks with topic, partition, offset,
    record time, schema fingerprint, Avro bytes (base64) and decoded payload; each Avro
    schema once; the live views at export time. ``gridledger replay --file`` refolds it."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["gridledger-history"]
    format_version: int
    exported_at: datetime
    schemas: dict[str, dict[str, Any]] = Field(
        description="fingerprint (hex, as in the records) -> name, version and the Avro schema"
    )
    jobs: list[dict[str, Any]] = Field(description="job_id, records, live (the views)")


class Artifact(ApiModel):
    """One output or checkpoint an attempt stored."""

    kind: str = Field(description="output or checkpoint")
    path: str
    attempt: int
    bytes: int
    sha256: str
    step: int | None = None
    uri: str
    stored_at: datetime
    expires_at: datetime


class ArtifactList(ApiModel):
    """The reply of GET /v1/jobs/{job_id}/artifacts."""

    job_id: str
    retention_days: int
    artifacts: list[Artifact]


class ArtifactQuery(ApiModel):
    """Which artifact a download asks for."""

    path: str = Field(description="as listed by GET /v1/jobs/{job_id}/artifacts")
    attempt: int | None = Field(None, ge=1, description="which attempt's copy (default: latest)")


class SignedArtifact(Artifact):
    """An artifact with a short-lived download URL signed with the tenant's reader key."""

    url: str = Field(description="a short-lived download URL")
    url_expires_at: datetime


class Money(ApiModel):
    """Money at the price catalog's prices (``gridledger prices``): each hour of GPU time at
    the price in force in that hour, exact."""

    currency: str = Field(description="ISO 4217 code of the catalog; '' before any catalog")
    billable_cost: str = Field(description="exact decimal text, 9 places")
    credited_cost: str = Field(description="exact decimal text, 9 places: credits, priced alike")
    billable_cost_nanos: int = Field(description="the same in integer billionths")
    credited_cost_nanos: int
    unpriced_gpu_us: int = Field(
        description="GPU time no catalog row covered (not in the costs): hold it for review"
    )
    price_versions: list[int] = Field(description="the catalog versions whose rows priced it")


class AccountingDocument(Money, AccountingRecord):
    """A job's accounting record (``GET /v1/jobs/{id}/accounting``) with its money."""


class AccountingRow(Money):
    """One job's accounting totals in the tenant's listing."""

    job_id: str
    status: str
    final: bool
    policy_version: str
    held_seconds: float
    gpu_seconds: float
    metered_gpu_seconds: float
    billable_gpu_seconds: float
    credited_gpu_seconds: float
    reconciled: bool
    updated_at: datetime | None
    """The time of the record's latest event (what ``since``/``until`` select on)."""
    submitted_at: datetime | None
    labels: dict[str, str]


class AccountingList(ApiModel):
    """The reply of GET /v1/accounting: one page, newest jobs first."""

    records: list[AccountingRow]
    count: int
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: last")


class UsageLine(Money):
    """One period's usage of one group, in whole microseconds (exact sums of the jobs')."""

    line_id: str = Field(description="deterministic: the same period and group, the same id")
    period: str
    period_start: datetime
    period_end: datetime
    group: dict[str, str] = Field(description="the value of each `by` dimension")
    jobs: int = Field(description="jobs with usage in the line")
    held_us: int
    gpu_us: int
    metered_gpu_us: int
    billable_gpu_us: int
    credited_gpu_us: int
    final: bool = Field(description="every job in the line is final: the numbers will not change")


class UsagePage(ApiModel):
    """The reply of GET /v1/usage: lines ordered by period start, then group values."""

    period: str
    by: list[str]
    lines: list[UsageLine]
    count: int
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: last")


class PricesQuery(ApiModel):
    """Query of ``GET /v1/prices/in-force``."""

    at: AwareDatetime | None = Field(
        None, ge=EARLIEST, le=LATEST, description="the moment (default: now)"
    )


class PriceRow(ApiModel):
    """One row of a catalog version: a GPU-hour's price from ``effective_from`` on."""

    provider: str
    gpu_model: str
    region: str = Field(description="'' : every region of the provider without its own row")
    per_gpu_hour: str = Field(description="exact decimal text")
    effective_from: datetime


class PriceProblem(ApiModel):
    """Why the price book refused a version: the field and the rule."""

    field: str
    problem: str


class PriceVersion(ApiModel):
    """One PriceCatalogPublished event of the ledger, as the price book judged it."""

    version: int
    currency: str
    published_at: datetime
    source: str
    accepted: bool = Field(description="false: it broke a rule (problems) and prices nothing")
    problems: list[PriceProblem]
    entries: list[PriceRow]


class PriceList(ApiModel):
    """The reply of GET /v1/prices: every version, in the order the book folded them."""

    currency: str
    latest_version: int
    versions: list[PriceVersion]


class PriceInForce(PriceRow):
    """The row in force for one key."""

    version: int = Field(description="the catalog version the row comes from")


class PricesInForce(ApiModel):
    """The reply of GET /v1/prices/in-force: the row pricing each key at ``at``."""

    at: datetime
    currency: str
    prices: list[PriceInForce]


class CancelAccepted(ApiModel):
    """The reply to an accepted cancel: the CancelRequested event it appended."""

    job_id: str
    cancel_requested: bool
    event_id: str


class NodeGpu(BaseModel):
    """One GPU of a node as the fleet listing shows it (more fields may follow)."""

    model_config = ConfigDict(extra="allow")

    index: int
    model: str
    memory_total_mb: int = 0


class YourAttempt(ApiModel):
    """One of the tenant's attempts running on a node."""

    job_id: str
    attempt: int
    status: str = Field(description="the attempt's state (scheduled, starting, running, ...)")
    job_status: JobStatus


class NodeDocument(ApiModel):
    """A node as a tenant sees it: the shared capacity, and only the tenant's own work on it.

    Other tenants' attempts are never named; ``busy_gpu_count`` says how much of the
    node is taken without saying by whom.
    """

    node_id: str
    status: Literal["ready", "silent", "drained"] = Field(
        description="silent: no heartbeat within the scheduler's node timeout; nothing is "
        "placed there"
    )
    provider: str
    region: str
    inventory_source: str
    inventory_note: str
    gpus: list[NodeGpu]
    host_memory_mb: int
    agent_version: str
    heartbeat_interval_s: float
    registered_at: datetime | None
    last_heartbeat_at: datetime | None
    free_gpu_indices: list[int] = Field(
        description="as last reported; empty while the node is silent or drained"
    )
    busy_gpu_count: int
    your_attempts: list[YourAttempt] = Field(
        description="this tenant's attempts that hold or are about to hold GPUs there; an "
        "attempt declared lost is not among them"
    )
    drained_at: datetime | None
    drain_reason: str


class NodeList(ApiModel):
    """The reply of GET /v1/nodes."""

    nodes: list[NodeDocument]


class CheckResult(BaseModel):
    """One readiness check of a service."""

    model_config = ConfigDict(extra="allow")

    name: str
    ok: bool
    detail: str


class Liveness(BaseModel):
    """A service's answer to /livez: it runs."""

    model_config = ConfigDict(extra="allow")

    service: str
    pid: int
    alive: bool
    uptime_s: float


class Readiness(BaseModel):
    """A service's answer to /readyz: its checks, and whether all pass."""

    model_config = ConfigDict(extra="allow")

    service: str
    pid: int
    ready: bool
    checks: list[CheckResult]


# --------------------------------------------------------------------------- secrets


class SecretValue(ApiModel):
    """The body of PUT /v1/secrets/{name}: the value, sent once and never shown again."""

    value: str = Field(..., description="UTF-8 text without NUL, at most 64 KiB")


class SecretInfo(ApiModel):
    """What a tenant sees of one of its secrets: never the value."""

    name: str
    bytes: int = Field(..., description="the value's size in bytes")
    created_at: datetime
    updated_at: datetime


class SecretList(ApiModel):
    """The reply of GET /v1/secrets: names and times only."""

    secrets: list[SecretInfo]
    count: int


class SecretRemoved(ApiModel):
    """The reply of DELETE /v1/secrets/{name}."""

    name: str
    removed: bool


class AgentSecretsRequest(ApiModel):
    """An agent asks for the secrets of one attempt scheduled on its node."""

    job_id: str = Field(..., min_length=1, max_length=200)
    attempt: int = Field(..., ge=1, le=1000)


class MissingSecret(ApiModel):
    """A secret the job's spec names that its tenant has not set."""

    variable: str
    secret: str


class AgentSecrets(ApiModel):
    """The values of an attempt's secrets, by environment variable, and the ones missing."""

    job_id: str
    attempt: int
    values: dict[str, str]
    missing: list[MissingSecret]


# --------------------------------------------------------------------------- webhooks


class WebhookCreate(ApiModel):
    """The body of POST /v1/webhooks: where to deliver and which job events."""

    url: str = Field(
        ...,
        description="http(s) URL of a public address, at most 2,048 characters, no credentials",
    )
    events: list[str] = Field(
        ..., max_length=64, description="job event types, e.g. JobFailed, JobSucceeded"
    )


class WebhookInfo(ApiModel):
    """What a tenant sees of one of its webhook subscriptions: never the secret."""

    id: str
    url: str
    events: list[str]
    created_at: datetime
    rotated_at: datetime | None
    enabled: bool
    disabled_at: datetime | None
    disabled_reason: str = Field(..., description="why it was disabled and what to do; empty")
    consecutive_failures: int
    pending: int = Field(..., description="events waiting for delivery")


class WebhookCreated(WebhookInfo):
    """The reply of POST /v1/webhooks: the subscription and its secret, shown this once."""

    secret: str = Field(..., description="the Standard Webhooks signing secret (whsec_...)")


class WebhookList(ApiModel):
    """The reply of GET /v1/webhooks."""

    webhooks: list[WebhookInfo]
    count: int


class WebhookRemoved(ApiModel):
    """The reply of DELETE /v1/webhooks/{id}."""

    id: str
    removed: bool


class WebhookRotated(ApiModel):
    """The reply of POST /v1/webhooks/{id}/rotate: the new secret, shown this once."""

    id: str
    secret: str
    previous_valid_until: datetime = Field(
        ..., description="until then deliveries carry a signature with the previous secret too"
    )


class WebhookEnabled(ApiModel):
    """The reply of POST /v1/webhooks/{id}/enable."""

    id: str
    enabled: bool


class WebhookDelivery(ApiModel):
    """One delivery attempt."""

    event_id: str = Field(..., description="the event's id, its webhook-id header")
    event_type: str
    attempt: int
    at: datetime
    status_code: int | None = Field(..., description="the receiver's HTTP status; null: none")
    latency_ms: int
    ok: bool
    error: str = Field(..., description="what failed; empty when delivered")


class WebhookDeliveries(ApiModel):
    """The reply of GET /v1/webhooks/{id}/deliveries: the latest attempts, newest first."""

    id: str
    deliveries: list[WebhookDelivery]
