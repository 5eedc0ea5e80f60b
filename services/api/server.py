"""Run the API (``gridledger api``): start the ledger and the pool, serve until interrupted."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import asyncpg
from aiohttp import web

from services.api.app import build_app
from services.api.endpoints import api_endpoints
from services.ledger.client import Ledger
from services.ops.server import OpsServer
from services.settings import Settings
from services.sink import db
from services.sink.migrate import migrate_pool


def api_ledger(settings: Settings) -> Ledger:
    """The API's ledger: a write the broker cannot take fails within
    ``api_append_timeout_s`` and is never sent later, so a 503 means nothing was recorded
    (an idempotent producer would retry it for as long as the broker is away)."""
    return Ledger(
        settings, "api", idempotent=False, request_timeout_s=settings.api_append_timeout_s
    )


MIGRATION_WAIT_S = 5.0
"""How long the API waits for the schema migration before serving without it."""


async def serve(settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT; it needs only the broker to start.

    Submissions need nothing but the broker, so the API does not wait for Postgres:
    its pool connects on first use, and the schema migration runs in a task, retried
    until Postgres answers. With Postgres up it is done before the first request;
    with Postgres away the API serves after ``MIGRATION_WAIT_S`` anyway (reads are
    503 meanwhile), so an API restarted in the middle of an outage still takes
    submissions. A migration that fails for another reason (a wrong database, a
    broken migration) stops the API with that error.
    """
    pool = await db.create_pool(settings, min_size=0, max_size=10)
    stopping = asyncio.Event()
    migration = asyncio.create_task(
        db.when_reachable(settings, lambda: migrate_pool(pool, settings.pg_schema))
    )

    def failed(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            stopping.set()  # a migration that cannot succeed: stop, and say why below

    migration.add_done_callback(failed)
    try:
        await asyncio.wait({migration}, timeout=MIGRATION_WAIT_S)
        if not stopping.is_set():
            await _serve(settings, pool, stopping)
    finally:
        migration.cancel()
        await asyncio.gather(migration, return_exceptions=True)
        await pool.close()
    error = None if migration.cancelled() else migration.exception()
    if error is not None:
        raise db.ReadModelError(
            f"the API cannot use Postgres at {settings.dsn_redacted}: "
            f"{type(error).__name__}: {error}. Check GRIDLEDGER_PG_DSN (role, password, "
            "database) and GRIDLEDGER_PG_SCHEMA"
        ) from error


async def _serve(settings: Settings, pool: asyncpg.Pool, stopping: asyncio.Event) -> None:
    async with await api_ledger(settings).start(wait=True) as ledger:
        ops = api_endpoints(settings, pool)
        runner = web.AppRunner(build_app(settings, ledger, pool, ops))
        await runner.setup()
        site = web.TCPSite(runner, settings.api_host, settings.api_port)
        await site.start()
        print(f"gridledger API on http://{settings.api_host}:{settings.api_port}", flush=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        # GRIDLEDGER_OPS_PORT, when set, serves the same endpoints on a port of their own.
        extra = await OpsServer(ops, settings.ops_host, settings.ops_port).start()
        try:
            await stopping.wait()
        finally:
            await extra.stop()
            await runner.cleanup()
