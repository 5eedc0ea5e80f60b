"""The HTTP API. ``build_app(settings, ledger, pool)`` is the composition root.

Writes go to the ledger (JobSubmitted, CancelRequested, acks=all); reads come
from the sink's Postgres read models, except live log following, which reads
the job's log-chunks partition. A job of another tenant is a 404, like a job
that does not exist.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from projections import usage
from projections.fit import NodeCapacity, check_fit
from projections.prices import PriceBook
from schemas.events import CancelRequested, JobSubmitted, PriceCatalogPublished, new_event_id
from schemas.log_position import parse_position
from schemas.spec import JobSpec
from schemas.views import JOB_STATUSES, TERMINAL_STATUSES
from services.api import (
    artifacts,
    auth,
    console,
    credentials,
    errors,
    idempotency,
    problems,
    queries,
    security,
    tenant_secrets,
    webhooks,
)
from services.api import models as m
from services.api import usage as usage_api
from services.api.events import (
    AheadError,
    EventHub,
    Filters,
    TooManyStreamsError,
    serve_events,
)
from services.api.logs import serve_logs
from services.api.openapi import (
    Header,
    Operation,
    Reply,
    agent_paths,
    openapi_document,
    public_paths,
    register,
)
from services.api.timeline import Timeline, timeline
from services.cli.explain import explain
from services.clock import utcnow
from services.ledger.client import Ledger
from services.objectstore import ObjectRef, ObjectStoreError
from services.ops.checks import close_checks
from services.ops.logs import log_context
from services.ops.server import OpsEndpoints, request_metrics
from services.ops.wiring import api_endpoints
from services.replay import export
from services.replay.offline import fold
from services.settings import Settings
from services.sink import db
from services.sink.writer import load_book

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", Settings)
LEDGER = web.AppKey("ledger", Ledger)
POOL = web.AppKey("pool", asyncpg.Pool)
PRODUCER = web.AppKey("producer", str)
SUBMISSIONS = web.AppKey("submissions", idempotency.Submissions)
SIGNER = web.AppKey("signer", artifacts.Signer)
ID_KEY = web.AppKey("id_key", idempotency.IdKey)
"""The HMAC key of keyed job ids (services/api/idempotency.py)."""
OPENAPI = web.AppKey("openapi", dict)
ROUTES = web.AppKey("routes", tuple)
"""Every operation the app serves (the table plus the ops endpoints)."""
EVENTS = web.AppKey("events", EventHub)
"""The one shared tail of ``job_events`` behind every ``GET /v1/events`` stream."""


def not_found(job_id: str) -> web.HTTPNotFound:
    """The 404 for a job this tenant does not own or that does not exist: the two look the same, so
    ids cannot be probed."""
    return errors.not_found(
        f"no job {_shown(job_id)} for this tenant; `gridledger status` lists yours (GET /v1/jobs)"
    )


def _shown(value: str) -> str:
    """A value from the request as a message may quote it: printable, and short."""
    return value if problems.printable(value) else ascii(value)[:80]


def _json_text(data: Any) -> str:
    return json.dumps(data, default=str)


def problem_response(status: int, items: list[problems.Problem], error: str) -> web.Response:
    """A 4xx problem document listing each problem with its field and fix: every validation
    error's shape."""
    body = problems.refusal(status, error, items)
    return web.json_response(body, status=status, content_type=errors.PROBLEM_JSON)


def _tenant(request: web.Request) -> str:
    return request[auth.TENANT_KEY]


async def _own_job(request: web.Request) -> asyncpg.Record:
    job_id = request.match_info["job_id"]
    if not problems.valid_job_id(job_id):
        raise not_found(job_id)  # no job has such an id; it never reaches Postgres
    row = await queries.job_row(request.app[POOL], _tenant(request), job_id)
    if row is None:
        raise not_found(job_id)
    return row


# --------------------------------------------------------------------------- handlers


