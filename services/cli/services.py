"""``gridledger api`` and ``gridledger sink``: run the API server or the Postgres sink."""

from __future__ import annotations

import asyncio

import click

from services.ops.logs import setup_logging
from services.settings import load_settings


@click.command("api")
@click.option("--host", help="Address to bind (default: GRIDLEDGER_API_HOST).")
@click.option("--port", type=int, help="Port (default: GRIDLEDGER_API_PORT).")
def api(host: str | None, port: int | None) -> int:
    """Serve the HTTP API (default 127.0.0.1:8600)."""
    from services.api.server import serve

    overrides = {k: v for k, v in (("api_host", host), ("api_port", port)) if v}
    settings = load_settings(**overrides)
    setup_logging("api", "INFO", settings.log_format)
    asyncio.run(serve(settings))
    return 0


@click.command("sink")
@click.option("--schema", help="Postgres schema (default: settings.pg_schema).")
def sink(schema: str | None) -> int:
    """Project the ledger into the Postgres read models (runs until Ctrl-C)."""
    from services.sink.consumer import serve

    overrides = {"pg_schema": schema} if schema else {}
    settings = load_settings(**overrides)
    setup_logging("sink", "INFO", settings.log_format)
    asyncio.run(serve(settings))
    return 0


COMMANDS = (api, sink)
