"""What each service checks and exports: the one place that says it, per service.

Each function takes the running service object and returns the
:class:`~services.ops.server.OpsEndpoints` its ops server (or, for the API, its
own port) serves. The services call these from their composition roots; the
checks read the service's live state (its pool, its consumer) so ``/readyz``
says what the service really sees.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from services.ledger.health import KafkaCheck
from services.ops import metrics
from services.ops.checks import (
    Check,
    DockerCheck,
    LagCheck,
    Optional,
    PostgresCheck,
    StateCheck,
    consumer_lag,
)
from services.ops.server import OpsEndpoints
from services.settings import Settings
from services.transport import kafka_options

log = logging.getLogger(__name__)


def kafka_check(settings: Settings, topics: Iterable[str]) -> KafkaCheck:
    """Broker metadata with the service's topics (full names or suffixes) present."""
    names = [t if t.startswith(settings.topic_prefix) else settings.topic(t) for t in topics]
    return KafkaCheck(settings.kafka_bootstrap, names, kafka_options(settings))


def _lag(settings: Settings, consumer_of: Any, positions_of: Any = None) -> LagCheck:
    async def source() -> dict[tuple[str, int], int | None]:
        consumer = consumer_of()
        if consumer is None:
            return {}
        return await consumer_lag(consumer, positions_of() if positions_of else None)

    return LagCheck(source, settings.ops_max_lag)


# --------------------------------------------------------------------------- api


def api_endpoints(settings: Settings, pool: Any) -> OpsEndpoints:
    """API: the broker is required (submissions are appends); Postgres only degrades it —
    with the read models away it still answers 202 to submissions, reads may lag."""
    checks: list[Check] = [
        kafka_check(settings, ("job-events", "log-chunks")),
        Optional(PostgresCheck(pool=pool)),
    ]
    return OpsEndpoints("api", checks)


def _consuming(settings: Settings, service: Any, waiting_for: str) -> list[Check]:
    """A consumer that stores its offsets in Postgres (``consumer``, ``positions``): whether
    it consumes, and its lag from the offsets it stored."""

    def consuming() -> tuple[bool, str]:
        consumer = getattr(service, "consumer", None)
        if consumer is None:
            return False, f"not consuming yet (waiting for {waiting_for})"
        return True, f"assigned {len(consumer.assignment())} partition(s)"

    lag = _lag(settings, lambda: getattr(service, "consumer", None), lambda: service.positions)
    return [StateCheck("consumer", consuming), lag]


# --------------------------------------------------------------------------- sink


def sink_endpoints(settings: Settings, sink: Any) -> OpsEndpoints:
    """Sink: broker, Postgres, consuming every partition, lag from the offsets it committed."""
    checks: list[Check] = [
        kafka_check(settings, sink.writer.consumed_topics()),
        PostgresCheck(pool=sink.pool),
        *_consuming(settings, sink, "the schema lock or the broker"),
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

    return OpsEndpoints("sink", checks, [read_models, _probe_hook(checks[-1])])


def webhooks_endpoints(settings: Settings, service: Any) -> OpsEndpoints:
    """Webhooks: broker, Postgres, consuming job-events, lag from the offsets it stored."""
    checks: list[Check] = [
        kafka_check(settings, ["job-events"]),
        PostgresCheck(pool=service.pool),
        *_consuming(settings, service, "the broker or Postgres"),
    ]
    return OpsEndpoints("webhooks", checks, [_probe_hook(checks[-1])])


# --------------------------------------------------------------------------- scheduler


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

    lag = _lag(settings, lambda: getattr(scheduler, "consumer", None))
    checks: list[Check] = [
        kafka_check(settings, ("node-events", "job-events")),
        StateCheck("rebuilt", rebuilt),
        lag,
    ]
    return OpsEndpoints("scheduler", checks, [_probe_hook(lag)])


# --------------------------------------------------------------------------- processors


def processors_endpoints(settings: Settings, processors: Any) -> OpsEndpoints:
    """Processors: broker, worker not crashed, group joined, lag; plus faust's own sensor."""
    from services.processors.app import install_faust_sensor, topics_for

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
        if member.kafka is None or not member.generations:
            return False, f"not a member of {processors.app_id} yet"
        return True, (
            f"member of {processors.app_id} ({member.generations} assignment(s) so far), "
            f"{len(processors.assignment())} partition(s) assigned"
        )

    def consumer() -> Any:
        return processors.consumer.kafka

    lag = _lag(settings, consumer)
    checks: list[Check] = [
        kafka_check(settings, topics_for(processors.only)),
        StateCheck("worker", worker),
        StateCheck("group", group),
        lag,
    ]
    return OpsEndpoints("processors", checks, [_probe_hook(lag)])


# --------------------------------------------------------------------------- agent


def agent_endpoints(settings: Settings, agent: Any) -> OpsEndpoints:
    """Agent: broker, Docker daemon, its commands consumer positioned, lag, spool depth."""
    ctx = agent.ctx

    def commands() -> tuple[bool, str]:
        if agent.commands_ready.is_set() and getattr(agent, "commands_consumer", None):
            return True, f"reading node-commands for {ctx.node_id}"
        return False, f"node-commands consumer of {ctx.node_id} not positioned (broker away?)"

    lag = _lag(settings, lambda: getattr(agent, "commands_consumer", None))
    checks: list[Check] = [
        kafka_check(settings, ("node-commands", "job-events", "heartbeats", "log-chunks")),
        DockerCheck(ctx.runtime.client.ping),
        StateCheck("commands", commands),
        lag,
    ]

    async def spool() -> None:
        for name, lane in ctx.spool.lanes.items():
            metrics.SPOOL_DEPTH.labels(lane=name).set(lane.segments.pending_bytes())

    return OpsEndpoints(f"agent-{ctx.node_id}", checks, [spool, _probe_hook(lag)])


# --------------------------------------------------------------------------- notary


def notary_endpoints(settings: Settings, notary: Any) -> OpsEndpoints:
    """Notary: broker with the sealed topics and ledger-seals, sealing live, lag."""
    from schemas.topics import SEALED_TOPICS

    def sealing() -> tuple[bool, str]:
        if notary.ready.is_set() and notary.consumer is not None:
            unstored = f", {len(notary.unstored)} not stored yet" if notary.unstored else ""
            signed = f"{notary.seals} seal(s) signed{unstored}"
            return True, f"sealing {len(notary.last)} partition(s), {signed}"
        return False, "resuming from ledger-seals (broker away?)"

    lag = _lag(settings, lambda: notary.consumer)
    checks: list[Check] = [
        kafka_check(settings, (*SEALED_TOPICS, "ledger-seals")),
        StateCheck("sealing", sealing),
        lag,
    ]
    return OpsEndpoints("notary", checks, [_probe_hook(lag)])


def _probe_hook(check: Check) -> Any:
    async def hook() -> None:
        await check.probe()

    return hook
