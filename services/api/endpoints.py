"""The API's readiness: what its own port serves under ``/readyz`` and ``/metrics``.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops.checks import Check, Optional, PostgresCheck
from services.ops.server import OpsEndpoints
from services.settings import Settings


def api_endpoints(settings: Settings, pool: Any) -> OpsEndpoints:
    """API: the broker is required (submissions are appends); Postgres only degrades it —
    with the read models away it still answers 202 to submissions, reads may lag."""
    checks: list[Check] = [
        kafka_check(settings, ("job-events", "log-chunks")),
        Optional(PostgresCheck(pool=pool)),
    ]
    return OpsEndpoints("api", checks)
