"""Usage export of many jobs: load through the sink's writer, export every page, check sums.

``python -m bench.usage_export [JOBS]`` (default 100,000). Simulated single-attempt
job histories (``services.simulator.histories.job_history``: success, user errors,
OOMs, with labels and meter ticks), one every 20 s from a month's last days on, are
applied to a fresh schema by the sink's own :class:`services.sink.writer.ReadModelWriter`
(the fold, accounting and ``usage_lines`` of the live sink, without the broker), in
batches of 2,000 records. Then the API's queries page over everything:

* ``GET /v1/accounting``'s query in pages of 5,000: every job once;
* ``GET /v1/usage``'s query by hour, day and month (grouped by ``label:project`` and
  ``gpu_model``, and ungrouped): the billable, credited and GPU microseconds of the
  lines of each export equal the sum over the accounting records, exactly;
* the day export again in pages of 500: byte-identical to the one in pages of 5,000;
* money: a price catalog published before the first job, with a price change a day
  in (jobs run across it), prices every hour; the billable and credited cost of the
  lines of each export equal the sum over the records exactly (integer nanos), and
  no GPU time is unpriced.

It fails (exit 1) if any check does not hold, and writes
``bench/results/usage-export.json`` with the times.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from bench.common import Result
from projections import prices
from schemas.events import PriceCatalogPublished, PriceEntry
from schemas.spec import JobSpec
from schemas.topics import STORED_TOPICS
from services.api import queries
from services.api import usage as usage_api
from services.ledger.port import LedgerRecord
from services.settings import load_settings
from services.simulator.histories import SPEC, job_history
from services.simulator.mix import JobMix
from services.sink import db
from services.sink.migrate import migrate_pool
from services.sink.writer import ReadModelWriter

MIX = JobMix.parse("success=80,user_error=10,oom=10", duration="30-600")
START = datetime(2026, 11, 28, tzinfo=UTC)
SPACING = timedelta(seconds=20)
BATCH = 2_000
CATALOG = PriceCatalogPublished(
    event_id="bench-catalog-1",
    occurred_at=START - timedelta(days=1),
    version=1,
    currency="EUR",
    entries=[
        PriceEntry(provider="sim-a", gpu_model="A100-80GB", per_gpu_hour=p, effective_from=t)
        for p, t in (("2.5", START - timedelta(days=1)), ("3.1", START + timedelta(days=1)))
    ],
)
"""The prices: one change a day after the first job."""
MONEY = ("billable_cost_nanos", "credited_cost_nanos", "unpriced_gpu_us")
SPECS = [
    SPEC.model_copy(update={"labels": {"project": p, "team": t}})
    for p in ("llm", "vision")
    for t in ("a", "b")
]


async def load(pool: asyncpg.Pool, writer: ReadModelWriter, jobs: int) -> int:
    """Apply every job's history through the writer; the number of records."""
    settings = writer.settings
    pending = [LedgerRecord(settings.topic(CATALOG.TOPIC), 0, 0, CATALOG.key, CATALOG, 0)]
    offset = 1

    async def flush() -> None:
        async with pool.acquire() as conn, conn.transaction():
            await writer.apply(conn, pending)
        pending.clear()

    for i in range(jobs):
        spec: JobSpec = SPECS[i % len(SPECS)]
        end = START + i * SPACING
        events = job_history(f"job-{i:012x}", end, MIX, heartbeat_s=600.0, tick_s=60.0, spec=spec)
        for e in events:
            if e.TOPIC not in STORED_TOPICS:
                continue  # heartbeats: the sink does not read them
            topic = settings.topic(e.TOPIC)
            ms = int(e.occurred_at.timestamp() * 1000)
            pending.append(LedgerRecord(topic, 0, offset, e.key, e, ms))
            offset += 1
        if len(pending) >= BATCH:
            await flush()
    if pending:
        await flush()
    return offset


