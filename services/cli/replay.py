"""``gridledger replay --verify | --job JOB``: rebuild from the ledger and compare (auditors)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from services.cli import render
from services.ledger.client import Ledger
from services.settings import load_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "replay",
        help="rebuild projections from offset 0 and compare with the live tables (auditors)",
        description="Reads Kafka and Postgres directly (not the API).",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--verify", action="store_true", help="rebuild everything and compare")
    mode.add_argument("--job", metavar="JOB", help="print one job's rebuilt history and decisions")
    p.add_argument("--strict", action="store_true", help="decision drift also fails --verify")
    p.add_argument("--schema", help="live read-model schema (default: settings.pg_schema)")
    p.add_argument(
        "--catch-up",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to wait for the sink to reach the ledger's end (default 10)",
    )
    p.add_argument("--keep-scratch", action="store_true", help="keep the scratch schema")
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="processes that rebuild the jobs, each on whole partitions (default: one per core)",
    )
    p.add_argument("--json", action="store_true", help="with --job: print JSON")
    p.set_defaults(handler=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    settings = load_settings()
    if args.job:
        return asyncio.run(_job(settings, args))
    from services.replay.verify import run

    report = run(
        settings,
        live_schema=args.schema,
        strict=args.strict,
        catch_up_s=args.catch_up,
        keep_scratch=args.keep_scratch,
        workers=args.workers,
    )
    for line in report.lines():
        if line in ("VERIFIED", "FAILED"):
            line = render.paint(line, "32" if report.ok else "31")
        print(line)
    return 0 if report.ok else 1


async def _job(settings: Any, args: argparse.Namespace) -> int:
    from services.replay.job import replay_job

    async with Ledger(settings, "replay") as ledger:
        result = await replay_job(ledger, args.job)
    if not result.history:
        print(f"no events for {args.job} on {settings.topic('job-events')}")
        return 1
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print("\n".join(result.lines()))
    return 0
