"""``gridledger processors [--only state,watchdog,...]``: run a processors worker."""

from __future__ import annotations

import asyncio
import os
import sys

import click

from services.ops.logs import setup_logging
from services.settings import load_settings


def _subset(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    if ctx.resilient_parsing:
        return []  # completing a command line: nothing is run, nothing heavy is imported
    from services.processors.step import PROCESSORS  # the worker's modules: only to run it

    only = [p.strip() for p in value.split(",") if p.strip()] if value else list(PROCESSORS)
    unknown = sorted(set(only) - set(PROCESSORS))
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; choose from {', '.join(PROCESSORS)}")
    return only


@click.command("processors")
@click.option(
    "--only",
    callback=_subset,
    help="Comma-separated subset of dispatch,state,watchdog,classifier,accounting (default: all).",
)
@click.option("--app-id", help="Override the faust app id / group.")
@click.option("--log-level", default="INFO", show_default=True)
def processors(only: list[str], app_id: str | None, log_level: str) -> int:
    """Run a faust worker with the dispatch, state, watchdog, classifier and accounting processors.

    Each subset is its own consumer group, so run every processor in exactly
    one kind of worker. Settings: GRIDLEDGER_WATCHDOG_SILENCE_S,
    GRIDLEDGER_WATCHDOG_LOST_AFTER_S, GRIDLEDGER_WATCHDOG_FINISHING_TIMEOUT_S.
    """
    setup_logging("processors", log_level, load_settings().log_format)
    asyncio.run(_serve(only, app_id))
    return 0


async def _serve(only: list[str], app_id: str | None) -> None:
    from services.gc_tuning import tuned_gc
    from services.ops.server import ops_server, stop_on_signals
    from services.processors import build_processors
    from services.processors.endpoints import processors_endpoints

    settings = load_settings()
    workers = build_processors(settings, only, app_id)
    ops = ops_server(settings, processors_endpoints(settings, workers))
    stop = stop_on_signals()
    await workers.start()
    await ops.start()
    print(f"processors {','.join(workers.only)} running as {workers.app_id}", flush=True)
    stopping = asyncio.ensure_future(stop.wait())
    crashing = asyncio.ensure_future(workers.crashed.wait())
    # It holds many jobs' folded states and histories (services/processors/store.py): the
    # default collector re-scanned them ~10 us per record (bench/README.md, "The fold").
    with tuned_gc():
        await asyncio.wait({stopping, crashing}, return_when=asyncio.FIRST_COMPLETED)
    if workers.crashed.is_set():
        # No graceful stop: nothing of the failed batch may be committed. The next
        # worker rebuilds from the topics and re-processes it.
        print(f"gridledger processors: crashed: {workers.error!r}", file=sys.stderr, flush=True)
        os._exit(70)
    crashing.cancel()
    await ops.stop()
    await workers.stop()


COMMANDS = (processors,)