async def submit_job(request: web.Request) -> web.Response:
    """POST /v1/jobs: validate the spec, append JobSubmitted, answer 202 with the job's links.

    Accepted, not created: the job is on the ledger, and the read models follow. A submit
    repeated with its Idempotency-Key answers 200 with the job it made the first time.
    """
    tenant = _tenant(request)
    key = request.headers.get("Idempotency-Key", "").strip()
    submitter = request.headers.get("X-Gridledger-Submitter", tenant)
    header_problems = [
        problems.Problem(name, why, fix)
        for name, why, fix in (
            ("Idempotency-Key", idempotency.key_problem(key), "use a UUID"),
            (
                "X-Gridledger-Submitter",
                problems.line_problem(submitter, 200),
                "send a name or an email address, at most 200 characters",
            ),
        )
        if why
    ]
    if header_problems:
        return problem_response(400, header_problems, "invalid_header")
    spec = await _spec_of(request)
    if isinstance(spec, web.Response):
        return spec
    if spec.resume_from is not None:
        await _own_resume_source(request, tenant, spec.resume_from)
    warned = credentials.warnings(spec.env)

    def submitted(job_id: str, event_id: str) -> JobSubmitted:
        return JobSubmitted(
            event_id=event_id,
            job_id=job_id,
            attempt=0,
            occurred_at=datetime.now(UTC),
            producer=request.app[PRODUCER],
            tenant=tenant,
            submitter=submitter,
            spec=spec,
        )

    if not key:
        event = submitted(idempotency.new_job_id(), new_event_id())
        await _record(request, event)
        return await _accepted(request, event.job_id, event.event_id, warned)

    # One key, one job (services/api/idempotency.py has the rule).
    job_id = idempotency.job_id_for(request.app[ID_KEY].get(), tenant, key)
    event_id = idempotency.event_id_for(tenant, key)
    digest = idempotency.spec_digest(spec)

    async def lookup() -> idempotency.Known | None:
        try:
            row = await queries.job_row(request.app[POOL], tenant, job_id)
        except Exception as exc:
            if not db.postgres_unavailable(exc):
                raise
            return None  # Postgres away: the ids derived from the key still make it one job
        if row is None:
            return None
        return idempotency.Known(idempotency.spec_digest(json.loads(row["view"])["spec"]))

    async def append() -> idempotency.Known:
        await _record(request, submitted(job_id, event_id))
        return idempotency.Known(digest)

    known, appended = await request.app[SUBMISSIONS].once(tenant, key, lookup, append)
    if known.digest != digest:
        return errors.problem(
            409,
            "idempotency_key_reused",
            errors.title(409),
            f"Idempotency-Key {key!r} was used for {job_id} with another spec; use a new key "
            "for a new job",
        )
    if appended:
        return await _accepted(request, job_id, event_id, warned)
    status = await _status_if_known(request.app[POOL], job_id)
    body = {"job_id": job_id, "status": status or "submitted", "recorded": status is not None}
    return web.json_response(
        {**body, "links": queries.links(job_id), "warnings": warned}, status=200
    )


async def _own_resume_source(request: web.Request, tenant: str, job_id: str) -> None:
    """A job resumes only from a job of its own tenant: any other id is a 404, as for a job
    that does not exist, so nothing of another tenant's jobs is revealed or reused."""
    if not problems.valid_job_id(job_id) or (
        await queries.job_row(request.app[POOL], tenant, job_id) is None
    ):
        raise errors.not_found(
            f"resume_from: no job {_shown(job_id)} for this tenant; resume from one of your "
            "own jobs (`gridledger status` lists them)",
            field="resume_from",
        )


async def _spec_of(request: web.Request) -> JobSpec | web.Response:
    """The request's spec, or the problem answer (413, 400, 422) that refuses it."""
    limit = request.app[SETTINGS].api_max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        return _too_large(request.content_length, limit)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _too_large(None, limit)
    try:
        return problems.read_spec(
            raw, request.content_type, limit, request.app[SETTINGS].api_max_spec_bytes
        )
    except problems.SpecRefusedError as exc:
        return problem_response(exc.status, exc.problems, exc.error)


