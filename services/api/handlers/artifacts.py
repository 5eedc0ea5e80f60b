"""The artifacts a job stored: the list and a short-lived download URL for one
(``services.api.artifacts`` has the store's side).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from services.api import artifacts, errors, problems
from services.api.deps import POOL, SIGNER, json_text, not_found, own_job, problem_response
from services.objectstore import ObjectRef, ObjectStoreError


async def list_artifacts(request: web.Request) -> web.Response:
    """The outputs and checkpoints the job stored: kind, path, attempt, size, sha256, expiry."""
    row = await own_job(request)
    found = await artifacts.of_job(request.app[POOL], row["job_id"])
    days = request.app[SIGNER].retention_days(row["tenant"])
    return web.json_response(
        {
            "job_id": row["job_id"],
            "retention_days": days,
            "artifacts": [a.to_json(days) for a in found],
        },
        dumps=json_text,
    )


async def artifact_url(request: web.Request) -> web.Response:
    """A short-lived download URL for one stored artifact (``?path=``, optional ``&attempt=``)."""
    row = await own_job(request)
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
            text=json_text(
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
    return web.json_response(signed, dumps=json_text)
