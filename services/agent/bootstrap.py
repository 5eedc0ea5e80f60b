"""Composition root of the agent: build it from settings, run it until told to stop."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from services.agent.agent import Agent
from services.agent.artifacts import ArtifactStore, MeteredStore, S3Store
from services.agent.context import AgentContext
from services.agent.inventory import discover
from services.agent.journal import Journal
from services.agent.publisher import LedgerPublisher
from services.agent.runtime import DockerRuntime
from services.agent.secrets import SecretsClient
from services.agent.settings import AgentSettings
from services.agent.spool import PublisherFactory, Spool
from services.backoff import outage_of
from services.settings import Settings

log = logging.getLogger(__name__)


def bootstrap(
    settings: Settings,
    agent: AgentSettings,
    *,
    runtime: DockerRuntime | None = None,
    nvml: Any = None,
    publisher_factory: PublisherFactory | None = None,
    store: ArtifactStore | None = None,
) -> Agent:
    """Build an agent; tests pass fakes for any adapter (a publisher they can cut off ...)."""
    home = settings.home
    factory = publisher_factory or (
        lambda lane: LedgerPublisher(settings, f"agent-{agent.node_id}-{lane}")
    )
    artifacts: ArtifactStore = MeteredStore(store or S3Store(settings))
    ctx = AgentContext(
        settings=settings,
        agent=agent,
        spool=Spool(
            agent.spool_dir(home),
            factory,
            agent.publish_timeout_s,
            outage=outage_of(f"Kafka at {settings.kafka_bootstrap}"),
        ),
        journal=Journal(agent.state_dir(home)),
        runtime=runtime or DockerRuntime(settings.docker_host),
        store=artifacts,
        inventory=discover(agent.inventory_file, nvml),
        executor=ThreadPoolExecutor(64, thread_name_prefix=f"agent-{agent.node_id}"),
        secrets=SecretsClient(settings, agent),
    )
    return Agent(ctx)


async def run_agent(settings: Settings, agent: AgentSettings, stop: asyncio.Event) -> None:
    """Run an agent until ``stop`` is set, then shut it down cleanly.

    Its ops server (``GRIDLEDGER_OPS_PORT``) answers /healthz, /readyz and /metrics
    from the moment the node has registered.
    """
    from services.agent.endpoints import agent_endpoints
    from services.ops.server import ops_server

    node = bootstrap(settings, agent)
    ops = ops_server(settings, agent_endpoints(settings, node))
    await node.start()
    await ops.start()
    try:
        await stop.wait()
    finally:
        await ops.stop()
        await node.stop()
