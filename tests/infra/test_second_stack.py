"""``gridledger dev up|down`` on a second stack (own home and ports) beside the shared one.

The shared stack keeps running for everyone else; the Docker daemon already
runs, so the second stack must reuse it and must not stop it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import docker_daemon, kafka, postgres, processes, seaweedfs
from infra.kafka import KafkaPaths
from infra.private import free_ports, free_s3_base
from services.settings import Settings

pytestmark = pytest.mark.integration


class SecondStack:
    """Runs the real ``gridledger dev ...`` command against a temporary home."""

    def __init__(self, home: Path) -> None:
        kafka_port, controller_port, pg_port = free_ports(3)
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GRIDLEDGER_")},
            "GRIDLEDGER_HOME": str(home),
            "GRIDLEDGER_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
            "GRIDLEDGER_KAFKA_CONTROLLER_PORT": str(controller_port),
            "GRIDLEDGER_PG_PORT": str(pg_port),
            "GRIDLEDGER_S3_PORT": str(free_s3_base()),
        }

    def dev(
        self, command: str, *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "dev", command, *extra],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"dev {command} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result

    def status(self) -> dict[str, Any]:
        result = self.dev("status", "--json", check=False)
        return json.loads(result.stdout)["components"]


@pytest.fixture(scope="module")
def second_stack(settings: Settings) -> Iterator[SecondStack]:
    # Not pytest's tmp_path: that is private to root, and Postgres runs as the postgres user.
    home = Path(tempfile.mkdtemp(prefix="gl-second-stack-"))
    home.chmod(0o755)
    shared_lib = KafkaPaths.of(settings).lib
    if (shared_lib / kafka.KAFKA_JAR).is_file():
        # Reuse the shared stack's jars: the fetch itself is not under test here.
        (home / "kafka").mkdir()
        (home / "kafka" / "lib").symlink_to(shared_lib)
    stack = SecondStack(home)
    if seaweedfs.binary_cached(settings):
        # Reuse the shared stack's SeaweedFS binary: its build is not under test here.
        stack.env["GRIDLEDGER_WEED_BINARY"] = str(seaweedfs.SeaweedPaths.of(settings).binary)
    try:
        yield stack
    finally:
        stack.dev("down", check=False)
        shutil.rmtree(home, ignore_errors=True)


def test_second_up_restarts_nothing(second_stack):
    first = second_stack.dev("up")
    assert "started and ready" in first.stdout
    before = second_stack.status()
    assert before["kafka"]["running"] and before["postgres"]["running"]
    store = before["s3"]
    assert store["running"] and store["pid"] and store["started_by_us"]
    assert store["address"].startswith(f"http://127.0.0.1:{second_stack.env['GRIDLEDGER_S3_PORT']}")
    assert store["log"] == str(second_stack.home / "logs" / "seaweedfs.log")

    again = second_stack.dev("up")
    after = second_stack.status()
    for name in ("kafka", "postgres", "docker", "s3"):
        assert after[name]["pid"] == before[name]["pid"], name
    assert "already running, bucket answered" in again.stdout
    assert "already running, answered a metadata request" in again.stdout
    assert "already running, answered SELECT 1" in again.stdout
    assert "started and ready" not in again.stdout
    env_file = (second_stack.home / "stack.env").read_text()
    assert f"GRIDLEDGER_PG_PORT={second_stack.env['GRIDLEDGER_PG_PORT']}" in env_file


def test_down_stops_only_what_up_started(second_stack, settings):
    second_stack.dev("up")
    ours = second_stack.status()
    shared_kafka, shared_postgres = kafka.running_pid(settings), postgres.running_pid(settings)
    docker_before = docker_daemon.status(settings)
    assert ours["docker"]["started_by_us"] is False
    assert ours["docker"]["pid"] == docker_before.pid

    down = second_stack.dev("down")
    assert "not started by gridledger, left running" in down.stdout
    assert not processes.is_alive(ours["kafka"]["pid"])
    assert not processes.is_alive(ours["postgres"]["pid"])
    assert not processes.is_alive(ours["s3"]["pid"])
    after = second_stack.status()
    assert not after["kafka"]["running"] and not after["postgres"]["running"]
    assert second_stack.dev("status", check=False).returncode == 1

    # Everything else is untouched: the Docker daemon and the shared stack.
    assert docker_daemon.ping(settings)
    assert docker_daemon.status(settings).pid == docker_before.pid
    assert kafka.running_pid(settings) == shared_kafka
    assert postgres.running_pid(settings) == shared_postgres
    assert shared_kafka is None or processes.is_alive(shared_kafka)
