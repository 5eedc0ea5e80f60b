"""``gridledger bench restart``-style figure for the scheduler: how long a start takes, and
how much memory it holds, when the ledger already holds N ledger events.

The scheduler reads ``node-events`` and ``job-events`` from offset 0 at every start
(no snapshot yet), so both grow with the history. Run:
``python -m bench.restart --events 100000 1000000``; it loads simulated job histories
(:mod:`bench.load`, about 2.3 ledger events per job-event) onto fresh
``bench-restart-<id>.`` topics, times one scheduler start until it is ready (rebuilt
and live) in a child process, and prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
import uuid
from typing import Any

from bench.load import load
from services.ledger import Ledger
from services.ledger.topics import delete_topics, ensure_topics
from services.settings import Settings, load_settings


def _child(prefix: str) -> None:
    """One scheduler start on ``prefix`` topics: seconds until ready, peak RSS (MiB)."""
    from services.scheduler import build_scheduler

    settings = load_settings().model_copy(update={"topic_prefix": prefix})

    async def start() -> float:
        scheduler = build_scheduler(settings)
        began = time.monotonic()
        await scheduler.start()
        try:
            await scheduler.wait_ready(timeout=3600)
            return time.monotonic() - began
        finally:
            await scheduler.stop()

    took = asyncio.run(start())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"ready_s": round(took, 2), "peak_rss_mib": round(rss, 1)}))


async def _measure(base: Settings, events: int) -> dict[str, Any]:
    settings = base.model_copy(update={"topic_prefix": f"bench-restart-{uuid.uuid4().hex[:6]}."})
    await ensure_topics(settings)
    try:
        async with Ledger(settings, "bench") as ledger:
            loaded = await load(ledger, events)
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.restart", "--child", settings.topic_prefix,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await child.communicate()
        figures = json.loads(out.decode().strip().splitlines()[-1])
        by_topic = {t.removeprefix(settings.topic_prefix): n for t, n in loaded.by_topic.items()}
        return {"events": loaded.events, **by_topic, **figures}
    finally:
        await delete_topics(settings)


def main() -> None:
    """Measure one start per size given; one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    base = load_settings()
    for events in args.events:
        print(json.dumps(asyncio.run(_measure(base, events))), flush=True)


if __name__ == "__main__":
    main()