async def dry_run_job(request: web.Request) -> web.Response:
    """POST /v1/jobs/dry-run: what a submit of this spec would meet, with nothing recorded.

    The spec's problems answer as for a submit (413, 400, 422); a valid spec gets 200
    with the scheduler's pre-flight fit (``projections.fit.check_fit``) against the
    fleet it would see now (every registered, not drained node of the read model):
    ``would`` is ``queue`` (it fits, or no node has registered yet) or ``reject``
    (``does_not_fit``, with the numbers). Placement and the queue are not simulated. A
    ``resume_from`` that is not one of the tenant's jobs is the submit's 404.
    """
    spec = await _spec_of(request)
    if isinstance(spec, web.Response):
        return spec
    if spec.resume_from is not None:
        await _own_resume_source(request, _tenant(request), spec.resume_from)
    fleet = [
        NodeCapacity(
            node_id=n["node_id"],
            provider=n.get("provider") or "",
            region=n.get("region") or "",
            gpus=n.get("gpus") or [],
        )
        for n in await queries.nodes(request.app[POOL])
        if n.get("registered_at") and n.get("status") != "drained"
    ]
    report = check_fit(spec, fleet)
    body = {
        "recorded": False,
        "would": "queue" if report.fits else "reject",
        "nodes_checked": len(fleet),
        "fit": report.model_dump(mode="json"),
        "spec": spec.model_dump(mode="json"),
        "warnings": credentials.warnings(spec.env),
    }
    return web.json_response(body)


async def _record(request: web.Request, event: JobSubmitted) -> None:
    """Append the submission; it is recorded once the broker acknowledged it."""
    with log_context(job_id=event.job_id, attempt=0, event_id=event.event_id):
        await request.app[LEDGER].append(event)
        log.info("recorded JobSubmitted from tenant %s", event.tenant)


async def _accepted(
    request: web.Request, job_id: str, event_id: str, warned: list[dict[str, str]]
) -> web.Response:
    """202: the broker acknowledged the JobSubmitted; the job runs whatever Postgres does."""
    recorded = await _wait_recorded(
        request.app[POOL], job_id, request.app[SETTINGS].api_submit_visible_s
    )
    body = {
        "job_id": job_id,
        "status": "submitted",
        "event_id": event_id,
        "recorded": recorded,
        "links": queries.links(job_id),
        "warnings": warned,
    }
    return web.json_response(body, status=202, headers={"Location": f"/v1/jobs/{job_id}"})


async def _status_if_known(pool: asyncpg.Pool, job_id: str) -> str | None:
    """The job's status in the read model; None when it is not there yet or Postgres is away."""
    try:
        return await queries.job_status(pool, job_id)
    except Exception as exc:
        if not db.postgres_unavailable(exc):
            raise
        return None


def _too_large(size: int | None, limit: int) -> web.Response:
    refused = problems.too_large(size, limit)
    return problem_response(refused.status, refused.problems, refused.error)


async def _wait_recorded(pool: asyncpg.Pool, job_id: str, timeout: float) -> bool:
    """Give the sink a moment so an immediate GET finds the job (read-your-writes).

    False at once when Postgres is away: the job is on the ledger, which is all a
    202 promises; ``recorded: false`` tells the client that status reads lag.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            if await queries.job_recorded(pool, job_id):
                return True
        except Exception as exc:
            if not db.postgres_unavailable(exc):
                raise
            return False
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.05)


async def list_jobs(request: web.Request) -> web.Response:
    """GET /v1/jobs: the tenant's jobs, newest first, a page at a time (with the next cursor)."""
    try:
        query = m.ListJobsQuery.model_validate(
            _query(request, lists=("status",), only=("limit", "cursor"))
        )
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc), "invalid_query")
    try:
        after = queries.decode_cursor(query.cursor) if query.cursor else None
    except ValueError as exc:
        return _cursor_problem(exc)
    jobs, next_cursor = await queries.list_jobs(
        request.app[POOL], _tenant(request), list(query.status), query.limit, after
    )
    body = {
        "jobs": jobs,
        "count": len(jobs),
        "next_cursor": queries.encode_cursor(next_cursor) if next_cursor else None,
    }
    return web.json_response(body)


def _query_problems(exc: ValidationError, most: int = 500) -> list[problems.Problem]:
    """Query errors named by parameter, with the accepted values as the fix (``most``: the
    largest ``limit``)."""
    out = []
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else "(query)"
        if name == "status":
            fix = f"use one of {', '.join(JOB_STATUSES)}"
            problem = f"unknown status {error.get('input')!s}"
        elif name == "limit":
            fix, problem = f"use a whole number from 1 to {most}", str(error["msg"])
        elif name == "as_of":
            fix = "an ISO 8601 time with its zone, 1970 to 9000: 2026-12-01T09:30:00Z"
            problem = str(error["msg"])
        else:
            fix, problem = "see /openapi.json for the accepted parameters", str(error["msg"])
        out.append(problems.Problem(name, problem, fix))
    return out


