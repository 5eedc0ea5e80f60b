"""Accounting, usage and prices: a job's record, the tenant's records and usage by period, and
the price catalog's versions and the rows in force.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from aiohttp import web
from pydantic import ValidationError

from projections import usage
from projections.prices import PriceBook
from schemas.events import PriceCatalogPublished
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
from services.clock import utcnow
from services.sink.writer import load_book


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
        query = m.PricesQuery.model_validate(query_args(request))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc, 5000), "invalid_query")
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
