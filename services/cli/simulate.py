"""``gridledger simulate --nodes N --jobs M --mix ...``: a simulated fleet on the real ledger."""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from services.simulator.mix import DEFAULT_MIX


def register(subparsers: Any) -> None:
    """Add the ``simulate`` command to the top-level parser."""
    p = subparsers.add_parser(
        "simulate",
        help="run simulated GPU nodes that speak the agent protocol, submit jobs, wait",
        description="Simulated agents (register, heartbeat, accept, hold, meter, log, exit, "
        "release) for thousands of nodes in one process. Without --with-services they join "
        "the installation of the current settings (run `gridledger scheduler` and "
        "`gridledger processors`); with it, a scheduler and a processors worker are started "
        "on fresh topics that are deleted afterwards.",
    )
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument(
        "--mix",
        default=DEFAULT_MIX,
        help=f"outcome weights (default {DEFAULT_MIX}; names: success, user_error, oom, node_lost)",
    )
    p.add_argument("--duration", default="1-3", help="job run time range in seconds (1-3)")
    p.add_argument("--gpus", default="1", help="GPUs per job, cycled (e.g. 1,1,2)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval (s)")
    p.add_argument("--tick", type=float, default=1.0, help="meter tick interval (s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument(
        "--with-services",
        action="store_true",
        help="start a scheduler and processors on fresh sim-<id>. topics",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from services.settings import load_settings
    from services.simulator.mix import JobMix
    from services.simulator.run import simulate

    try:
        mix = JobMix.parse(args.mix, args.duration, args.gpus, args.seed)
    except ValueError as exc:
        raise SystemExit(f"gridledger simulate: {exc}") from None
    settings = load_settings()
    say = (lambda line: None) if args.json else (lambda line: print(line, flush=True))

    def go(s: Any) -> Any:
        return simulate(
            s,
            args.nodes,
            args.jobs,
            mix,
            timeout_s=args.timeout,
            heartbeat_interval_s=args.heartbeat,
            tick_s=args.tick,
            gpus_per_node=args.gpus_per_node,
            say=say,
        )

    if args.with_services:
        from infra.topics import delete_topics, ensure_topics
        from services.simulator.run import run_with_services

        tag = uuid.uuid4().hex[:8]
        scoped = settings.model_copy(
            update={"topic_prefix": f"sim-{tag}.", "processors_app_id": f"sim-{tag}"}
        )
        asyncio.run(ensure_topics(scoped))
        try:
            summary = run_with_services(scoped, settings.home / "simulate" / tag / "logs", go)
        finally:
            asyncio.run(delete_topics(scoped))
            import shutil

            for path in (scoped.home / "faust").glob(f"sim-{tag}*-data"):
                shutil.rmtree(path, ignore_errors=True)
    else:
        summary = asyncio.run(go(settings))
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0 if summary["terminal"] == summary["jobs"] else 1
