"""The scheduler's ops endpoints.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops.checks import Check, StateCheck, lag_check, probe_hook
from services.ops.server import OpsEndpoints
from services.settings import Settings


def scheduler_endpoints(settings: Settings, scheduler: Any) -> OpsEndpoints:
    """Scheduler: broker, state rebuilt from the topics, live decisions running, lag."""

    def rebuilt() -> tuple[bool, str]:
        if scheduler.ready.is_set():
            state = scheduler.state
            return True, (
                f"deciding live: {len(state.fleet.nodes)} node(s), {len(state.jobs)} open "
                f"job(s), {len(state.queue)} queued"
            )
        return False, "rebuilding its state from node-events and job-events"

    lag = lag_check(settings, lambda: getattr(scheduler, "consumer", None))
    checks: list[Check] = [
        kafka_check(settings, ("node-events", "job-events")),
        StateCheck("rebuilt", rebuilt),
        lag,
    ]
    return OpsEndpoints("scheduler", checks, [probe_hook(lag)])
