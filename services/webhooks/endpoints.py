"""The webhooks service's ops endpoints.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops.checks import Check, PostgresCheck, consuming_checks, probe_hook
from services.ops.server import OpsEndpoints
from services.settings import Settings


def webhooks_endpoints(settings: Settings, service: Any) -> OpsEndpoints:
    """Webhooks: broker, Postgres, consuming job-events, lag from the offsets it stored."""
    checks: list[Check] = [
        kafka_check(settings, ["job-events"]),
        PostgresCheck(pool=service.pool),
        *consuming_checks(settings, service, "the broker or Postgres"),
    ]
    return OpsEndpoints("webhooks", checks, [probe_hook(checks[-1])])
