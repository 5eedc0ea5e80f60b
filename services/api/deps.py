"""What the handlers share: the application's dependencies (its keys: settings, ledger, pool,
...) and the request helpers every resource uses (the tenant, its own job, the query, the
problem answers).
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from schemas.views import JOB_STATUSES
from services.api import artifacts, auth, errors, idempotency, problems, queries
from services.api.events import EventHub
from services.ledger.port import LedgerPort
from services.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
LEDGER = web.AppKey("ledger", LedgerPort)
POOL = web.AppKey("pool", asyncpg.Pool)
PRODUCER = web.AppKey("producer", str)
SUBMISSIONS = web.AppKey("submissions", idempotency.Submissions)
SIGNER = web.AppKey("signer", artifacts.Signer)
ID_KEY = web.AppKey("id_key", idempotency.IdKey)
"""The HMAC key of keyed job ids (services/api/idempotency.py)."""
EVENTS = web.AppKey("events", EventHub)
"""The one shared tail of ``job_events`` behind every ``GET /v1/events`` stream."""


def not_found(job_id: str) -> web.HTTPNotFound:
    """The 404 for a job this tenant does not own or that does not exist: the two look the same, so
    ids cannot be probed."""
    return errors.not_found(
        f"no job {shown(job_id)} for this tenant; `gridledger status` lists yours (GET /v1/jobs)"
    )


def shown(value: str) -> str:
    """A value from the request as a message may quote it: printable, and short."""
    return value if problems.printable(value) else ascii(value)[:80]


def json_text(data: Any) -> str:
    """JSON of a document whose times and other values print as strings."""
    return json.dumps(data, default=str)


def problem_response(status: int, items: list[problems.Problem], error: str) -> web.Response:
    """A 4xx problem document listing each problem with its field and fix: every validation
    error's shape."""
    body = problems.refusal(status, error, items)
    return web.json_response(body, status=status, content_type=errors.PROBLEM_JSON)


def tenant_of(request: web.Request) -> str:
    """The tenant the request's token names (set by ``services.api.auth``)."""
    return request[auth.TENANT_KEY]


async def own_job(request: web.Request) -> asyncpg.Record:
    """The row of the path's ``{job_id}`` when the tenant owns it; else :func:`not_found`."""
    job_id = request.match_info["job_id"]
    if not problems.valid_job_id(job_id):
        raise not_found(job_id)  # no job has such an id; it never reaches Postgres
    row = await queries.job_row(request.app[POOL], tenant_of(request), job_id)
    if row is None:
        raise not_found(job_id)
    return row


def query_args(
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


def query_problems(exc: ValidationError, most: int = 500) -> list[problems.Problem]:
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


_CURSOR_FIX = "pass the `next_cursor` of the previous page unchanged, or omit it for the first page"


def cursor_problem(exc: ValueError) -> web.Response:
    """400 for a cursor this API did not issue for this query."""
    return problem_response(
        400, [problems.Problem("cursor", str(exc), _CURSOR_FIX)], "invalid_cursor"
    )
