"""The route table: every operation the API serves, as data (``services.api.openapi.Operation``:
method, path, handler, operationId and the documented replies). ``build_app`` registers
these routes and ``/openapi.json`` describes the same table.
"""

from __future__ import annotations

from aiohttp import web

from schemas.spec import JobSpec
from services.api import models as m
from services.api.handlers.accounting import get_accounting, list_accounting, list_usage
from services.api.handlers.artifacts import artifact_url, list_artifacts
from services.api.handlers.console import (
    ASSET_TYPES,
    HTML,
    asset,
    favicon,
    fleet_page,
    job_page,
    jobs_page,
)
from services.api.handlers.events import stream_events
from services.api.handlers.fleet import list_nodes
from services.api.handlers.jobs import (
    export_job,
    get_events,
    get_explanation,
    get_job,
    get_timeline,
    list_jobs,
)
from services.api.handlers.logs import get_logs
from services.api.handlers.prices import list_prices, prices_in_force
from services.api.handlers.secrets import list_secrets, remove_secret, resolve_secrets, set_secret
from services.api.handlers.submit import cancel_job, dry_run_job, submit_job
from services.api.handlers.webhooks import (
    add_webhook,
    enable_webhook,
    list_deliveries,
    list_webhooks,
    remove_webhook,
    rotate_webhook,
)
from services.api.openapi import Header, Operation, Reply, serve_document
from services.api.timeline import Timeline
from services.ops.server import OpsEndpoints

ROUTES = web.AppKey("routes", tuple)
"""Every operation the app serves (the table plus the ops endpoints)."""


_JOB = "/v1/jobs/{job_id}"


UNAVAILABLE = Reply(
    "application/problem+json with Retry-After: a dependency (broker, Postgres, object store) "
    "is away; nothing was recorded",
    m.ProblemDetail,
)


_BAD_BODY = "the body is not JSON or YAML, is nested too deep or has a too long number"


TOO_LARGE = Reply("the body is larger than the limit", m.Problems)


INVALID_AS_OF = Reply("as_of is not a time with its zone between 1970 and 9000", m.Problems)


INVALID_SPEC = Reply("the spec is invalid: each field, the problem and the fix", m.Problems)


