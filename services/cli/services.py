"""``gridledger api`` and ``gridledger sink``: run the API server or the Postgres sink."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from services.settings import load_settings


def register(subparsers: Any) -> None:
    """Add the ``api`` and ``sink`` commands."""
    api = subparsers.add_parser("api", help="serve the HTTP API (default 127.0.0.1:8600)")
    api.add_argument("--host")
    api.add_argument("--port", type=int)
    api.set_defaults(handler=run_api)
    sink = subparsers.add_parser(
        "sink", help="project the ledger into the Postgres read models (runs until Ctrl-C)"
    )
    sink.add_argument("--schema", help="Postgres schema (default: settings.pg_schema)")
    sink.set_defaults(handler=run_sink)


def run_api(args: argparse.Namespace) -> int:
    from services.api.server import serve

    overrides = {k: v for k, v in (("api_host", args.host), ("api_port", args.port)) if v}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(load_settings(**overrides)))
    return 0


def run_sink(args: argparse.Namespace) -> int:
    from services.sink.consumer import serve

    overrides = {"pg_schema": args.schema} if args.schema else {}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(load_settings(**overrides)))
    return 0