async def get_job(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}: the job's state, attempts, failure and accounting summary
    (``?as_of=``: as the ledger knew them then)."""
    document = await _job_document(request)
    return web.json_response(document, dumps=_json_text)


async def _job_document(request: web.Request) -> dict[str, Any]:
    """The job document of the request's job: live from the read models, or with
    ``?as_of=TIME`` folded from the job's records the ledger held at TIME
    (:func:`services.replay.export.as_of`)."""
    try:
        moment = m.AsOfQuery.model_validate(_query(request)).as_of
    except ValidationError as exc:
        raise web.HTTPUnprocessableEntity(
            text=json.dumps(problems.refusal(422, "invalid_query", _query_problems(exc))),
            content_type=errors.PROBLEM_JSON,
        ) from exc
    row = await _own_job(request)
    if moment is None:
        record = await queries.accounting(request.app[POOL], row["job_id"])
        return queries.job_document(row, record)
    records = await export.read_job(request.app[LEDGER], row["job_id"])
    history, ticks = export.as_of(records, moment)
    if not history:
        first = min((export.ledger_time(r) for r in records), default=None)
        raise errors.not_found(
            f"job {row['job_id']} was not on the ledger yet at {moment.isoformat()}"
            + (f"; its first record was appended at {first.isoformat()}" if first else "")
        )
    folded = fold(history, ticks)
    document = queries.view_document(
        folded.view.model_dump(mode="json"), folded.accounting.model_dump(mode="json")
    )
    return {**document, "as_of": moment.isoformat()}


async def export_job(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/export: the job's history as a self-describing file, with the
    live views (``gridledger history JOB -o json``; ``replay --file`` refolds it)."""
    row = await _own_job(request)
    pool, job_id = request.app[POOL], row["job_id"]
    records = await export.read_job(request.app[LEDGER], job_id)
    row = await _caught_up(pool, row, export.job_events_in(records))
    schemas: dict[str, dict[str, Any]] = {}
    record, money = await queries.accounting_parts(pool, job_id) or (None, None)
    job = export.job_export(job_id, records, queries.view_of(row), record, money, schemas)
    body = export.document([job], schemas, datetime.now(UTC))
    return web.json_response(body, dumps=_json_text)


EXPORT_CATCH_UP_S = 5.0
"""How long an export waits for the read models to fold the records it read."""


async def _caught_up(pool: asyncpg.Pool, row: asyncpg.Record, events: int) -> asyncpg.Record:
    """The job's row once the sink has folded ``events`` distinct job events (or, after
    :data:`EXPORT_CATCH_UP_S`, as it is: the replay then shows the lag as a difference)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EXPORT_CATCH_UP_S
    while queries.view_of(row).get("event_count", 0) < events and loop.time() < deadline:
        await asyncio.sleep(0.05)
        row = await queries.job_row(pool, row["tenant"], row["job_id"]) or row
    return row


async def get_events(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/events: every event of the job, in ledger order."""
    row = await _own_job(request)
    events = await queries.events(request.app[POOL], row["job_id"])
    return web.json_response({"job_id": row["job_id"], "events": events}, dumps=_json_text)


async def get_explanation(request: web.Request) -> web.Response:
    """The text ``gridledger explain`` prints, made by the same function, without colour
    (``?as_of=``: of the job as the ledger knew it then)."""
    document = json.loads(_json_text(await _job_document(request)))
    text = ANSI.sub("", explain(document))
    body = {"job_id": document["job_id"], "status": document["status"], "text": text}
    if document.get("as_of"):
        body["as_of"] = document["as_of"]
    return web.json_response(body)


ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""The CLI colours its headings on a terminal; the API serves plain text."""


async def get_timeline(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/timeline: the job's and each attempt's states as time segments, for the
    console."""
    row = await _own_job(request)
    history = await queries.history(request.app[POOL], row["job_id"])
    body = timeline(history, TERMINAL_STATUSES).model_dump(mode="json")
    return web.json_response(body)


