"""Accounting and usage: a job's record, the tenant's records, and its usage by UTC period
and group.
"""

from __future__ import annotations

import json
from datetime import datetime

from aiohttp import web
from pydantic import ValidationError

from projections import usage
from services.api import models as m
from services.api import problems, queries
from services.api import usage as usage_api
from services.api.deps import (
    POOL,
    cursor_problem,
    json_text,
    own_job,
    problem_response,
    query_args,
    query_problems,
    tenant_of,
)


async def get_accounting(request: web.Request) -> web.Response:
    """GET /v1/jobs/{job_id}/accounting: held, metered, billable, credited GPU time per attempt."""
    row = await own_job(request)
    record = await queries.accounting(request.app[POOL], row["job_id"])
    if record is None:
        record = {"job_id": row["job_id"], "status": row["status"], "final": False, "attempts": []}
    return web.json_response(record, dumps=json_text)


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
        query = m.AccountingQuery.model_validate(query_args(request))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc, 5000), "invalid_query")
    found = _window_problems(query.since, query.until)
    if found:
        return problem_response(422, found, "invalid_query")
    scope = "accounting:" + json.dumps(
        [query.since and query.since.isoformat(), query.until and query.until.isoformat()]
    )
    try:
        after = queries.decode_cursor(query.cursor, scope) if query.cursor else None
    except ValueError as exc:
        return cursor_problem(exc)
    records, next_key = await queries.tenant_accounting(
        request.app[POOL], tenant_of(request), query.limit, after, query.since, query.until
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
        query = m.UsageQuery.model_validate(query_args(request, lists=("by",)))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc, 5000), "invalid_query")
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
            tenant_of(request),
            query.period,
            by,
            query.since,
            query.until,
            query.limit,
            query.cursor,
        )
    except ValueError as exc:
        return cursor_problem(exc)
    body = {
        "period": query.period,
        "by": list(by),
        "lines": lines,
        "count": len(lines),
        "next_cursor": next_cursor,
    }
    return web.json_response(body)
