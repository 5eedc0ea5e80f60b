"""``gridledger scheduler``: run the scheduler service until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from services.settings import load_settings


def register(subparsers: Any) -> None:
    """Add the ``scheduler`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "scheduler",
        help="run the scheduler (fleet view, pre-flight fit, placement, queue deadlines)",
        description="Rebuilds its state from node-events and job-events, then places jobs live. "
        "Settings: GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S, GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S, "
        "GRIDLEDGER_SCHEDULER_TICK_S.",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(handler=run)


async def _serve() -> None:
    from services.scheduler import build_scheduler

    scheduler = build_scheduler(load_settings())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await scheduler.start()
    try:
        waiter = asyncio.ensure_future(stop.wait())
        assert scheduler._task is not None
        done, _ = await asyncio.wait({waiter, scheduler._task}, return_when="FIRST_COMPLETED")
        if scheduler._task in done:
            waiter.cancel()
            scheduler._task.result()
    finally:
        await scheduler.stop()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_serve())
    return 0