async def get_logs(request: web.Request) -> web.StreamResponse:
    """GET /v1/jobs/{job_id}/logs: the stored log, or (``follow``) live until the job ends."""
    row = await _own_job(request)
    try:
        query = m.LogsQuery.model_validate(dict(request.query))
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc), "invalid_query")
    since = query.since
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    ndjson = query.format == "ndjson" or "application/x-ndjson" in request.headers.get("Accept", "")
    return await serve_logs(
        request,
        settings=request.app[SETTINGS],
        pool=request.app[POOL],
        ledger=request.app[LEDGER],
        job_id=row["job_id"],
        attempt=query.attempt,
        stream=query.stream,
        ndjson=ndjson,
        follow=query.follow,
        since=since,
        tail=query.tail,
        after=parse_position(query.after) if query.after else {},
    )


def _last_event_id(request: web.Request) -> int | None | web.Response:
    """The ``Last-Event-ID`` header as a position (None when absent or empty), or its 400."""
    value = request.headers.get("Last-Event-ID", "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    problem = problems.Problem(
        "Last-Event-ID",
        f"{_shown(value)[:40]} is not an id of this event stream",
        "send the `id:` of the last event received (a whole number), or no header to start "
        "from now on",
    )
    return problem_response(400, [problem], "invalid_header")


async def stream_events(request: web.Request) -> web.StreamResponse:
    """GET /v1/events: the tenant's job events as server-sent events, resumable by id."""
    try:
        query = m.EventsQuery.model_validate(_query(request, lists=("type",)))
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc), "invalid_query")
    header = _last_event_id(request)
    if isinstance(header, web.Response):
        return header
    tenant = _tenant(request)
    if query.job is not None:
        if not problems.valid_job_id(query.job):
            raise not_found(query.job)
        if await queries.job_row(request.app[POOL], tenant, query.job) is None:
            raise not_found(query.job)
    filters = Filters(tenant, query.job, frozenset(query.type))
    after = header if header is not None else query.since
    try:
        return await serve_events(request, hub=request.app[EVENTS], filters=filters, after=after)
    except AheadError as exc:
        problem = problems.Problem(
            "Last-Event-ID" if header is not None else "since",
            f"{exc}: this stream never gave it out (a read model rebuilt from the ledger "
            "numbers its events anew)",
            "resume with since=0 to get the tenant's events again from the first (drop the ids "
            "you have seen), or leave it out for new events only",
        )
        return problem_response(400, [problem], "invalid_position")
    except TooManyStreamsError as exc:
        retry = request.app[SETTINGS].api_retry_after_s
        return errors.problem(
            429,
            "too_many_streams",
            "Too many open event streams",
            f"{exc}. Close one (each stream shows every job of the tenant; filter with ?job= "
            f"and ?type=), or retry in {retry} s with Last-Event-ID to miss nothing.",
            headers={"Retry-After": str(retry)},
            retry_after_s=retry,
            limit=exc.limit,
            setting=exc.setting,
        )


