"""A job's logs: stored, or followed live until the job ends (the serving itself is
``services.api.logs``).
"""

from __future__ import annotations

from datetime import UTC

from aiohttp import web
from pydantic import ValidationError

from schemas.log_position import parse_position
from services.api import models as m
from services.api.deps import LEDGER, POOL, SETTINGS, own_job, problem_response, query_problems
from services.api.logs import serve_logs


async def get_logs(request: web.Request) -> web.StreamResponse:
    """GET /v1/jobs/{job_id}/logs: the stored log, or (``follow``) live until the job ends."""
    row = await own_job(request)
    try:
        query = m.LogsQuery.model_validate(dict(request.query))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc), "invalid_query")
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
