"""The sink's ops endpoints: its checks and the read-model gauges its scrape refreshes.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops import metrics
from services.ops.checks import Check, PostgresCheck, consuming_checks, probe_hook
from services.ops.server import OpsEndpoints
from services.settings import Settings


def sink_endpoints(settings: Settings, sink: Any) -> OpsEndpoints:
    """Sink: broker, Postgres, consuming every partition, lag from the offsets it committed."""
    checks: list[Check] = [
        kafka_check(settings, sink.writer.consumed_topics()),
        PostgresCheck(pool=sink.pool),
        *consuming_checks(settings, sink, "the schema lock or the broker"),
    ]

    async def read_models() -> None:
        async with sink.pool.acquire() as conn:
            jobs = await conn.fetch("SELECT status, count(*) AS n FROM jobs GROUP BY status")
            failures = await conn.fetch(
                "SELECT failure_class, coalesce(attribution, '') AS attribution, count(*) AS n "
                "FROM attempts WHERE coalesce(failure_class, '') <> '' GROUP BY 1, 2"
            )
        metrics.JOBS.clear()
        for row in jobs:
            metrics.JOBS.labels(status=row["status"]).set(row["n"])
        metrics.ATTEMPT_FAILURES.clear()
        for row in failures:
            metrics.ATTEMPT_FAILURES.labels(
                failure_class=row["failure_class"], attribution=row["attribution"]
            ).set(row["n"])

    return OpsEndpoints("sink", checks, [read_models, probe_hook(checks[-1])])