async def get_accounting(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/accounting: held, metered, billable, credited GPU time per attempt."""
    row = await _own_job(request)
    record = await queries.accounting(request.app[POOL], row["job_id"])
    if record is None:
        record = {"job_id": row["job_id"], "status": row["status"], "final": False, "attempts": []}
    return web.json_response(record, dumps=_json_text)


async def list_artifacts(request: web.Request) -> web.Response:
    """The outputs and checkpoints the job stored: kind, path, attempt, size, sha256, expiry."""
    row = await _own_job(request)
    found = await artifacts.of_job(request.app[POOL], row["job_id"])
    days = request.app[SIGNER].retention_days(row["tenant"])
    return web.json_response(
        {
            "job_id": row["job_id"],
            "retention_days": days,
            "artifacts": [a.to_json(days) for a in found],
        },
        dumps=_json_text,
    )


async def artifact_url(request: web.Request) -> web.Response:
    """A short-lived download URL for one stored artifact (``?path=``, optional ``&attempt=``)."""
    row = await _own_job(request)
    path = request.query.get("path", "")
    try:
        attempt = int(request.query["attempt"]) if "attempt" in request.query else None
    except ValueError:
        return problem_response(
            422, [problems.Problem("attempt", "not a number", "use 1, 2, ...")], "invalid_query"
        )
    if not path:
        return problem_response(
            422,
            [problems.Problem("path", "missing", "give ?path= as listed by GET .../artifacts")],
            "invalid_query",
        )
    stored = await artifacts.of_job(request.app[POOL], row["job_id"])
    found = artifacts.choose(stored, path, attempt)
    if found is None:
        which = f" of attempt {attempt}" if attempt is not None else ""
        raise web.HTTPNotFound(
            text=_json_text(
                {
                    "error": "not_found",
                    "detail": f"job {row['job_id']} stored no {path}{which}; "
                    f"`gridledger outputs {row['job_id']}` lists what it stored",
                }
            ),
            content_type="application/json",
        )
    if not ObjectRef.parse(found.uri).owned_by(row["tenant"]):
        # A history naming another tenant's object is never a way to read it.
        raise not_found(row["job_id"])
    try:
        signed = await asyncio.to_thread(request.app[SIGNER].sign, row["tenant"], found)
    except ObjectStoreError as exc:
        return errors.problem(
            503,
            "object_store_unavailable",
            "No download URL can be signed for now",
            f"{exc}. The artifact is recorded and kept; ask again once the store's "
            "credentials are in place.",
        )
    return web.json_response(signed, dumps=_json_text)


_CURSOR_FIX = "pass the `next_cursor` of the previous page unchanged, or omit it for the first page"


def _cursor_problem(exc: ValueError) -> web.Response:
    """400 for a cursor this API did not issue for this query."""
    return problem_response(
        400, [problems.Problem("cursor", str(exc), _CURSOR_FIX)], "invalid_cursor"
    )


def _query(
    request: web.Request, lists: tuple[str, ...] = (), only: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The request's query as a dict for a query model: ``lists`` may repeat or be
    comma-separated; ``only``: the parameters read (others are ignored), None: all (an
    unknown one is then refused by the model)."""
    raw: dict[str, Any] = {
        k: v for k, v in request.query.items() if k not in lists and (only is None or k in only)
    }
    for name in lists:
        raw[name] = [s for v in request.query.getall(name, []) for s in v.split(",") if s]
    return raw


def _window_problems(
    since: datetime | None, until: datetime | None, period: str | None = None
) -> list[problems.Problem]:
    """``since`` before ``until``; with ``period``, both on its UTC boundaries."""
    out = []
    if period is not None:
        for name, moment in (("since", since), ("until", until)):
            if moment is not None and not usage.is_boundary(moment, period):
                out.append(
                    problems.Problem(
                        name,
                        f"{moment.isoformat()} is not the start of a UTC {period}",
                        f"use {usage.period_start(moment, period).isoformat()} or another "
                        f"start of a UTC {period}, or another period",
                    )
                )
    if since is not None and until is not None and until <= since:
        out.append(problems.Problem("until", "is not after since", "give an until after since"))
    return out


async def list_accounting(request: web.Request) -> web.Response:
    """GET /v1/accounting: every accounting record of the tenant, newest jobs first, a page
    at a time (with the next cursor)."""
    try:
        query = m.AccountingQuery.model_validate(_query(request))
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc, 5000), "invalid_query")
    found = _window_problems(query.since, query.until)
    if found:
        return problem_response(422, found, "invalid_query")
    scope = "accounting:" + json.dumps(
        [query.since and query.since.isoformat(), query.until and query.until.isoformat()]
    )
    try:
        after = queries.decode_cursor(query.cursor, scope) if query.cursor else None
    except ValueError as exc:
        return _cursor_problem(exc)
    records, next_key = await queries.tenant_accounting(
        request.app[POOL], _tenant(request), query.limit, after, query.since, query.until
    )
    body = {
        "records": records,
        "count": len(records),
        "next_cursor": queries.encode_cursor(next_key, scope) if next_key else None,
    }
    return web.json_response(body)


