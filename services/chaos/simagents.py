"""Simulated agents as one real process for the chaos suite: ``python -m services.chaos.simagents``.

A :class:`services.simulator.fleet.SimFleet` that runs until it is killed and
writes the id of every event the broker acknowledged to ``--acks`` (one per
line, written as the ack arrives), so the harness can prove none of them is
missing from the ledger afterwards. Crash-only, like a real agent under a
supervisor: when the broker cannot take its facts it exits non-zero and is
started again; the attempts it was running are then lost for the watchdog to
find, exactly as with a dead host.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import TextIO

from services.ledger import Ledger
from services.settings import load_settings
from services.simulator.fleet import SimFleet
from services.simulator.mix import JobMix

log = logging.getLogger("gridledger.chaos.simagents")


def _write(acks: TextIO, event_id: str) -> None:
    acks.write(f"{event_id}\n")


async def run(args: argparse.Namespace) -> int:
    """Run a simulated fleet until signalled; exit 1 when a node fails or a fact is not
    acknowledged."""
    settings = load_settings()
    mix = JobMix.parse(args.mix, args.duration, "1", args.seed)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Line-buffered appends of one event id per ack, read by the harness afterwards.
    with Path(args.acks).open("a", buffering=1) as acks:  # noqa: ASYNC230
        async with Ledger(settings, f"simagents-{args.prefix}") as ledger:
            fleet = SimFleet(
                ledger,
                args.nodes,
                mix,
                gpus_per_node=args.gpus_per_node,
                gpu_model=args.gpu_model,
                heartbeat_interval_s=args.heartbeat,
                tick_s=args.tick,
                prefix=args.prefix,
                on_ack=lambda event: _write(acks, event.event_id),
            )
            await fleet.start()
            log.info("%d simulated nodes of %s registered", args.nodes, args.gpu_model)
            try:
                while not stop.is_set():
                    failure = fleet.failure()
                    if failure is not None:
                        log.error("a simulated node failed (%r); exiting", failure)
                        return 1
                    if fleet.stats.failed:
                        log.error("%d facts were not acknowledged; exiting", fleet.stats.failed)
                        return 1
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.5)
            finally:
                await fleet.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m services.chaos.simagents``: simulated agents for a chaos phase."""
    p = argparse.ArgumentParser(prog="python -m services.chaos.simagents")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--gpu-model", default="SIM-A100")
    p.add_argument("--prefix", default="sim")
    p.add_argument("--mix", default="success=80,user_error=10,oom=10")
    p.add_argument("--duration", default="1-3")
    p.add_argument("--heartbeat", type=float, default=1.0)
    p.add_argument("--tick", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--acks", required=True, help="file the acknowledged event ids go to")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
