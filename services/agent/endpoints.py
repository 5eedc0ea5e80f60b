"""The agent's ops endpoints: broker, Docker, its commands consumer, lag, spool depth.

Built by the service's composition root; what a check and an ops server are:
:mod:`services.ops.checks`, :mod:`services.ops.server`.
"""

from __future__ import annotations

from typing import Any

from services.ledger.health import kafka_check
from services.ops import metrics
from services.ops.checks import Check, DockerCheck, StateCheck, lag_check, probe_hook
from services.ops.server import OpsEndpoints
from services.settings import Settings


def agent_endpoints(settings: Settings, agent: Any) -> OpsEndpoints:
    """Agent: broker, Docker daemon, its commands consumer positioned, lag, spool depth."""
    ctx = agent.ctx

    def commands() -> tuple[bool, str]:
        subscription = agent.commands_consumer
        if agent.commands_ready.is_set() and subscription and subscription.consumer:
            return True, f"reading node-commands for {ctx.node_id}"
        return False, f"node-commands consumer of {ctx.node_id} not positioned (broker away?)"

    lag = lag_check(settings, lambda: agent.commands_consumer)
    checks: list[Check] = [
        kafka_check(settings, ("node-commands", "job-events", "heartbeats", "log-chunks")),
        DockerCheck(ctx.runtime.client.ping),
        StateCheck("commands", commands),
        lag,
    ]

    async def spool() -> None:
        for name, lane in ctx.spool.lanes.items():
            metrics.SPOOL_DEPTH.labels(lane=name).set(lane.segments.pending_bytes())

    return OpsEndpoints(f"agent-{ctx.node_id}", checks, [spool, probe_hook(lag)])
