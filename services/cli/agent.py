"""``gridledger agent``: run the node agent until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from services.agent.bootstrap import run_agent
from services.agent.settings import AgentSettings
from services.settings import load_settings


def register(subparsers: Any) -> None:
    """Add the ``agent`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent: take attempts placed on this node and run them in Docker",
        description="Runs until SIGTERM/SIGINT. Every option also reads GRIDLEDGER_AGENT_<NAME> "
        "(e.g. GRIDLEDGER_AGENT_PULL_POLICY); options win. On shutdown running containers are "
        "left running and re-attached by the next start (--shutdown-policy stop stops them).",
    )
    parser.add_argument("--node-id", help="this node's id (default: the host name)")
    parser.add_argument(
        "--provider", help="provider label (default: from the inventory or 'local')"
    )
    parser.add_argument("--region", help="region label (default: from the inventory or 'local')")
    parser.add_argument(
        "--inventory",
        type=Path,
        help="declared GPU inventory (JSON or YAML), used when NVML is unavailable",
    )
    parser.add_argument("--pull-policy", choices=["never", "if_not_present"])
    parser.add_argument("--heartbeat-interval", type=float, dest="heartbeat_interval_s")
    parser.add_argument("--meter-interval", type=float, dest="meter_interval_s")
    parser.add_argument("--log-quota-bytes", type=int)
    parser.add_argument("--shutdown-policy", choices=["detach", "stop"])
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {
        name: value
        for name, value in {
            "node_id": args.node_id,
            "provider": args.provider,
            "region": args.region,
            "inventory_file": args.inventory,
            "pull_policy": args.pull_policy,
            "heartbeat_interval_s": args.heartbeat_interval_s,
            "meter_interval_s": args.meter_interval_s,
            "log_quota_bytes": args.log_quota_bytes,
            "shutdown_policy": args.shutdown_policy,
        }.items()
        if value is not None
    }
    agent_settings = AgentSettings(**overrides)
    settings = load_settings()
    asyncio.run(_serve(settings, agent_settings))
    return 0


async def _serve(settings: Any, agent_settings: AgentSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run_agent(settings, agent_settings, stop)
