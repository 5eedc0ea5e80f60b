"""/readyz answers ready only when the dependencies really answer (real broker, Postgres)."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiokafka import TopicPartition

from services.ledger import Ledger
from services.ledger.client import partition_for
from services.ledger.health import KafkaCheck
from services.ops.checks import (
    Check,
    DockerCheck,
    LagCheck,
    Optional,
    PostgresCheck,
    consumer_lag,
)
from services.ops.logs import JsonFormatter, log_context
from services.ops.server import OpsEndpoints, OpsServer
from services.ops.specs import free_port
from services.settings import Settings
from tests.sink.scenario import run_facts


def closed_port() -> int:
    """A port nothing listens on: bound, then released (nobody else binds it meanwhile)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest_asyncio.fixture
async def serve() -> AsyncIterator[Any]:
    servers: list[OpsServer] = []

    async def start(checks: Sequence[Check]) -> str:
        port = free_port()
        server = await OpsServer(OpsEndpoints("test", checks), "127.0.0.1", port).start()
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        await server.stop()


async def get(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


@pytest.mark.integration
async def test_ready_when_broker_and_postgres_answer(settings: Settings, serve: Any) -> None:
    base = await serve(
        [
            KafkaCheck(settings.kafka_bootstrap, [settings.topic("job-events")]),
            PostgresCheck(dsn=settings.dsn),
        ]  # fmt: skip
    )
    status, body = await get(f"{base}/readyz")
    assert status == 200, body
    checks = {c["name"]: c for c in body["checks"]}
    assert body["ready"] is True
    assert checks["kafka"]["ok"] and checks["kafka"]["brokers"] >= 1
    assert checks["postgres"]["ok"]
    status, alive = await get(f"{base}/healthz")
    assert status == 200 and alive["alive"] is True


@pytest.mark.integration
async def test_503_naming_postgres_when_its_address_is_a_closed_port(
    settings: Settings, serve: Any
) -> None:
    dead = settings.dsn.replace(f":{settings.pg_port}/", f":{closed_port()}/")
    assert dead != settings.dsn
    base = await serve([KafkaCheck(settings.kafka_bootstrap), PostgresCheck(dsn=dead)])
    status, body = await get(f"{base}/readyz")
    assert status == 503
    checks = {c["name"]: c for c in body["checks"]}
    assert body["ready"] is False
    assert checks["kafka"]["ok"] is True  # the other dependency is still reported truly
    assert checks["postgres"]["ok"] is False
    assert (
        "connect" in checks["postgres"]["detail"].lower()
        or "refused" in checks["postgres"]["detail"].lower()
    )


@pytest.mark.integration
async def test_503_naming_kafka_when_the_broker_is_a_closed_port(
    settings: Settings, serve: Any
) -> None:
    base = await serve([KafkaCheck(f"127.0.0.1:{closed_port()}"), PostgresCheck(dsn=settings.dsn)])
    status, body = await get(f"{base}/readyz")
    assert status == 503
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["kafka"]["ok"] is False and checks["kafka"]["detail"]
    assert checks["postgres"]["ok"] is True


@pytest.mark.integration
async def test_a_missing_topic_is_not_ready(settings: Settings, serve: Any) -> None:
    base = await serve([KafkaCheck(settings.kafka_bootstrap, ["no-such-topic.job-events"])])
    status, body = await get(f"{base}/readyz")
    assert status == 503
    assert "no-such-topic.job-events" in body["checks"][0]["detail"]


def test_json_log_lines_carry_job_attempt_and_event() -> None:
    record = logging.LogRecord(
        "gridledger.test", logging.INFO, __file__, 1, "hello %s", ("x",), None
    )
    with log_context(job_id="job-1", attempt=2):
        line = json.loads(JsonFormatter("sink").format(record))
    assert line["message"] == "hello x"
    assert line["service"] == "sink"
    assert (line["job_id"], line["attempt"]) == ("job-1", 2)
    record.event_id = "ev-9"
    line = json.loads(JsonFormatter("sink").format(record))
    assert line["event_id"] == "ev-9" and "job_id" not in line  # the block ended


@pytest.mark.integration
async def test_an_optional_dependency_away_degrades_but_stays_ready(
    settings: Settings, serve: Any
) -> None:
    """The API's case: Postgres away, the broker there: still ready (submissions work)."""
    dead = settings.dsn.replace(f":{settings.pg_port}/", f":{closed_port()}/")
    base = await serve([KafkaCheck(settings.kafka_bootstrap), Optional(PostgresCheck(dsn=dead))])
    status, body = await get(f"{base}/readyz")
    assert status == 200
    assert body["degraded"] == ["postgres"]
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["postgres"]["ok"] is False and checks["postgres"]["critical"] is False


@pytest.mark.integration
async def test_docker_check_fails_for_a_daemon_that_is_not_there(serve: Any) -> None:
    import docker

    # An explicit API version: the client then asks the daemon nothing until ping().
    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    base = await serve([DockerCheck(client.ping)])
    status, body = await get(f"{base}/readyz")
    assert status == 503
    assert body["checks"][0]["name"] == "docker" and body["checks"][0]["ok"] is False


@pytest.mark.integration
async def test_lag_above_the_threshold_is_not_ready(topics: Settings, serve: Any) -> None:
    """A real consumer that read 1 of 6 records: 5 behind, the threshold 2 -> 503."""
    topic = topics.topic("job-events")
    async with Ledger(topics, "test") as ledger:
        job = "job-lagging"
        await ledger.append_many(run_facts(job, exit_code=0).all()[:6])
        consumer = ledger.consumer()
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition_for(job, await ledger.partitions(topic)))
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Any] = []
            while not got:
                got = (await consumer.getmany(tp, timeout_ms=1000, max_records=1)).get(tp, [])
            lag = LagCheck(lambda: consumer_lag(consumer), max_lag=2)
            base = await serve([lag])
            status, body = await get(f"{base}/readyz")
            assert status == 503, body
            check = body["checks"][0]
            assert check["lag"] == 5 and "5 records behind" in check["detail"]
            metrics_text = await (await _session_get(f"{base}/metrics")).text()
            assert f'gridledger_consumer_lag{{partition="{tp.partition}",topic="{topic}"}} 5.0' in (
                metrics_text
            )
        finally:
            await consumer.stop()


async def _session_get(url: str) -> Any:
    session = aiohttp.ClientSession()
    try:
        response = await session.get(url)
        await response.read()
        return response
    finally:
        await session.close()
