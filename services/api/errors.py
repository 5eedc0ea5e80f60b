"""What the API answers when something fails: ``application/problem+json``, never a bare 500.

Every refusal (4xx) is a problem document too: the handlers make theirs with
:func:`problem`, and the middleware turns any other 4xx (a route that does not
exist, a method not allowed, a 401, a body over ``client_max_size``) into one, so a
client never meets another error shape.

Three kinds of failure, one middleware (the outermost, so it also covers auth):

- the broker did not take a write (submit, cancel): **503** with ``Retry-After``.
  The write's producer gives up within ``api_append_timeout_s`` and never sends
  that record afterwards, so nothing was recorded; a retry with the same
  ``Idempotency-Key`` is safe whatever happened;
- Postgres (the read models) is away: **503** with ``Retry-After`` for the reads;
  writes still go to the ledger, so a submission during the outage is accepted
  and shows up once the sink catches up;
- anything else is a bug: **500** with a ``correlation_id`` that is also in the
  log line carrying the traceback, so a report can be matched to its cause.

Bodies follow RFC 9457 (``type``, ``title``, ``status``, ``detail``) and keep the
``error`` code the API's other error bodies carry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import web

from services.api.problems import problem_document, title
from services.backoff import outage_of, retrying
from services.ledger.client import broker_unavailable
from services.settings import Settings
from services.sink import db

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def problem(
    status: int,
    error: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> web.Response:
    """An RFC 9457 problem document with gridledger's ``error`` code."""
    body = problem_document(status, error, title, detail, **extra)
    return web.json_response(body, status=status, headers=headers, content_type=PROBLEM_JSON)


def not_found(detail: str, **extra: Any) -> web.HTTPNotFound:
    """A 404 problem, raised by a handler (a job, or an artifact, this tenant does not have)."""
    body = {
        "type": "/problems/not_found",
        "title": title(404),
        "status": 404,
        "detail": detail,
        "error": "not_found",
        **extra,
    }
    return web.HTTPNotFound(text=json.dumps(body), content_type=PROBLEM_JSON)


_ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def as_problem(response: web.StreamResponse) -> web.StreamResponse:
    """``response`` as a problem document when it is a refusal in another shape.

    A JSON body keeps its fields (``error``, ``detail``, ``hint`` ...); a text body
    becomes the ``detail``. Anything that is not an error, or already a problem, or a
    stream, passes unchanged.
    """
    if (
        response.status < 400
        or response.content_type == PROBLEM_JSON
        or not isinstance(response, web.Response)
    ):
        return response
    text = response.text or ""
    try:
        data = json.loads(text) if response.content_type == "application/json" else None
    except ValueError:
        data = None
    fields: dict[str, Any] = data if isinstance(data, dict) else {}
    error = str(fields.pop("error", "") or _ERROR_CODES.get(response.status, "error"))
    detail = str(fields.pop("detail", "") or text.strip() or title(response.status))
    for key in ("type", "title", "status"):
        fields.pop(key, None)
    headers = {
        k: v
        for k, v in response.headers.items()
        if k.lower() not in ("content-type", "content-length")
    }
    return problem(
        response.status, error, title(response.status), detail, headers=headers, **fields
    )


def ledger_unavailable(settings: Settings, exc: BaseException) -> web.Response:
    """The 503 (with Retry-After) for a submit or cancel while the broker is away: nothing was
    appended."""
    retry = settings.api_retry_after_s
    return problem(
        503,
        "ledger_unavailable",
        "The ledger did not take the write",
        f"Kafka at {settings.kafka_bootstrap} did not acknowledge it ({type(exc).__name__}); "
        f"nothing was recorded. Retry in {retry} s; with an Idempotency-Key a retry can never "
        "make a second job.",
        headers={"Retry-After": str(retry)},
        retry_after_s=retry,
    )


def read_models_unavailable(settings: Settings, exc: BaseException) -> web.Response:
    """The 503 (with Retry-After) for a read while Postgres is away."""
    retry = settings.api_retry_after_s
    return problem(
        503,
        "read_models_unavailable",
        "Job status is unavailable for now",
        f"the read models (Postgres at {settings.dsn_redacted}) do not answer "
        f"({type(exc).__name__}). Submissions are still accepted and recorded on the ledger; "
        f"status shows them once Postgres is back. Retry in {retry} s.",
        headers={"Retry-After": str(retry)},
        retry_after_s=retry,
    )


@dataclass(frozen=True)
class ProblemAnswers:
    """The middleware and what must run at the app's cleanup (the Postgres probe's end)."""

    middleware: Any
    on_cleanup: Callable[[web.Application], Awaitable[None]]


def middleware(settings: Settings, pool: asyncpg.Pool) -> ProblemAnswers:
    """Turns every failure of a handler (or of a later middleware) into a problem document.

    An outage is logged as the process's :class:`~services.backoff.Outage` of that
    dependency (one line when it goes, one when it is back), not once per request:
    the access log already has each 503. For Postgres, which the API only reads, a
    probe on the shared backoff notices when it is back.
    """
    kafka = outage_of(f"Kafka at {settings.kafka_bootstrap}")
    postgres = outage_of(f"Postgres at {settings.dsn_redacted}")
    probe: set[asyncio.Task[Any]] = set()

    def watch_postgres() -> None:
        if probe:
            return
        task = asyncio.create_task(
            retrying(
                lambda: pool.fetchval("SELECT 1"),
                outage=postgres,
                transient=db.postgres_unavailable,
                backoff=settings.reconnect_backoff(),
            )
        )
        probe.add(task)
        task.add_done_callback(probe.discard)

    @web.middleware
    async def problems(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return as_problem(await handler(request))
        except web.HTTPException as exc:
            answer = as_problem(exc)
            if answer is exc:
                raise  # a redirect, or already a problem (a deliberate 404 ...)
            return answer  # aiohttp's own refusals (413, 405 ...), as problems
        except Exception as exc:
            if broker_unavailable(exc):
                kafka.down(exc)  # the next acknowledged append says it is back
                return ledger_unavailable(settings, exc)
            if db.postgres_unavailable(exc):
                postgres.down(exc)
                watch_postgres()
                return read_models_unavailable(settings, exc)
            correlation_id = secrets.token_hex(8)
            log.exception(
                "%s %s failed unexpectedly (correlation id %s)",
                request.method,
                request.path,
                correlation_id,
            )
            return problem(
                500,
                "internal_error",
                "The API failed to answer",
                f"an unexpected error ({type(exc).__name__}) stopped this request; nothing more "
                f"is known to you. Report correlation id {correlation_id}: the API's log has "
                "the cause under it.",
                correlation_id=correlation_id,
            )

    async def stop_probe(app: web.Application) -> None:
        for task in list(probe):
            task.cancel()
        await asyncio.gather(*probe, return_exceptions=True)

    return ProblemAnswers(problems, stop_probe)
