"""``gridledger demo``: bring up the local stack and show every failure mode end to end."""

from __future__ import annotations

import argparse
from typing import Any

from services.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="start the local stack and two agents, run one job per failure mode, print a table",
        description="Brings up Kafka, Postgres and Docker (`dev up`), runs the api, sink, "
        "scheduler, processors and two agents with declared GPU inventories, submits jobs "
        "covering the failure modes, follows one job's logs live and ends with a table read "
        "back from the API. Takes a few minutes on 2 cores.",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the services and agents running after the table (Ctrl-C stops them), "
        "to try submit/status/logs/explain against them",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from services.demo.run import main

    return main(load_settings(), keep_running=args.keep_running)
