"""A private stack (own home, free ports) whose broker and Postgres a test may kill.

The shared stack is never touched: ``gridledger dev up`` runs against a fresh
home with its own Kafka and Postgres ports (the Kafka jars are the shared
home's, linked), and the services run as real ``gridledger`` processes on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from infra import kafka, postgres, processes, tokens
from infra.private import link_jars, new_home, private_settings
from services.ops.supervisor import Supervisor
from services.settings import load_settings
from tests.waiting import wait_until

_T = TypeVar("_T")

SPEC_OK = {
    "name": "outage-ok",
    "image": "gridledger/busybox:latest",
    "command": ["sh", "-c", "echo started; sleep 1; echo done"],
    "resources": {"gpus": 1, "memory_gb": 1},
}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


class PrivateStack:
    """``dev up`` on a temporary home; the broker and Postgres can be killed and restarted."""

    def __init__(self) -> None:
        shared = load_settings()
        if shutil.which("java") is None:
            pytest.skip("no java: the private broker cannot run")
        self.home = new_home("gl-outage-")
        if not link_jars(shared, self.home):
            shutil.rmtree(self.home, ignore_errors=True)
            pytest.skip("no Kafka jars in the shared home: run `gridledger dev up` first")
        self.settings = private_settings(shared, self.home)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GRIDLEDGER_")},
            "GRIDLEDGER_HOME": str(self.home),
            "GRIDLEDGER_KAFKA_BOOTSTRAP": self.settings.kafka_bootstrap,
            "GRIDLEDGER_KAFKA_CONTROLLER_PORT": str(self.settings.kafka_controller_port),
            "GRIDLEDGER_PG_PORT": str(self.settings.pg_port),
            "GRIDLEDGER_API_PORT": str(self.settings.api_port),
            # Its own object store ports, and the shared home's SeaweedFS binary.
            "GRIDLEDGER_S3_PORT": str(self.settings.s3_port),
            **(
                {"GRIDLEDGER_WEED_BINARY": str(self.settings.weed_binary)}
                if self.settings.weed_binary
                else {}
            ),
        }
        # No restart policy: a service that exits fails the test instead of coming back.
        self.services = Supervisor(self.settings, self.home / "service-logs")

    # ------------------------------------------------------------------ stack

    def dev(self, command: str) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "dev", command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            pytest.fail(
                f"dev {command} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )

    def up(self) -> PrivateStack:
        self.dev("up")
        return self

    def down(self) -> None:
        try:
            self.services.stop()
        finally:
            self.dev("down")
            shutil.rmtree(self.home, ignore_errors=True)

    def kill_postgres(self) -> None:
        """SIGKILL the postmaster (its backends die with it) and wait until it is gone."""
        pid = postgres.running_pid(self.settings)
        assert pid is not None, "the private Postgres does not run"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not processes.is_alive(pid), "the killed postmaster to be gone", 30)

    def start_postgres(self) -> None:
        """Start it again: crash recovery, then ready. Retries while the killed server's
        backends still hold its shared memory."""

        def started() -> bool:
            try:
                postgres.start(self.settings)
            except Exception:  # noqa: BLE001 - retried until the bound, then the test fails
                return False
            return True

        wait_until(started, "Postgres to start again after the kill", 60)
        asyncio.run(postgres.wait_ready(self.settings, 60))

    def kill_kafka(self) -> None:
        pid = kafka.running_pid(self.settings)
        assert pid is not None, "the private broker does not run"
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not processes.is_alive(pid), "the killed broker to be gone", 30)

    def start_kafka(self) -> None:
        pid = kafka.start(self.settings)
        asyncio.run(kafka.wait_ready(self.settings, 120, pid))

    # ------------------------------------------------------------------ API

    @property
    def token(self) -> str:
        return tokens.token_for(self.settings, "dev")

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Reply:
        """One API request; the status, headers and JSON body whatever the status."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.settings.api_port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                **(headers or {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return Reply(response.status, dict(response.headers), json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            return Reply(exc.code, dict(exc.headers), parsed)

    def status_of(self, job_id: str) -> str | None:
        """The job's status as the API shows it; None while it cannot say."""
        try:
            reply = self.call("GET", f"/v1/jobs/{job_id}")
        except OSError:
            return None
        return reply.body.get("status") if reply.status == 200 else None

    def wait(self, check: Callable[[], _T | None], timeout_s: float, what: str) -> _T:
        """:func:`wait_until`, failing at once (with its log) if a service died meanwhile."""

        def alive_and(check_: Callable[[], _T | None] = check) -> _T | None:
            self.services.check_alive()
            return check_()

        return wait_until(alive_and, what, timeout_s)

    def log_of(self, service: str) -> str:
        return (self.services.log_dir / f"{service}.log").read_text(errors="replace")


def write_inventory(stack: PrivateStack, node_id: str) -> Path:
    path = stack.home / f"{node_id}.inventory.json"
    path.write_text(
        json.dumps(
            {
                "provider": "onprem",
                "region": "local",
                "gpus": [
                    {"index": i, "model": "NVIDIA A100-SXM4-80GB", "memory_total_mb": 81920}
                    for i in range(8)
                ],
            }
        )
    )
    return path
