"""Run the API (``gridledger api``): start the ledger and the pool, serve until interrupted."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

from services.api.app import build_app
from services.ledger.client import Ledger
from services.ops.server import OpsServer
from services.ops.wiring import api_endpoints
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


async def serve(settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT. At start it waits for Postgres (the schema must be
    migrated) and the broker; once up it rides out either going away (503s meanwhile)."""
    pool = await db.create_pool(settings, max_size=10, wait=True)
    try:
        await db.when_reachable(settings, lambda: migrate_pool(pool, settings.pg_schema))
        async with await api_ledger(settings).start(wait=True) as ledger:
            ops = api_endpoints(settings, pool)
            runner = web.AppRunner(build_app(settings, ledger, pool, ops))
            await runner.setup()
            site = web.TCPSite(runner, settings.api_host, settings.api_port)
            await site.start()
            print(f"gridledger API on http://{settings.api_host}:{settings.api_port}", flush=True)
            stopping = asyncio.Event()
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
    finally:
        await pool.close()
