"""The HTTP API's composition root: ``build_app(settings, ledger, pool)``.

Writes go to the ledger (JobSubmitted, CancelRequested, acks=all); reads come
from the sink's Postgres read models, except live log following, which reads
the job's log-chunks partition. A job of another tenant is a 404, like a job
that does not exist.

The parts: the handlers, one module per resource (``services.api.handlers``), the one
route table that maps them (``services.api.routes``, data), the dependencies they read from the app
(``services.api.deps``), and here the app itself: middlewares, dependencies, routes,
the OpenAPI document and the shutdown order.
"""

from __future__ import annotations

import socket

import asyncpg
from aiohttp import web

from services.api import artifacts, auth, errors, idempotency, security
from services.api.deps import EVENTS, ID_KEY, LEDGER, POOL, PRODUCER, SETTINGS, SIGNER, SUBMISSIONS
from services.api.endpoints import api_endpoints
from services.api.events import EventHub
from services.api.handlers import secrets
from services.api.openapi import OPENAPI, agent_paths, openapi_document, public_paths, register
from services.api.routes import OPERATIONS, ROUTES, ops_operations
from services.ledger.port import LedgerPort
from services.ops.checks import close_checks
from services.ops.server import OpsEndpoints, request_metrics
from services.settings import Settings


def build_app(
    settings: Settings, ledger: LedgerPort, pool: asyncpg.Pool, ops: OpsEndpoints | None = None
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
                secrets.authenticate_agent,
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
    secrets.install(app, settings, pool)
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