async def every_record(pool: asyncpg.Pool, tenant: str) -> list[dict[str, Any]]:
    """Every accounting record of ``tenant``, as ``GET /v1/accounting`` pages them."""
    out: list[dict[str, Any]] = []
    after = None
    while True:
        page, after = await queries.tenant_accounting(pool, tenant, 5_000, after)
        out += page
        if after is None:
            return out


async def every_line(
    pool: asyncpg.Pool, tenant: str, period: str, by: tuple[str, ...], limit: int
) -> list[dict[str, Any]]:
    """Every usage line of ``tenant``, as ``GET /v1/usage`` pages them (``limit`` a page)."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        page, cursor = await usage_api.page(pool, tenant, period, by, None, None, limit, cursor)
        out += page
        if cursor is None:
            return out


async def run(jobs: int) -> Result:
    """Load ``jobs`` jobs into a fresh schema, export them every way, check the sums."""
    settings = load_settings()
    schema = f"bench_usage_{int(time.time())}"
    scoped = settings.model_copy(update={"pg_schema": schema})
    result = Result("usage-export", quick=jobs < 100_000, params={"jobs": jobs})
    pool = await db.create_pool(scoped, schema, max_size=4)
    failures: list[str] = []
    started = time.perf_counter()
    try:
        await migrate_pool(pool, schema)
        began = time.perf_counter()
        records_loaded = await load(pool, ReadModelWriter(scoped), jobs)
        result.figures["load_s"] = round(time.perf_counter() - began, 1)
        result.figures["records"] = records_loaded
        async with pool.acquire() as conn:
            result.figures["usage_lines_rows"] = await conn.fetchval(
                "SELECT count(*) FROM usage_lines"
            )
        began = time.perf_counter()
        records = await every_record(pool, "sim")
        result.figures["accounting_export_s"] = round(time.perf_counter() - began, 2)
        if len({r["job_id"] for r in records}) != jobs or len(records) != jobs:
            failures.append(f"accounting export: {len(records)} records for {jobs} jobs")
        want = {
            "billable_gpu_us": sum(round(r["billable_gpu_seconds"] * 1e6) for r in records),
            "credited_gpu_us": sum(round(r["credited_gpu_seconds"] * 1e6) for r in records),
            "gpu_us": sum(round(r["gpu_seconds"] * 1e6) for r in records),
            **{k: sum(r[k] for r in records) for k in MONEY},
        }
        result.figures["billable_gpu_hours"] = round(want["billable_gpu_us"] / 3.6e9, 3)
        result.figures["billable_cost_eur"] = prices.money(want["billable_cost_nanos"])
        if want["unpriced_gpu_us"]:
            failures.append(f"{want['unpriced_gpu_us']} GPU-us unpriced")
        exports: dict[str, list[dict[str, Any]]] = {}
        for period in ("hour", "day", "month"):
            for by in ((), ("label:project", "gpu_model")):
                name = f"{period}{'_by_project_model' if by else ''}"
                began = time.perf_counter()
                lines = exports[name] = await every_line(pool, "sim", period, by, 5_000)
                result.figures[f"usage_{name}_s"] = round(time.perf_counter() - began, 2)
                result.figures[f"usage_{name}_lines"] = len(lines)
                got = {k: sum(line[k] for line in lines) for k in want}
                if got != want:
                    failures.append(f"usage {name}: {got} != records {want}")
        again = await every_line(pool, "sim", "day", ("label:project", "gpu_model"), 500)
        if json.dumps(again) != json.dumps(exports["day_by_project_model"]):
            failures.append("the day export in pages of 500 differs from the one in pages of 5,000")
        result.figures["checks_failed"] = failures
        result.elapsed_s = time.perf_counter() - started
    finally:
        await pool.close()
        await db.drop_schema(settings, schema)
    return result


def main() -> int:
    """Run the benchmark, print its figures, save them; 1 when a check failed."""
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    result = asyncio.run(run(jobs))
    for line in result.lines():
        print(line)
    result.save(Path(__file__).parent / "results")
    return 1 if result.figures["checks_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
