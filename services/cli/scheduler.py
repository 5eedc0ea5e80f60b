"""``gridledger scheduler``: run the scheduler service until interrupted."""

from __future__ import annotations

import asyncio

import click

from services.ops.logs import setup_logging
from services.settings import load_settings


@click.command("scheduler")
@click.option("--log-level", default="INFO", show_default=True)
def scheduler(log_level: str) -> int:
    """Run the scheduler until interrupted.

    Rebuilds its state from node-events and job-events, then places jobs live.
    Settings: GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S,
    GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S, GRIDLEDGER_SCHEDULER_TICK_S.
    """
    setup_logging("scheduler", log_level, load_settings().log_format)
    asyncio.run(_serve())
    return 0


async def _serve() -> None:
    from services.ops.server import serve_until_signalled
    from services.scheduler import build_scheduler
    from services.scheduler.endpoints import scheduler_endpoints

    settings = load_settings()
    await serve_until_signalled(settings, build_scheduler(settings), scheduler_endpoints)


COMMANDS = (scheduler,)
