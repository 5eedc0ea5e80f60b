"""``gridledger scheduler``: run the scheduler service until interrupted."""

from __future__ import annotations

import asyncio
import logging
import signal

import click

from services.settings import load_settings


@click.command(
    "scheduler",
    short_help="run the scheduler (fleet view, pre-flight fit, placement, queue deadlines)",
)
@click.option("--log-level", default="INFO", show_default=True)
def scheduler(log_level: str) -> int:
    """Run the scheduler until interrupted.

    Rebuilds its state from node-events and job-events, then places jobs live.
    Settings: GRIDLEDGER_SCHEDULER_NODE_TIMEOUT_S,
    GRIDLEDGER_SCHEDULER_DISPATCH_TIMEOUT_S, GRIDLEDGER_SCHEDULER_TICK_S.
    """
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_serve())
    return 0


async def _serve() -> None:
    from services.scheduler import build_scheduler

    service = build_scheduler(load_settings())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await service.start()
    try:
        waiter = asyncio.ensure_future(stop.wait())
        assert service._task is not None
        done, _ = await asyncio.wait({waiter, service._task}, return_when="FIRST_COMPLETED")
        if service._task in done:
            waiter.cancel()
            service._task.result()
    finally:
        await service.stop()


COMMANDS = (scheduler,)
