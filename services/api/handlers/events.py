"""The tenant's job events as server-sent events, resumable by id (the shared tail behind
every stream is ``services.api.events``).
"""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from services.api import errors, problems, queries
from services.api import models as m
from services.api.deps import (
    EVENTS,
    POOL,
    SETTINGS,
    not_found,
    problem_response,
    query_args,
    query_problems,
    shown,
    tenant_of,
)
from services.api.events import AheadError, Filters, TooManyStreamsError, serve_events


def _last_event_id(request: web.Request) -> int | None | web.Response:
    """The ``Last-Event-ID`` header as a position (None when absent or empty), or its 400."""
    value = request.headers.get("Last-Event-ID", "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    problem = problems.Problem(
        "Last-Event-ID",
        f"{shown(value)[:40]} is not an id of this event stream",
        "send the `id:` of the last event received (a whole number), or no header to start "
        "from now on",
    )
    return problem_response(400, [problem], "invalid_header")


async def stream_events(request: web.Request) -> web.StreamResponse:
    """GET /v1/events: the tenant's job events as server-sent events, resumable by id."""
    try:
        query = m.EventsQuery.model_validate(query_args(request, lists=("type",)))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc), "invalid_query")
    header = _last_event_id(request)
    if isinstance(header, web.Response):
        return header
    tenant = tenant_of(request)
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
