"""The agent survives its own death and the broker's absence without losing a fact."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from infra import kafka
from schemas.events import AttemptHeartbeat, ComputeHeld, ComputeReleased, LogChunk, MeterTick
from services.agent.errors import ImageUnavailableError
from services.agent.publisher import LedgerPublisher
from services.agent.runtime import DockerRuntime
from services.agent.spool import SpoolEntry
from services.ledger import Ledger
from services.ledger.topics import ensure_topics
from services.ops.specs import free_port
from services.settings import Settings, load_settings
from tests.agent.conftest import (
    Harness,
    make_agent_settings,
    only,
    remove_node_containers,
    sh,
    stream_text,
    types,
)
from tests.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TICKING = 'for i in $(seq 1 {n}); do echo "line $i"; sleep {pause}; done'


def _agent_process(node: Harness) -> subprocess.Popen[bytes]:
    s, a = node.settings, node.agent_settings
    env = {
        **os.environ,
        "GRIDLEDGER_HOME": str(s.home),
        "GRIDLEDGER_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
        "GRIDLEDGER_TOPIC_PREFIX": s.topic_prefix,
        "GRIDLEDGER_AGENT_CHECKPOINT_POLL_S": "0.3",
        "GRIDLEDGER_AGENT_STOP_GRACE_S": "2",
        "GRIDLEDGER_S3_PORT": str(s.s3_port),
        "GRIDLEDGER_S3_CREDENTIALS_FILE": str(s.s3_credentials_path),
    }
    command = [
        sys.executable, "-m", "services.cli.main", "agent",
        "--node-id", a.node_id,
        "--inventory", str(a.inventory_file),
        "--heartbeat-interval", "1",
        "--meter-interval", "1",
    ]  # fmt: skip
    log = (s.home / "agent.log").open("ab")
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_a_killed_agent_restarted_reattaches_and_the_job_completes_with_its_logs(
    idle_node: Harness,
):
    node = idle_node
    first = _agent_process(node)
    second = None
    try:
        scheduled = await node.schedule(sh(TICKING.format(n=60, pause=0.1)))
        await node.wait_for(scheduled.job_id, "LogChunk", 30, topic="log-chunks")

        async def part_way() -> bool:
            chunks = only(await node.facts(scheduled.job_id, "log-chunks"), LogChunk)
            return "line 10\n" in "".join(c.data for c in chunks)

        # Killed part-way: some lines are on the ledger, most are still to come.
        await eventually(part_way, "the job to log its 10th line", timeout=60, interval=0.2)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = _agent_process(node)
        events = await node.wait_for(scheduled.job_id, "ComputeReleased", 60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
    assert types(events) == [
        "AttemptAccepted",
        "ComputeHeld",
        "ImageResolved",
        "ContainerStarted",
        "ProcessExited",
        "ComputeReleased",
    ]
    assert only(events, ComputeReleased)[0].reason == "exited"
    expected = "".join(f"line {i}\n" for i in range(1, 61))

    async def all_logged() -> list[LogChunk] | None:
        # The agent's log lane is independent of job-events: let it land.
        chunks = only(await node.facts(scheduled.job_id, "log-chunks"), LogChunk)
        return chunks if sum(len(c.data) for c in chunks) >= len(expected) else None

    chunks = await eventually(all_logged, "every log line to land", timeout=30, interval=0.2)
    assert stream_text(chunks, "stdout") == expected
    beats = only(await node.facts(scheduled.job_id, "heartbeats"), AttemptHeartbeat)
    assert sorted({b.seq for b in beats}) == list(range(max(b.seq for b in beats) + 1))
    ticks = only(await node.facts(scheduled.job_id, "meter-ticks"), MeterTick)
    by_index = {t.tick_index: t for t in ticks}
    assert sorted(by_index) == list(range(len(by_index))) and by_index[len(by_index) - 1].final
    held = only(events, ComputeHeld)[0].occurred_at
    released = only(events, ComputeReleased)[0].occurred_at
    total = sum(t.gpu_seconds for t in by_index.values())
    assert total == pytest.approx((released - held).total_seconds(), abs=1e-5)


class SwitchablePublisher:
    """A real ledger publisher that the test can cut off from the broker."""

    def __init__(self, inner: LedgerPublisher) -> None:
        self.inner = inner
        self.offline = False
        self.refused = 0

    async def publish(self, records: list[SpoolEntry]) -> None:
        if self.offline:
            self.refused += 1
            raise ConnectionError("broker unreachable (test outage)")
        await self.inner.publish(records)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_10s_broker_outage_mid_run_loses_no_event(idle_node: Harness):
    node = idle_node
    publishers: list[SwitchablePublisher] = []

    def factory(lane: str) -> SwitchablePublisher:
        publishers.append(SwitchablePublisher(LedgerPublisher(node.settings, f"outage-{lane}")))
        return publishers[-1]

    agent = await node.start(publisher_factory=factory)
    scheduled = await node.schedule(sh(TICKING.format(n=40, pause=0.1)))
    await node.wait_for(scheduled.job_id, "ContainerStarted", 30)
    for p in publishers:
        p.offline = True
    await asyncio.sleep(10)
    assert all(p.refused for p in publishers)
    assert await agent.wait_idle(1), "the job ran to its end while the broker was away"
    before = await node.facts(scheduled.job_id)
    assert "ProcessExited" not in types(before)
    for p in publishers:
        p.offline = False
    events = await node.wait_for(scheduled.job_id, "ComputeReleased", 30)
    assert types(events) == [
        "AttemptAccepted",
        "ComputeHeld",
        "ImageResolved",
        "ContainerStarted",
        "ProcessExited",
        "ComputeReleased",
    ]
    chunks = only(await node.facts(scheduled.job_id, "log-chunks"), LogChunk)
    assert stream_text(chunks, "stdout") == "".join(f"line {i}\n" for i in range(1, 41))
    beats = only(await node.facts(scheduled.job_id, "heartbeats"), AttemptHeartbeat)
    assert [b.seq for b in beats] == list(range(len(beats)))
    assert [b.occurred_at for b in beats] == sorted(b.occurred_at for b in beats)
    ticks = only(await node.facts(scheduled.job_id, "meter-ticks"), MeterTick)
    assert [t.tick_index for t in ticks] == list(range(len(ticks))) and ticks[-1].final


def test_an_unreachable_registry_is_told_apart_from_a_missing_image():
    runtime = DockerRuntime()
    try:
        with pytest.raises(ImageUnavailableError) as missing:
            runtime.resolve_image("gridledger/not-here:latest", "never")
        assert missing.value.reason == "not_found"
        # 127.0.0.1:9 refuses connections: nothing leaves the machine.
        with pytest.raises(ImageUnavailableError) as unreachable:
            runtime.resolve_image("127.0.0.1:9/gridledger/nope:latest", "if_not_present")
        assert unreachable.value.reason == "registry_unreachable"
        assert "connection refused" in unreachable.value.message
    finally:
        runtime.close()


@pytest_asyncio.fixture
async def own_broker(tmp_path: Path) -> AsyncIterator[Settings]:
    """A throwaway single-node broker on free ports (the shared one is never stopped)."""
    shared = load_settings()
    lib = shared.home / "kafka" / "lib"
    if not (lib / kafka.KAFKA_JAR).is_file() or shutil.which("java") is None:
        pytest.skip(f"no Kafka jars in {lib} or no java: run `gridledger dev up` first")
    settings = shared.model_copy(
        update={
            "home": tmp_path / "broker",
            "kafka_bootstrap": f"127.0.0.1:{free_port()}",
            "kafka_controller_port": free_port(),
            "topic_prefix": "outage.",
        }
    )
    (settings.home / "kafka").mkdir(parents=True)
    (settings.home / "kafka" / "lib").symlink_to(lib)
    try:
        await kafka.up(settings, timeout=120)
        await ensure_topics(settings)
        yield settings
    finally:
        await asyncio.to_thread(kafka.down, settings)


async def test_a_real_broker_stopped_for_10s_mid_run_loses_no_event(
    own_broker: Settings, tmp_path: Path
):
    settings = own_broker.model_copy(update={"home": tmp_path / "agent"})
    settings.home.mkdir()
    node = Harness(settings, make_agent_settings(settings.home), Ledger(settings, "outage-test"))
    await node.ledger.start()
    try:
        agent = await node.start()
        scheduled = await node.schedule(sh(TICKING.format(n=60, pause=0.1)))
        await node.wait_for(scheduled.job_id, "ContainerStarted", 30)
        down_at = time.monotonic()
        await asyncio.to_thread(kafka.down, own_broker)
        await asyncio.sleep(max(0.0, 10 - (time.monotonic() - down_at)))
        assert await agent.wait_idle(1), "the job ran to its end while the broker was away"
        pid = await asyncio.to_thread(kafka.start, own_broker)
        await kafka.wait_ready(own_broker, 120, pid)
        events = await node.wait_for(scheduled.job_id, "ComputeReleased", 60)
        assert types(events) == [
            "AttemptAccepted",
            "ComputeHeld",
            "ImageResolved",
            "ContainerStarted",
            "ProcessExited",
            "ComputeReleased",
        ]
        chunks = only(await node.facts(scheduled.job_id, "log-chunks"), LogChunk)
        assert stream_text(chunks, "stdout") == "".join(f"line {i}\n" for i in range(1, 61))
        beats = only(await node.facts(scheduled.job_id, "heartbeats"), AttemptHeartbeat)
        assert [b.seq for b in beats] == list(range(len(beats)))
        ticks = only(await node.facts(scheduled.job_id, "meter-ticks"), MeterTick)
        assert [t.tick_index for t in ticks] == list(range(len(ticks))) and ticks[-1].final
        held = only(events, ComputeHeld)[0].occurred_at
        released = only(events, ComputeReleased)[0].occurred_at
        assert sum(t.gpu_seconds for t in ticks) == pytest.approx(
            (released - held).total_seconds(), abs=1e-5
        )
        print(f"outage: {len(beats)} heartbeats, {len(ticks)} ticks, {len(chunks)} chunks kept")
    finally:
        try:
            await node.stop()
        finally:
            await node.ledger.stop()
            remove_node_containers(node.node_id)
