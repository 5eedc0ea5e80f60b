"""``gridledger dev up|down|status``: the local stack of infra/ (Kafka, Postgres, Docker)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from infra import stack
from infra.status import ComponentStatus
from infra.topics import ensure_topics
from services.settings import Settings, load_settings


def register(subparsers: Any) -> None:
    """Add the ``dev`` group to the top-level parser."""
    dev = subparsers.add_parser(
        "dev",
        help="start, stop or inspect the local stack (Kafka, Postgres, Docker, images)",
        description="The local stack used by services and tests; state lives in GRIDLEDGER_HOME "
        "(default ./.gridledger).",
    )
    commands = dev.add_subparsers(dest="dev_command", metavar="COMMAND", required=True)
    up = commands.add_parser("up", help="start what is not running, then check every component")
    up.set_defaults(handler=run_up)
    down = commands.add_parser("down", help="stop what `dev up` started in this home (data kept)")
    down.set_defaults(handler=run_down)
    status = commands.add_parser("status", help="state, address, pid and log of each component")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(handler=run_status)
    topics = commands.add_parser(
        "topics",
        help="create every gridledger topic on the configured broker (for deployments "
        "whose Kafka is not started by dev up, e.g. docker-compose)",
    )
    topics.set_defaults(handler=run_topics)


def _print(component: ComponentStatus) -> None:
    print(component.line(), flush=True)


def run_up(args: argparse.Namespace, settings: Settings | None = None) -> int:
    settings = settings or load_settings()
    began = time.monotonic()
    print(f"gridledger local stack in {settings.home}", flush=True)
    asyncio.run(stack.up(settings, report=_print))
    print(f"settings: {stack.stack_env_path(settings)}")
    print(f"tokens:   {settings.tokens_path}")
    print(f"ready in {time.monotonic() - began:.1f} s")
    return 0


def run_down(args: argparse.Namespace, settings: Settings | None = None) -> int:
    settings = settings or load_settings()
    print(f"gridledger local stack in {settings.home}", flush=True)
    stack.down(settings, report=_print)
    return 0


def run_status(args: argparse.Namespace, settings: Settings | None = None) -> int:
    """Exit code 0 when every component runs, 1 otherwise."""
    settings = settings or load_settings()
    components = asyncio.run(stack.status(settings))
    if args.json:
        payload = {
            "home": str(settings.home),
            "components": {c.name: c.to_json() for c in components},
        }
        print(json.dumps(payload, indent=2))
    else:
        print(f"gridledger local stack in {settings.home}")
        for component in components:
            _print(component)
    return 0 if all(c.running for c in components) else 1


def run_topics(args: argparse.Namespace, settings: Settings | None = None) -> int:
    settings = settings or load_settings()
    created = asyncio.run(ensure_topics(settings))
    for name, partitions in sorted(created.items()):
        print(f"{name}: {partitions} partitions")
    return 0