async def list_usage(request: web.Request) -> web.Response:
    """GET /v1/usage: the tenant's usage by UTC period and group, a page at a time."""
    try:
        query = m.UsageQuery.model_validate(_query(request, lists=("by",)))
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc, 5000), "invalid_query")
    try:
        by = usage.parse_group_by(query.by)
    except ValueError as exc:
        fix = "group by tenant, gpu_model, provider, region or label:<key>"
        return problem_response(422, [problems.Problem("by", str(exc), fix)], "invalid_query")
    found = _window_problems(query.since, query.until, query.period)
    if found:
        return problem_response(422, found, "invalid_query")
    try:
        lines, next_cursor = await usage_api.page(
            request.app[POOL],
            _tenant(request),
            query.period,
            by,
            query.since,
            query.until,
            query.limit,
            query.cursor,
        )
    except ValueError as exc:
        return _cursor_problem(exc)
    body = {
        "period": query.period,
        "by": list(by),
        "lines": lines,
        "count": len(lines),
        "next_cursor": next_cursor,
    }
    return web.json_response(body)


async def list_prices(request: web.Request) -> web.Response:
    """GET /v1/prices: every version of the price catalog on the ledger, and the price
    book's verdict on it (the fold of :class:`projections.prices.PriceBook`)."""
    stored = await request.app[POOL].fetch("SELECT payload FROM price_catalogs ORDER BY seq")
    events = [PriceCatalogPublished.model_validate_json(r["payload"]) for r in stored]
    book = PriceBook(events)
    refused = {e.event_id: problems for e, problems in book.refused}
    versions = [
        {
            "version": event.version,
            "currency": event.currency,
            "published_at": event.occurred_at.isoformat(),
            "source": event.source,
            "accepted": event.event_id not in refused,
            "problems": [{"field": f, "problem": p} for f, p in refused.get(event.event_id, [])],
            "entries": [e.model_dump(mode="json") for e in event.entries],
        }
        for event in events
    ]
    body = {"currency": book.currency, "latest_version": book.version, "versions": versions}
    return web.json_response(body)


async def prices_in_force(request: web.Request) -> web.Response:
    """GET /v1/prices/in-force?at=TIME: the row pricing each key at that moment (now)."""
    try:
        query = m.PricesQuery.model_validate(_query(request))
    except ValidationError as exc:
        return problem_response(422, _query_problems(exc, 5000), "invalid_query")
    at = (query.at or utcnow()).astimezone(UTC)
    book = await load_book(request.app[POOL])
    rows = [
        {
            "provider": provider,
            "gpu_model": gpu_model,
            "region": region,
            "per_gpu_hour": price.per_gpu_hour,
            "effective_from": price.effective_from.isoformat(),
            "version": price.version,
        }
        for (provider, gpu_model, region), price in book.in_force(at)
    ]
    return web.json_response({"at": at.isoformat(), "currency": book.currency, "prices": rows})


async def cancel_job(request: web.Request) -> web.Response:
    """POST /v1/jobs/{job_id}/cancel: append CancelRequested; an ended job answers 409."""
    row = await _own_job(request)
    if row["status"] in TERMINAL_STATUSES:
        return errors.problem(
            409,
            "already_terminal",
            errors.title(409),
            f"job {row['job_id']} is already {row['status']}; nothing to cancel",
            job_status=row["status"],
        )
    reason = ""
    if request.can_read_body:
        try:
            body = problems.parse_body(await request.read(), "application/json")
            reason = m.CancelRequest.model_validate(body).reason
        except problems.BodyError as exc:
            return problem_response(exc.status, exc.problems, "invalid_body")
        except ValidationError as exc:
            return problem_response(422, _query_problems(exc), "invalid_body")
    event = CancelRequested(
        job_id=row["job_id"],
        attempt=row["attempt"],
        occurred_at=datetime.now(UTC),
        producer=request.app[PRODUCER],
        requested_by=_tenant(request),
        reason=reason,
    )
    await request.app[LEDGER].append(event)
    return web.json_response(
        {"job_id": row["job_id"], "cancel_requested": True, "event_id": event.event_id},
        status=202,
    )


