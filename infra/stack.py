"""The local stack as a whole: what ``gridledger dev up|down|status`` does.

``up`` is idempotent: a component that runs is only checked for readiness.
``down`` stops what this home's ``up`` started (pid files, and a marker for
dockerd) and keeps the data. Two homes with different ports are independent
stacks; they share the Docker daemon and its images.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aiokafka.errors import KafkaError

from infra import docker_daemon, images, kafka, postgres, seaweedfs, tokens
from infra.processes import port_open
from infra.status import ComponentStatus
from schemas.errors import StackError
from services import secretstore
from services.ledger import topics as topics_module
from services.notary import keys as notary_keys
from services.private_files import write_private
from services.settings import Settings

Report = Callable[[ComponentStatus], None]


def _ignore(_: ComponentStatus) -> None:
    pass


@contextmanager
def _locked(settings: Settings) -> Iterator[None]:
    """One ``up`` or ``down`` at a time per home (several shells may run ``dev up`` at once)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    with open(settings.home / ".stack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def render_stack_env(settings: Settings) -> str:
    """``stack.env``: the values ``up`` used, read back by ``load_settings()``."""
    values = {
        "GRIDLEDGER_HOME": str(settings.home),
        "GRIDLEDGER_KAFKA_BOOTSTRAP": ",".join(n.address for n in kafka.cluster_nodes(settings)),
        "GRIDLEDGER_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "GRIDLEDGER_KAFKA_BROKERS": str(settings.kafka_brokers),
        "GRIDLEDGER_TOPIC_PREFIX": settings.topic_prefix,
        "GRIDLEDGER_JOB_PARTITIONS": str(settings.job_partitions),
        "GRIDLEDGER_NODE_PARTITIONS": str(settings.node_partitions),
        "GRIDLEDGER_PG_PORT": str(settings.pg_port),
        "GRIDLEDGER_TOKENS_FILE": str(settings.tokens_path),
        "GRIDLEDGER_S3_PORT": str(settings.s3_port),
        "GRIDLEDGER_S3_BUCKET": settings.s3_bucket,
        "GRIDLEDGER_S3_CREDENTIALS_FILE": str(settings.s3_credentials_path),
    }
    if settings.kafka_brokers > 1:
        values["GRIDLEDGER_KAFKA_CONTROLLER_PORTS"] = ",".join(
            str(n.controller_port) for n in kafka.cluster_nodes(settings)
        )
    if settings.topic_replication:
        values["GRIDLEDGER_TOPIC_REPLICATION"] = str(settings.topic_replication)
    # Only explicit values: a derived DSN written here would shadow a later GRIDLEDGER_PG_PORT.
    if settings.pg_dsn:
        values["GRIDLEDGER_PG_DSN"] = settings.pg_dsn
    if settings.docker_host:
        values["GRIDLEDGER_DOCKER_HOST"] = settings.docker_host
    if settings.s3_endpoint:
        values["GRIDLEDGER_S3_ENDPOINT"] = settings.s3_endpoint
    if settings.weed_binary:
        values["GRIDLEDGER_WEED_BINARY"] = str(settings.weed_binary)
    header = (
        "# Written by `gridledger dev up`; read by services.settings.load_settings().\n"
        "# GRIDLEDGER_* environment variables take precedence over these values.\n"
    )
    return header + "".join(f"{key}={value}\n" for key, value in values.items())


def stack_env_path(settings: Settings) -> Path:
    """The file `dev up` writes with the settings it used; every service reads it first."""
    return settings.home / "stack.env"


async def up(settings: Settings, report: Report = _ignore) -> list[ComponentStatus]:
    """Start (or verify) every component; call ``report`` as each one is ready.

    Kafka, Postgres, the object store and Docker (with the images) come up concurrently.

    Raises:
        StackError: one or more components failed; the others are left running
            and listed in the message.
    """
    with _locked(settings):
        settings.logs_dir.mkdir(parents=True, exist_ok=True)
        results: list[ComponentStatus] = []

        def done(component: ComponentStatus) -> ComponentStatus:
            results.append(component)
            report(component)
            return component

        wrote = tokens.ensure_tokens(settings)
        token_status = tokens.status(settings)
        done(
            dataclasses.replace(
                token_status, detail=f"{'created' if wrote else 'kept'}, {token_status.detail}"
            )
        )

        # The key that seals the tenants' secrets and derives each node's agent token.
        wrote_key = secretstore.ensure_key(settings)
        done(
            ComponentStatus(
                name="secrets key",
                running=True,
                address="GRIDLEDGER_SECRETS_KEY"
                if settings.secrets_key
                else str(secretstore.key_path(settings)),
                detail="created (0600)" if wrote_key else "kept",
            )
        )

        # The key the notary signs the ledger's seals with (README "Audit").
        wrote_notary = notary_keys.ensure_key(settings)
        done(
            ComponentStatus(
                name="notary key",
                running=True,
                address=str(settings.notary_key_path),
                detail="created (0600)" if wrote_notary else "kept",
            )
        )

        async def kafka_and_topics() -> None:
            for node in await kafka.up(settings):
                done(node)
            began = time.monotonic()
            counts = await topics_module.ensure_topics(settings)
            done(
                ComponentStatus(
                    name="topics",
                    running=True,
                    address=f"{settings.topic_prefix}* ({len(counts)} topics)",
                    detail=f"ready in {time.monotonic() - began:.1f} s",
                )
            )

        async def postgres_up() -> None:
            done(await postgres.up(settings))

        async def docker_and_images() -> None:
            done(await docker_daemon.up(settings))
            done(await asyncio.to_thread(images.up, settings))

        async def object_store() -> None:
            done(await seaweedfs.up(settings))

        outcomes = await asyncio.gather(
            kafka_and_topics(),
            postgres_up(),
            docker_and_images(),
            object_store(),
            return_exceptions=True,
        )
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        for failure in failures:
            if not isinstance(failure, Exception):
                raise failure
        if failures:
            raise StackError(
                "the local stack is not fully up:\n"
                + "\n".join(f"  - {failure}" for failure in failures)
                + "\nfix the cause and run `gridledger dev up` again "
                "(running components are kept)"
            )
        write_private(stack_env_path(settings), render_stack_env(settings))
        return results


def down(settings: Settings, report: Report = _ignore) -> list[ComponentStatus]:
    """Stop the components this home's ``up`` started; data stays in the home folder."""
    with _locked(settings):
        results = []
        for component in kafka.down(settings):
            results.append(component)
            report(component)
        for stop in (postgres.down, seaweedfs.down, docker_daemon.down):
            component = stop(settings)
            results.append(component)
            report(component)
        return results


async def status(settings: Settings) -> list[ComponentStatus]:
    """Each component's state, address, pid and log, without changing anything."""
    brokers, *parts = await asyncio.gather(
        asyncio.to_thread(kafka.statuses, settings),
        asyncio.to_thread(postgres.status, settings),
        asyncio.to_thread(docker_daemon.status, settings),
        asyncio.to_thread(images.status, settings),
        asyncio.to_thread(tokens.status, settings),
        asyncio.to_thread(seaweedfs.status, settings),
    )
    topics = await _topics_status(settings, kafka_running=any(b.running for b in brokers))
    return [*brokers, topics, *parts]


async def _topics_status(settings: Settings, kafka_running: bool) -> ComponentStatus:
    address = f"{settings.topic_prefix}*"
    if not kafka_running:
        return ComponentStatus(name="topics", running=False, address=address, detail="no broker")
    expected = {spec.name for spec in topics_module.topic_specs(settings)}
    try:
        async with asyncio.timeout(10), topics_module.admin_client(settings) as admin:
            listed = set(await admin.list_topics())
    except (KafkaError, OSError, TimeoutError) as exc:
        return ComponentStatus(name="topics", running=False, address=address, detail=repr(exc))
    missing = sorted(expected - listed)
    return ComponentStatus(
        name="topics",
        running=not missing,
        address=f"{address} ({len(expected) - len(missing)}/{len(expected)} topics)",
        detail=f"missing: {', '.join(missing)}" if missing else "",
    )


def probe(settings: Settings) -> list[str]:
    """Fast check for tests: what of the stack does not answer (empty when all does)."""
    problems = []
    # A multi-broker cluster that lost a node still serves: one answering broker is enough.
    addresses = [kafka.broker_address(settings)]
    if settings.kafka_brokers > 1:
        addresses = [(n.host, n.port) for n in kafka.cluster_nodes(settings)]
    if not any(port_open(host, port) for host, port in addresses):
        problems.append(f"Kafka does not answer on {settings.kafka_bootstrap}")
    if not settings.pg_dsn and not port_open("127.0.0.1", settings.pg_port):
        problems.append(f"Postgres does not answer on 127.0.0.1:{settings.pg_port}")
    if not docker_daemon.ping(settings):
        problems.append(f"no Docker daemon answers at {docker_daemon.address(settings)}")
    return problems
