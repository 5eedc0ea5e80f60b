"""The 3-broker KRaft option: its configuration, and a partition leader SIGKILLed under load.

The integration test runs its own cluster (own home, free ports); the shared
single broker is never touched.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import pytest_asyncio

from infra import kafka, stack
from infra.private import link_jars, new_home, private_settings
from schemas.errors import LedgerError, StackError
from schemas.events import JobSubmitted
from services.ledger import Ledger, compose
from services.ledger.client import partition_for
from services.ledger.topics import ensure_topics, topic_configs, topic_specs
from services.settings import Settings, load_settings
from tests.schemas.samples import SPEC


def _props(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


def test_three_nodes_are_each_broker_and_voter_with_replication_3_and_min_isr_2(tmp_path):
    settings = Settings(home=tmp_path, kafka_brokers=3)
    nodes = kafka.cluster_nodes(settings)
    assert [n.address for n in nodes] == ["127.0.0.1:9092", "127.0.0.1:9094", "127.0.0.1:9096"]
    assert [n.controller_port for n in nodes] == [9093, 9095, 9097]
    assert [n.name for n in nodes] == ["kafka-1", "kafka-2", "kafka-3"]
    voters = "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    for n in nodes:
        props = _props(kafka.render_server_properties(settings, n.node_id))
        assert props["node.id"] == str(n.node_id)
        assert props["process.roles"] == "broker,controller"
        assert props["controller.quorum.voters"] == voters
        assert props["advertised.listeners"] == f"PLAINTEXT://{n.address}"
        assert props["log.dirs"] == str(
            tmp_path / "kafka" / "cluster-3" / f"node-{n.node_id}" / "data"
        )
        assert props["default.replication.factor"] == "3"
        assert props["min.insync.replicas"] == "2"
        assert props["offsets.topic.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        assert props["unclean.leader.election.enable"] == "false"
    assert len({n.paths.pid_file for n in nodes}) == 3
    assert len({n.paths.cluster_id for n in nodes}) == 1
    assert {spec.configs["min.insync.replicas"] for spec in topic_specs(settings)} == {"2"}
    env = stack.render_stack_env(settings)
    assert "GRIDLEDGER_KAFKA_BROKERS=3" in env
    assert "GRIDLEDGER_KAFKA_BOOTSTRAP=127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096" in env
    assert "GRIDLEDGER_KAFKA_CONTROLLER_PORTS=9093,9095,9097" in env


def test_the_single_broker_stays_the_default_with_replication_1(tmp_path):
    settings = Settings(home=tmp_path)
    assert settings.kafka_brokers == 1 and settings.replication_factor == 1
    assert [n.name for n in kafka.cluster_nodes(settings)] == ["kafka"]
    props = _props(kafka.render_server_properties(settings))
    assert props["min.insync.replicas"] == "1"
    assert "min.insync.replicas" not in topic_specs(settings)[0].configs


def test_mismatched_broker_lists_name_the_variable_to_fix(tmp_path):
    two = Settings(home=tmp_path, kafka_brokers=3, kafka_bootstrap="127.0.0.1:1,127.0.0.1:2")
    with pytest.raises(StackError, match="GRIDLEDGER_KAFKA_BOOTSTRAP lists 2 addresses"):
        kafka.cluster_nodes(two)
    ports = Settings(home=tmp_path, kafka_brokers=3, kafka_controller_ports="1,2")
    with pytest.raises(StackError, match="GRIDLEDGER_KAFKA_CONTROLLER_PORTS"):
        kafka.cluster_nodes(ports)


@pytest.mark.integration
async def test_the_ledgers_producer_waits_for_all_in_sync_replicas_idempotently(settings):
    # The producer settings the durability story rests on; start() needs no topic.
    async with Ledger(settings, "config-check") as ledger:
        producer = ledger.producer
        assert producer._txn_manager is not None  # enable_idempotence=True
        assert producer._sender._acks == -1  # acks=all


# --------------------------------------------------------------------------- the cluster


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Settings]:
    shared = load_settings()
    home = new_home("gl-3brokers-")
    if not link_jars(shared, home) or shutil.which("java") is None:
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip("no Kafka jars in the shared home or no java: run `gridledger dev up` first")
    settings = private_settings(shared, home, brokers=3, topic_prefix=f"b3-{uuid.uuid4().hex[:6]}.")
    try:
        await kafka.up(settings, timeout=240)
        yield settings
    finally:
        await asyncio.to_thread(kafka.down, settings)
        shutil.rmtree(home, ignore_errors=True)


async def _leader_of(settings: Settings, topic: str, partition: int) -> tuple[int, list[int]]:
    from services.ledger.topics import admin_client

    async with admin_client(settings) as admin:
        (described,) = await admin.describe_topics([topic])
    part = next(p for p in described["partitions"] if p["partition"] == partition)
    return part["leader"], sorted(part["isr"])


@pytest.mark.integration
async def test_sigkill_of_the_partition_leader_loses_no_acknowledged_append(cluster):
    settings = cluster
    await ensure_topics(settings, timeout=120)
    topic = settings.topic("job-events")
    configs = await topic_configs(settings, ["min.insync.replicas"])
    assert configs[topic]["min.insync.replicas"] == "2"
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    async with Ledger(settings, "leader-kill") as ledger:
        partition = partition_for(job_id, await ledger.partitions(topic))
        leader, isr = await _leader_of(settings, topic, partition)
        assert isr == [1, 2, 3]

        acked: list[tuple[str, float]] = []
        refused = 0
        stop = asyncio.Event()

        async def appender() -> None:
            nonlocal refused
            while not stop.is_set():
                event = JobSubmitted(
                    job_id=job_id, tenant="t", spec=SPEC, occurred_at=datetime.now(UTC)
                )
                while True:  # the same event again until acknowledged: ids are the proof
                    try:
                        await ledger.append(event)
                        break
                    except LedgerError:
                        refused += 1
                        await asyncio.sleep(0.2)
                acked.append((event.event_id, time.monotonic()))

        task = asyncio.create_task(appender())
        try:
            await _until(lambda: len(acked) >= 50, 60, "50 appends before the kill")
            victim = kafka.node(settings, leader)
            pid = kafka.node_pid(victim)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            before = len(acked)
            await _until(
                lambda: sum(1 for _, t in acked if t > killed_at) >= 100,
                120,
                "100 acknowledged appends after the leader was killed",
            )
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)
        new_leader, new_isr = await _leader_of(settings, topic, partition)
        assert new_leader != leader and new_leader in (1, 2, 3)
        assert leader not in new_isr and len(new_isr) == 2
        read_back = {
            record.event.event_id
            async for record in compose.read_partitions(ledger, topic, [partition])
            if record.key == job_id
        }
    missing = [event_id for event_id, _ in acked if event_id not in read_back]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged appends are not on the log"
    assert len(acked) > before
    print(f"acked {len(acked)} ({before} before the kill), {refused} refused and retried")


async def _until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


@pytest.mark.integration
def test_dev_up_brokers_3_shows_each_broker_and_dev_down_stops_them_all():
    import json
    import subprocess
    import sys

    from infra import processes

    shared = load_settings()
    home = new_home("gl-3brokers-cli-")
    if not link_jars(shared, home):
        pytest.skip("no Kafka jars in the shared home: run `gridledger dev up` first")
    ours = private_settings(shared, home, brokers=3)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GRIDLEDGER_")},
        "GRIDLEDGER_HOME": str(home),
        "GRIDLEDGER_KAFKA_BOOTSTRAP": ours.kafka_bootstrap,
        "GRIDLEDGER_KAFKA_CONTROLLER_PORTS": ours.kafka_controller_ports,
        "GRIDLEDGER_PG_PORT": str(ours.pg_port),
        "GRIDLEDGER_S3_PORT": str(ours.s3_port),
        **({"GRIDLEDGER_WEED_BINARY": str(ours.weed_binary)} if ours.weed_binary else {}),
    }

    def dev(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli.main", "dev", *args],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    try:
        up = dev("up", "--brokers", "3")
        assert up.returncode == 0, up.stdout + up.stderr
        status = dev("status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        components = json.loads(status.stdout)["components"]
        brokers = {name: c for name, c in components.items() if name.startswith("kafka")}
        assert sorted(brokers) == ["kafka-1", "kafka-2", "kafka-3"]
        assert all(c["running"] and c["pid"] for c in brokers.values())
        assert "GRIDLEDGER_KAFKA_BROKERS=3" in (home / "stack.env").read_text()
        # A later `dev up` without the flag keeps the cluster the home runs.
        again = dev("up")
        assert again.returncode == 0 and again.stdout.count("already running") >= 3
        down = dev("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(processes.is_alive(c["pid"]) for c in brokers.values())
        assert dev("status").returncode == 1
    finally:
        dev("down")
        shutil.rmtree(home, ignore_errors=True)
