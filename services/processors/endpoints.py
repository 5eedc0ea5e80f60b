"""The processors' ops endpoints, with faust's own sensor installed on their app.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops.checks import Check, StateCheck, lag_check, probe_hook
from services.ops.server import OpsEndpoints
from services.processors.app import install_faust_sensor, topics_for
from services.settings import Settings


def processors_endpoints(settings: Settings, processors: Any) -> OpsEndpoints:
    """Processors: broker, worker not crashed, group joined, lag; plus faust's own sensor."""
    app = processors.app
    install_faust_sensor(app)

    def worker() -> tuple[bool, str]:
        if processors.crashed.is_set():
            return False, f"crashed: {processors.error!r}"
        return True, f"processors {','.join(processors.only)} running"

    def group() -> tuple[bool, str]:
        member = processors.consumer
        if member.rebalancing:
            return False, f"group {processors.app_id} is rebalancing"
        if member.subscription is None or not member.generations:
            return False, f"not a member of {processors.app_id} yet"
        return True, (
            f"member of {processors.app_id} ({member.generations} assignment(s) so far), "
            f"{len(processors.assignment())} partition(s) assigned"
        )

    def consumer() -> Any:
        return processors.consumer.subscription

    lag = lag_check(settings, consumer)
    checks: list[Check] = [
        kafka_check(settings, topics_for(processors.only)),
        StateCheck("worker", worker),
        StateCheck("group", group),
        lag,
    ]
    return OpsEndpoints("processors", checks, [probe_hook(lag)])
