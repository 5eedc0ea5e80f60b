"""Record golden histories from real runs: a job's history as the ledger holds it.

    python -m tests.golden.record --demo                 # the RECORDED jobs of a demo run
    python -m tests.golden.record --demo cuda-oom=oom    # some, under names of your own
    python -m tests.golden.record JOB_ID NAME [-d TEXT]  # one job of GRIDLEDGER_HOME's ledger

``--demo`` runs ``gridledger demo``'s catalogue (real Kafka, Postgres, Docker
agents and every service) on topics, a Postgres schema and an API port of its
own under a scratch home, then reads each chosen job's job-events and meter
ticks back from the ledger and writes ``tests/golden/recorded_<name>.json``. The
scenario builders (``regenerate.py``) write what the rules say a history looks
like; these are what the running system wrote, with its real ids, clocks,
orderings and log lines, so a fold or decider that only works on tidy histories
fails their test. The expected summary is computed by the current code when
recording: review it (and the diff of a re-recording) like any golden.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

from schemas.events import MeterTick
from services.ledger import Ledger, compose
from services.ops.specs import free_port
from services.settings import Settings, load_settings
from services.sink.db import drop_schema
from tests.golden.golden import HERE, dump

RECORDED = {
    "train-ok": "success",
    "user-error": "user_exit_1",
    "does-not-fit": "does_not_fit",
    "cuda-oom": "cuda_oom",
}
"""Demo job key -> golden name: a success, a user's exit 1, a rejection at submit, an OOM."""

PREFIX = "recorded_"
"""File names of recorded goldens start with it (the golden test tells them apart)."""


async def record(settings: Settings, job_id: str, name: str, description: str, source: str) -> Path:
    """Write ``recorded_<name>.json`` from the job's history on the settings' ledger."""
    async with Ledger(settings, "golden-recorder") as ledger:
        events = await compose.history(ledger, job_id)
        ticks = [
            t
            for t in await compose.history(ledger, job_id, "meter-ticks")
            if isinstance(t, MeterTick)
        ]
    if not events:
        raise SystemExit(f"{job_id}: no job-events on {settings.topic('job-events')}")
    path = HERE / f"{PREFIX}{name}.json"
    recorded = {
        "source": source,
        "job_id": job_id,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    dump(path, description, events, ticks, recorded=recorded)
    return path


def record_demo(chosen: dict[str, str]) -> list[Path]:
    """Run the demo's catalogue on a scratch installation and record the chosen jobs."""
    from services.demo.run import Demo
    from services.demo.scenarios import ALL_JOBS
    from services.ledger.topics import delete_topics, ensure_topics
    from tests.own_home import with_own_home

    jobs = {job.key: job for job in ALL_JOBS}
    unknown = sorted(set(chosen) - set(jobs))
    if unknown:
        raise SystemExit(f"no demo job {', '.join(unknown)}; the keys are {', '.join(jobs)}")
    tag = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="gl-golden-") as home:
        settings = with_own_home(
            load_settings(),
            Path(home),
            topic_prefix=f"golden-{tag}.",
            pg_schema=f"golden_{tag}",
            api_port=free_port(),
        )
        asyncio.run(ensure_topics(settings))
        demo = Demo(settings, say=lambda line: print(line, flush=True), timeout_s=300)
        try:
            result = demo.run()
            written = []
            for key, name in chosen.items():
                job = jobs[key]
                description = f"Recorded from a real `gridledger demo` run: {job.title}"
                written.append(
                    asyncio.run(
                        record(
                            settings,
                            result.ids[key],
                            name,
                            description,
                            f"gridledger demo ({key})",
                        )
                    )
                )
        finally:
            demo.services.stop()
            asyncio.run(delete_topics(settings))
            asyncio.run(drop_schema(settings, settings.pg_schema))
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.record", description=__doc__)
    parser.add_argument("--demo", action="store_true", help="record jobs of a fresh demo run")
    parser.add_argument("args", nargs="*", help="JOB_ID NAME, or with --demo: KEY=NAME ...")
    parser.add_argument("-d", "--description", default="", help="what the history shows")
    options = parser.parse_args(argv)
    if options.demo:
        chosen = dict(a.split("=", 1) for a in options.args) if options.args else RECORDED
        paths = record_demo(chosen)
    else:
        if len(options.args) != 2:
            parser.error("give JOB_ID NAME (or --demo)")
        job_id, name = options.args
        description = options.description or f"Recorded from the ledger: job {job_id}"
        path = asyncio.run(record(load_settings(), job_id, name, description, "the ledger"))
        paths = [path]
    for path in paths:
        print("wrote", path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
