"""The writes of a job: submit (POST /v1/jobs), its dry run, and cancel.

A submit appends JobSubmitted and a cancel CancelRequested (acks=all); a repeated submit with
its Idempotency-Key answers with the job it made the first time (``services.api.idempotency``).
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from projections.fit import NodeCapacity, check_fit
from schemas.events import CancelRequested, JobSubmitted, new_event_id
from schemas.spec import JobSpec, spec_digest
from schemas.views import TERMINAL_STATUSES
from services.api import credentials, errors, idempotency, problems, queries
from services.api import models as m
from services.api.deps import (
    ID_KEY,
    LEDGER,
    POOL,
    PRODUCER,
    SETTINGS,
    SUBMISSIONS,
    own_job,
    problem_response,
    query_problems,
    shown,
    tenant_of,
)
from services.clock import utcnow
from services.ops.logs import log_context
from services.sink import db, rows

log = logging.getLogger(__name__)


async def submit_job(request: web.Request) -> web.Response:
    """POST /v1/jobs: validate the spec, append JobSubmitted, answer 202 with the job's links.

    Accepted, not created: the job is on the ledger, and the read models follow. A submit
    repeated with its Idempotency-Key answers 200 with the job it made the first time.
    """
    tenant = tenant_of(request)
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
    digest = spec_digest(spec)

    def submitted(job_id: str, event_id: str) -> JobSubmitted:
        return JobSubmitted(
            event_id=event_id,
            job_id=job_id,
            attempt=0,
            occurred_at=utcnow(),
            producer=request.app[PRODUCER],
            tenant=tenant,
            submitter=submitter,
            spec=spec,
            spec_digest=digest,
        )

    if not key:
        event = submitted(idempotency.new_job_id(), new_event_id())
        await _record(request, event)
        return await _accepted(request, event.job_id, event.event_id, warned)

    # One key, one job (services/api/idempotency.py has the rule).
    job_id = idempotency.job_id_for(request.app[ID_KEY].get(), tenant, key)
    event_id = idempotency.event_id_for(tenant, key)

    async def lookup() -> idempotency.Known | None:
        try:
            row = await queries.job_row(request.app[POOL], tenant, job_id)
        except Exception as exc:
            if not db.postgres_unavailable(exc):
                raise
            return None  # Postgres away: the ids derived from the key still make it one job
        if row is None or row["spec"] is None:
            return None  # not stored yet: the ids derived from the key make it one job
        return idempotency.Known(spec_digest(rows.from_stored(JobSpec, row["spec"])))

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
            f"resume_from: no job {shown(job_id)} for this tenant; resume from one of your "
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
        await _own_resume_source(request, tenant_of(request), spec.resume_from)
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


async def cancel_job(request: web.Request) -> web.Response:
    """POST /v1/jobs/{job_id}/cancel: append CancelRequested; an ended job answers 409."""
    row = await own_job(request)
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
            return problem_response(422, query_problems(exc), "invalid_body")
    event = CancelRequested(
        job_id=row["job_id"],
        attempt=row["attempt"],
        occurred_at=utcnow(),
        producer=request.app[PRODUCER],
        requested_by=tenant_of(request),
        reason=reason,
    )
    await request.app[LEDGER].append(event)
    return web.json_response(
        {"job_id": row["job_id"], "cancel_requested": True, "event_id": event.event_id},
        status=202,
    )
