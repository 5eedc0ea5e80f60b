"""The reads of the tenant's jobs: the list, one job's document (live or ``as_of``), its
export, events, explanation and timeline.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from projections.history import History
from schemas.views import TERMINAL_STATUSES
from services.api import errors, problems, queries
from services.api import models as m
from services.api.deps import (
    LEDGER,
    POOL,
    cursor_problem,
    json_text,
    own_job,
    problem_response,
    query_args,
    query_problems,
    tenant_of,
)
from services.api.explain import explain
from services.api.timeline import timeline
from services.clock import utcnow
from services.replay import export
from services.replay.offline import fold


async def list_jobs(request: web.Request) -> web.Response:
    """GET /v1/jobs: the tenant's jobs, newest first, a page at a time (with the next cursor)."""
    try:
        query = m.ListJobsQuery.model_validate(
            query_args(request, lists=("status",), only=("limit", "cursor"))
        )
    except ValidationError as exc:
        return problem_response(422, query_problems(exc), "invalid_query")
    try:
        after = queries.decode_cursor(query.cursor) if query.cursor else None
    except ValueError as exc:
        return cursor_problem(exc)
    jobs, next_cursor = await queries.list_jobs(
        request.app[POOL], tenant_of(request), list(query.status), query.limit, after
    )
    body = {
        "jobs": jobs,
        "count": len(jobs),
        "next_cursor": queries.encode_cursor(next_cursor) if next_cursor else None,
    }
    return web.json_response(body)


async def get_job(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}: the job's state, attempts, failure and accounting summary
    (``?as_of=``: as the ledger knew them then)."""
    document = await _job_document(request)
    return web.json_response(document, dumps=json_text)


async def _job_document(request: web.Request) -> dict[str, Any]:
    """The job document of the request's job: live from the read models, or with
    ``?as_of=TIME`` folded from the job's records the ledger held at TIME
    (:func:`services.replay.export.as_of`)."""
    try:
        moment = m.AsOfQuery.model_validate(query_args(request)).as_of
    except ValidationError as exc:
        raise web.HTTPUnprocessableEntity(
            text=json.dumps(problems.refusal(422, "invalid_query", query_problems(exc))),
            content_type=errors.PROBLEM_JSON,
        ) from exc
    row = await own_job(request)
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
    spec = History.of(history).spec
    document = queries.view_document(
        folded.view.model_dump(mode="json"),
        folded.accounting.model_dump(mode="json"),
        spec.model_dump(mode="json") if spec is not None else None,
    )
    return {**document, "as_of": moment.isoformat()}


async def export_job(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/export: the job's history as a self-describing file, with the
    live views (``gridledger history JOB -o json``; ``replay --file`` refolds it)."""
    row = await own_job(request)
    pool, job_id = request.app[POOL], row["job_id"]
    records = await export.read_job(request.app[LEDGER], job_id)
    row = await _caught_up(pool, row, export.job_events_in(records))
    schemas: dict[str, dict[str, Any]] = {}
    record, money = await queries.accounting_parts(pool, job_id) or (None, None)
    job = export.job_export(job_id, records, queries.view_of(row), record, money, schemas)
    body = export.document([job], schemas, utcnow())
    return web.json_response(body, dumps=json_text)


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
    row = await own_job(request)
    events = await queries.events(request.app[POOL], row["job_id"])
    return web.json_response({"job_id": row["job_id"], "events": events}, dumps=json_text)


async def get_explanation(request: web.Request) -> web.Response:
    """The text ``gridledger explain`` prints, made by the same function, without colour
    (``?as_of=``: of the job as the ledger knew it then)."""
    document = json.loads(json_text(await _job_document(request)))
    text = explain(document)
    body = {"job_id": document["job_id"], "status": document["status"], "text": text}
    if document.get("as_of"):
        body["as_of"] = document["as_of"]
    return web.json_response(body)


"""The CLI colours its headings on a terminal; the API serves plain text."""


async def get_timeline(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/timeline: the job's and each attempt's states as time segments, for the
    console."""
    row = await own_job(request)
    history = await queries.history(request.app[POOL], row["job_id"])
    body = timeline(history, TERMINAL_STATUSES).model_dump(mode="json")
    return web.json_response(body)