_SECRET = "/v1/secrets/{name}"
_ONE = "/v1/webhooks/{id}"
_NO_SUCH = Reply("no webhook by that id for this tenant", m.ProblemDetail)
_TAGS = ("webhooks",)
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST",
        "/v1/jobs",
        submit_job,
        "submitJob",
        "Submit a job (JSON or YAML JobSpec)",
        {
            200: Reply("a retried submit with the same Idempotency-Key: the same job", m.Created),
            202: Reply(
                "accepted: the broker acknowledged JobSubmitted; `recorded` is false while the "
                "read models lag",
                m.Created,
            ),
            503: UNAVAILABLE,
            400: Reply(
                f"{_BAD_BODY}, or a header (Idempotency-Key, X-Gridledger-Submitter) is invalid",
                m.Problems,
            ),
            404: Reply("resume_from names no job of this tenant", m.ErrorBody),
            409: Reply("the Idempotency-Key was used with another spec", m.ErrorBody),
            413: TOO_LARGE,
            422: INVALID_SPEC,
        },
        body=JobSpec,
        body_media=("application/json", "application/yaml"),
        headers=(
            Header(
                "Idempotency-Key",
                "a retried submit with the same key returns the same job (200) instead of "
                "creating another",
            ),
        ),
    ),
    Operation(
        "POST",
        "/v1/jobs/dry-run",
        dry_run_job,
        "dryRunJob",
        "Check a spec as a submit would, against the live fleet; nothing is recorded",
        {
            200: Reply(
                "valid: whether the scheduler's pre-flight would queue or reject it, with the "
                "numbers",
                m.DryRun,
            ),
            503: UNAVAILABLE,
            400: Reply(_BAD_BODY, m.Problems),
            404: Reply("resume_from names no job of this tenant", m.ErrorBody),
            413: TOO_LARGE,
            422: INVALID_SPEC,
        },
        body=JobSpec,
        body_media=("application/json", "application/yaml"),
    ),
    Operation(
        "GET",
        "/v1/jobs",
        list_jobs,
        "listJobs",
        "The tenant's jobs, newest first, a page at a time",
        {
            200: Reply("a page; follow next_cursor until it is null", m.JobPage),
            400: Reply("the cursor is not one this API issued", m.Problems),
        },
        query=m.ListJobsQuery,
    ),
    Operation(
        "GET",
        _JOB,
        get_job,
        "getJob",
        "The job's view: status, failure, advice, evidence, attempts (as_of: as known then)",
        {200: Reply("the job", m.JobDocument), 422: INVALID_AS_OF},
        query=m.AsOfQuery,
    ),
    Operation(
        "GET",
        f"{_JOB}/export",
        export_job,
        "exportJobHistory",
        "The job's history as a self-describing file: every record with its place, schema "
        "fingerprint and payload, the schemas, and the live views",
        {200: Reply("the export (`gridledger replay --file` refolds it)", m.HistoryExport)},
        tags=("audit",),
    ),
    Operation(
        "GET",
        f"{_JOB}/events",
        get_events,
        "listJobEvents",
        "Every lifecycle event of the job, in order",
        {200: Reply("the job's history", m.EventList)},
    ),
    Operation(
        "GET",
        f"{_JOB}/timeline",
        get_timeline,
        "getJobTimeline",
        "The lifecycle as lanes of states (job, each attempt), the uncertain windows, "
        "and the state after every event",
        {200: Reply("the timeline", Timeline)},
    ),
    Operation(
        "GET",
        f"{_JOB}/explain",
        get_explanation,
        "explainJob",
        "What happened, why, whose side, what to do next (the text `gridledger explain` prints)",
        {200: Reply("the explanation", m.Explanation), 422: INVALID_AS_OF},
        query=m.AsOfQuery,
    ),
    Operation(
        "GET",
        f"{_JOB}/logs",
        get_logs,
        "getJobLogs",
        "The job's logs; follow=true streams live until the job ends",
        {
            200: Reply(
                "text/plain, or application/x-ndjson with one LogLine per line: chunks, "
                "{keepalive: true} while a followed job is quiet, {skipped: POSITION} when tail or "
                "since left chunks out, and a final {end: true, status}",
                media={"text/plain": {"schema": {"type": "string"}}},
                model=m.LogLine,
                model_media="application/x-ndjson",
            )
        },
        query=m.LogsQuery,
    ),
    Operation(
        "GET",
        "/v1/events",
        stream_events,
        "streamEvents",
        "The tenant's job events as server-sent events (CloudEvents JSON), resumable with "
        "Last-Event-ID",
        {
            200: Reply(
                "text/event-stream: per event an `id:` (its position; resume after it with "
                "Last-Event-ID or ?since=) and `data:` (a CloudEvents 1.0 JSON document whose "
                "data is the event); `:` comment lines while quiet",
                media={"text/event-stream": {"schema": {"type": "string"}}},
            ),
            400: Reply(
                "the Last-Event-ID header (or since) is not an id this stream gave out",
                m.Problems,
            ),
            404: Reply("?job= names no job of this tenant", m.ErrorBody),
            429: Reply(
                "the tenant (or the API) holds as many open streams as allowed; Retry-After",
                m.ProblemDetail,
            ),
        },
        query=m.EventsQuery,
        headers=(
            Header(
                "Last-Event-ID",
                "the id of the last event received: the stream resumes after it",
            ),
        ),
    ),
    Operation(
        "GET",
        f"{_JOB}/accounting",
        get_accounting,
        "getJobAccounting",
        "The job's accounting record",
        {200: Reply("the record and its money", m.AccountingDocument)},
    ),
    Operation(
        "POST",
        f"{_JOB}/cancel",
        cancel_job,
        "cancelJob",
        "Ask for the job to be cancelled",
        {
            202: Reply("CancelRequested recorded", m.CancelAccepted),
            400: Reply("the body is not JSON", m.Problems),
            409: Reply("the job is already terminal", m.ErrorBody),
            422: Reply("the reason is invalid", m.Problems),
            503: UNAVAILABLE,
        },
        body=m.CancelRequest,
        body_required=False,
    ),
    Operation(
        "GET",
        f"{_JOB}/artifacts",
        list_artifacts,
        "listJobArtifacts",
        "The outputs and checkpoints the job stored: path, attempt, size, sha256, expiry",
        {200: Reply("the stored artifacts", m.ArtifactList)},
        tags=("artifacts",),
    ),
    Operation(
        "GET",
        f"{_JOB}/artifacts/url",
        artifact_url,
        "getJobArtifactUrl",
        "A short-lived download URL for one stored artifact",
        {
            200: Reply("the artifact and its signed URL", m.SignedArtifact),
            503: UNAVAILABLE,
        },
        query=m.ArtifactQuery,
        tags=("artifacts",),
    ),
    Operation(
        "GET",
        "/v1/accounting",
        list_accounting,
        "listAccounting",
        "Every accounting record of the tenant, newest jobs first, a page at a time",
        {200: Reply("a page of records; follow next_cursor until it is null", m.AccountingList)},
        query=m.AccountingQuery,
        tags=("accounting",),
    ),
    Operation(
        "GET",
        "/v1/usage",
        list_usage,
        "listUsage",
        "The tenant's usage by UTC hour, day or month and by group, exact to the microsecond",
        {200: Reply("a page of usage lines; follow next_cursor until it is null", m.UsagePage)},
        query=m.UsageQuery,
        tags=("accounting",),
    ),
    Operation(
        "GET",
        "/v1/prices",
        list_prices,
        "listPrices",
        "Every version of the price catalog (read-only: operators publish with "
        "`gridledger prices load`, on the ledger)",
        {200: Reply("the versions, oldest first", m.PriceList)},
        tags=("accounting",),
    ),
    Operation(
        "GET",
        "/v1/prices/in-force",
        prices_in_force,
        "getPricesInForce",
        "The price per GPU-hour of each provider, GPU model and region at a moment",
        {200: Reply("the rows in force", m.PricesInForce)},
        query=m.PricesQuery,
        tags=("accounting",),
    ),
    Operation(
        "GET",
        "/v1/nodes",
        list_nodes,
        "listNodes",
        "The fleet's capacity, with only this tenant's attempts on each node",
        {200: Reply("the nodes", m.NodeList)},
        tags=("fleet",),
    ),
    Operation(
        "GET",
        "/openapi.json",
        serve_document,
        "getOpenApi",
        "This document",
        {200: Reply("the OpenAPI 3.1 document", media={"application/json": {"schema": {}}})},
        public=True,
        tags=("ops",),
    ),
    Operation(
        "GET",
        "/v1/secrets",
        list_secrets,
        "listSecrets",
        "The tenant's secrets: names, sizes and times, never values",
        {200: Reply("the secrets", m.SecretList)},
        tags=("secrets",),
    ),
    Operation(
        "PUT",
        _SECRET,
        set_secret,
        "setSecret",
        "Store or replace one of the tenant's secrets (sealed at rest; never shown again)",
        {
            200: Reply("replaced", m.SecretInfo),
            201: Reply("stored", m.SecretInfo),
            409: Reply("the tenant holds the most secrets it may", m.ProblemDetail),
            422: Reply(
                "the name or the value was refused: the field, the problem, the fix",
                m.ProblemDetail,
            ),
        },
        body=m.SecretValue,
        tags=("secrets",),
    ),
    Operation(
        "DELETE",
        _SECRET,
        remove_secret,
        "removeSecret",
        "Remove one of the tenant's secrets",
        {
            200: Reply("removed", m.SecretRemoved),
            404: Reply("no secret by that name", m.ProblemDetail),
        },
        tags=("secrets",),
    ),
    Operation(
        "POST",
        "/v1/agent/secrets",
        resolve_secrets,
        "resolveAttemptSecrets",
        "For agents: the values of the secrets of an attempt scheduled on the calling node",
        {
            200: Reply(
                "the values by variable, and the secrets the tenant has not set", m.AgentSecrets
            ),
            401: Reply("not this node's agent credential", m.ProblemDetail),
            403: Reply("the attempt is scheduled on another node", m.ProblemDetail),
            409: Reply("the attempt is not recorded yet; retry", m.ProblemDetail),
            410: Reply("the attempt is over (released, lost or superseded)", m.ProblemDetail),
        },  # fmt: skip
        body=m.AgentSecretsRequest,
        agent=True,
        tags=("agent",),
    ),
    Operation(
        "POST",
        "/v1/webhooks",
        add_webhook,
        "addWebhook",
        "Subscribe a URL to the tenant's job events (Standard Webhooks signatures)",
        {
            201: Reply("added; the secret is shown this once", m.WebhookCreated),
            409: Reply("the tenant holds the most webhooks it may", m.Problems),
            422: Reply(
                "the URL (scheme, credentials, length, a non-public address) or the event "
                "types were refused: the field, the problem, the fix",
                m.Problems,
            ),
        },
        body=m.WebhookCreate,
        tags=_TAGS,
    ),
    Operation(
        "GET",
        "/v1/webhooks",
        list_webhooks,
        "listWebhooks",
        "The tenant's webhooks: URL, events, enabled or why disabled, events pending",
        {200: Reply("the webhooks", m.WebhookList)},
        tags=_TAGS,
    ),
    Operation(
        "DELETE",
        _ONE,
        remove_webhook,
        "removeWebhook",
        "Remove a webhook, its queued events and its delivery log",
        {200: Reply("removed", m.WebhookRemoved), 404: _NO_SUCH},
        tags=_TAGS,
    ),
    Operation(
        "POST",
        f"{_ONE}/rotate",
        rotate_webhook,
        "rotateWebhookSecret",
        "A new signing secret; the previous one signs too until previous_valid_until",
        {200: Reply("rotated; the new secret is shown this once", m.WebhookRotated), 404: _NO_SUCH},
        tags=_TAGS,
    ),
    Operation(
        "POST",
        f"{_ONE}/enable",
        enable_webhook,
        "enableWebhook",
        "Enable a disabled webhook again; what was queued meanwhile is delivered",
        {200: Reply("enabled", m.WebhookEnabled), 404: _NO_SUCH},
        tags=_TAGS,
    ),
    Operation(
        "GET",
        f"{_ONE}/deliveries",
        list_deliveries,
        "listWebhookDeliveries",
        "The webhook's latest delivery attempts: status code, latency, error",
        {200: Reply("the attempts, newest first", m.WebhookDeliveries), 404: _NO_SUCH},
        tags=_TAGS,
    ),
    Operation(
        "GET",
        "/console",
        jobs_page,
        "consoleJobs",
        "Console: the tenant's jobs, with filters and live status",
        {200: Reply("the page", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/jobs/{job_id}",
        job_page,
        "consoleJob",
        "Console: one job's timeline, live logs, explanation, outputs and accounting",
        {200: Reply("the page (the job is fetched by its script)", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/fleet",
        fleet_page,
        "consoleFleet",
        "Console: the fleet",
        {200: Reply("the page", media=HTML)},
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/console/static/{name}",
        asset,
        "consoleAsset",
        "Console: a stylesheet, script or icon",
        {
            200: Reply(
                "the file", media={t: {"schema": {"type": "string"}} for t in ASSET_TYPES.values()}
            ),
            404: Reply("no such asset", m.ProblemDetail),
        },
        public=True,
        tags=("console",),
    ),
    Operation(
        "GET",
        "/favicon.ico",
        favicon,
        "favicon",
        "The console's icon",
        {200: Reply("the icon", media={ASSET_TYPES[".ico"]: {"schema": {"type": "string"}}})},
        public=True,
        tags=("console",),
    ),
)


def ops_operations(endpoints: OpsEndpoints) -> tuple[Operation, ...]:
    """The ops endpoints every service has (``services.ops``), on the API's port too."""
    text = {"text/plain": {"schema": {"type": "string"}}}
    return (
        Operation(
            "GET",
            "/healthz",
            endpoints.healthz,
            "getLiveness",
            "The process is alive (liveness)",
            {200: Reply("alive", m.Liveness)},
            public=True,
            tags=("ops",),
        ),
        Operation(
            "GET",
            "/readyz",
            endpoints.readyz,
            "getReadiness",
            "Readiness: broker metadata fetched, Postgres answers SELECT 1",
            {
                200: Reply("every check passed", m.Readiness),
                503: Reply("at least one check failed", m.Readiness),
            },
            public=True,
            tags=("ops",),
        ),
        Operation(
            "GET",
            "/metrics",
            endpoints.metrics,
            "getMetrics",
            "Prometheus metrics (text exposition format 0.0.4)",
            {200: Reply("the metrics", media=text)},
            public=True,
            tags=("ops",),
        ),
    )
