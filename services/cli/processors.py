"""``gridledger processors [--only state,watchdog,...]``: run a processors worker."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from services.settings import load_settings

CHOICES = ("dispatch", "state", "watchdog", "classifier", "accounting")


def register(subparsers: Any) -> None:
    """Add the ``processors`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "processors",
        help="run the stream processors (all in one worker, or --only some of them)",
        description="faust worker with the dispatch, state, watchdog, classifier and accounting "
        "processors. Each subset is its own consumer group, so run every processor in exactly "
        "one kind of worker. Settings: GRIDLEDGER_WATCHDOG_SILENCE_S, "
        "GRIDLEDGER_WATCHDOG_LOST_AFTER_S, GRIDLEDGER_WATCHDOG_FINISHING_TIMEOUT_S.",
    )
    parser.add_argument(
        "--only",
        default=",".join(CHOICES),
        help=f"comma-separated subset of {','.join(CHOICES)} (default: all)",
    )
    parser.add_argument("--app-id", default=None, help="override the faust app id / group")
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(handler=run)


async def _serve(only: list[str], app_id: str | None) -> None:
    from services.processors import build_processors

    processors = build_processors(load_settings(), only, app_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await processors.start()
    print(f"processors {','.join(processors.only)} running as {processors.app_id}", flush=True)
    stopping = asyncio.ensure_future(stop.wait())
    crashing = asyncio.ensure_future(processors.crashed.wait())
    await asyncio.wait({stopping, crashing}, return_when=asyncio.FIRST_COMPLETED)
    if processors.crashed.is_set():
        # No graceful stop: nothing of the failed batch may be committed. The next
        # worker rebuilds from the topics and re-processes it.
        print(f"gridledger processors: crashed: {processors.error!r}", file=sys.stderr, flush=True)
        os._exit(70)
    crashing.cancel()
    await processors.stop()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = sorted(set(only) - set(CHOICES))
    if unknown:
        raise SystemExit(f"gridledger processors: unknown {unknown}; choose from {CHOICES}")
    asyncio.run(_serve(only, args.app_id))
    return 0