async def list_nodes(request: web.Request) -> web.Response:
    """The fleet as a tenant sees it (see ``services.api.models.NodeDocument``).

    Capacity is shared, so every tenant sees every node, its GPUs and how many are
    busy; whose work runs there is not shared, so the only attempts listed are the
    tenant's own, read from the attempts read model. That is also why a node that
    went silent never shows an attempt the watchdog already declared lost: the
    node's last heartbeat still names it, the attempts table does not.
    """
    silent_after = request.app[SETTINGS].scheduler_node_timeout_s
    pool = request.app[POOL]
    nodes = await queries.nodes(pool)
    mine = await queries.tenant_live_attempts(pool, _tenant(request))
    now = datetime.now(UTC)
    out = []
    for node in nodes:
        status = node.get("status")
        # The read model keeps the last status a node reported; a node that stopped
        # reporting is shown as silent, as the scheduler sees it (not placeable).
        last = node.get("last_heartbeat_at") or node.get("registered_at")
        if (
            status == "ready"
            and last
            and (now - datetime.fromisoformat(last)).total_seconds() > silent_after
        ):
            status = "silent"
        free = list(node.get("free_gpu_indices") or []) if status == "ready" else []
        out.append(
            {
                **{k: node.get(k) for k in NODE_FIELDS},
                "status": status,
                "free_gpu_indices": free,
                "busy_gpu_count": len(node.get("gpus") or [])
                - len(node.get("free_gpu_indices") or []),
                "your_attempts": mine.get(node["node_id"], []),
            }
        )
    return web.json_response({"nodes": out}, dumps=_json_text)


NODE_FIELDS = (
    "node_id",
    "provider",
    "region",
    "inventory_source",
    "inventory_note",
    "gpus",
    "host_memory_mb",
    "agent_version",
    "heartbeat_interval_s",
    "registered_at",
    "last_heartbeat_at",
    "drained_at",
    "drain_reason",
)
"""What a tenant sees of a node's row; ``running_attempts`` and ``gpu_usage`` name or
reveal other tenants' work and stay out."""


async def openapi(request: web.Request) -> web.Response:
    """GET /openapi.json: the API's description, built from the same routes and models it serves."""
    return web.json_response(request.app[OPENAPI])


# --------------------------------------------------------------------------- the routes

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
        openapi,
        "getOpenApi",
        "This document",
        {200: Reply("the OpenAPI 3.1 document", media={"application/json": {"schema": {}}})},
        public=True,
        tags=("ops",),
    ),
    *tenant_secrets.OPERATIONS,
    *webhooks.OPERATIONS,
    *console.OPERATIONS,
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


# --------------------------------------------------------------------------- composition root


def build_app(
    settings: Settings, ledger: Ledger, pool: asyncpg.Pool, ops: OpsEndpoints | None = None
) -> web.Application:
    """The API application over a started ledger and a pool on the read-model schema.

    ``/healthz``, ``/readyz`` and ``/metrics`` are the ops endpoints every service
    has (``services.ops``), served on the API's own port as well.
    """
    tokens = auth.Tokens(settings.tokens_path)
    endpoints = ops or api_endpoints(settings, pool)
    operations = (*OPERATIONS, *ops_operations(endpoints))
    problem_answers = errors.middleware(settings, pool)
    app = web.Application(
        # Metrics outermost (they see every answer's status), then problem+json for any
        # failure, auth included.
        middlewares=[
            request_metrics,
            problem_answers.middleware,
            auth.middleware(
                tokens,
                public_paths(operations),
                agent_paths(operations),
                tenant_secrets.authenticate_agent,
            ),
        ],
        client_max_size=settings.api_max_body_bytes,
    )
    app[SETTINGS] = settings
    app[LEDGER] = ledger
    app[POOL] = pool
    app[PRODUCER] = f"api/{socket.gethostname()}"
    app[SUBMISSIONS] = idempotency.Submissions()
    app[SIGNER] = artifacts.Signer(settings)
    app[ID_KEY] = idempotency.IdKey(settings)
    app[ROUTES] = operations
    app[OPENAPI] = openapi_document(operations)
    app[EVENTS] = EventHub(settings, pool)
    tenant_secrets.install(app, settings, pool)
    webhooks.install(app, settings)
    register(app, operations)
    app.on_response_prepare.append(security.add_headers)

    async def close_checks_on_cleanup(app: web.Application) -> None:
        await close_checks(endpoints.checks)

    async def end_event_streams(app: web.Application) -> None:
        await app[EVENTS].close()  # before the server waits for its open requests

    app.on_shutdown.append(end_event_streams)
    app.on_cleanup.append(close_checks_on_cleanup)
    app.on_cleanup.append(problem_answers.on_cleanup)  # the Postgres probe, if one runs
    return app
