"""Run gridledger's own services (api, scheduler, processors, sink, agents) as processes.

The demo and the end-to-end tests use this to bring up a whole local
installation on top of the stack that ``gridledger dev up`` started. Every
service gets the same settings through ``GRIDLEDGER_*`` environment variables,
so a test can run a complete, isolated installation with its own topic prefix,
Postgres schema and API port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from schemas.errors import StackError
from services.settings import Settings

LOCAL_AGENT_ENV = {
    # Quick heartbeats and ticks so a short local run shows them; images are built locally,
    # never pulled; job containers stop with the agent instead of waiting for a re-attach.
    "GRIDLEDGER_AGENT_HEARTBEAT_INTERVAL_S": "1",
    "GRIDLEDGER_AGENT_NODE_HEARTBEAT_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_METER_INTERVAL_S": "2",
    "GRIDLEDGER_AGENT_PULL_POLICY": "never",
    "GRIDLEDGER_AGENT_SHUTDOWN_POLICY": "stop",
}
"""Agent settings of the local installations the demo and the benchmarks start."""


def settings_env(settings: Settings) -> dict[str, str]:
    """Every setting as the ``GRIDLEDGER_*`` variable a child process reads."""
    env = {}
    for name, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"GRIDLEDGER_{name.upper()}"] = (
            json.dumps(value) if isinstance(value, list | dict) else str(value)
        )
    return env


@dataclass
class ServiceSpec:
    """One service to run: a name (also its log file) and the ``gridledger`` arguments."""

    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class RunningService:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    log_path: Path


class LocalServices:
    """Start, watch and stop a set of gridledger services as child processes."""

    def __init__(self, settings: Settings, log_dir: Path | None = None) -> None:
        self.settings = settings
        self.log_dir = log_dir or settings.logs_dir
        self.running: dict[str, RunningService] = {}
        self.killed: set[str] = set()
        """Services stopped on purpose with :meth:`kill`; :meth:`check_alive` skips them."""

    def start(self, spec: ServiceSpec) -> RunningService:
        """Start one service; its stdout and stderr go to ``<log_dir>/<name>.log``."""
        if spec.name in self.running and self.running[spec.name].process.poll() is None:
            raise StackError(f"service {spec.name} is already running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.name}.log"
        env = {**os.environ, **settings_env(self.settings), **spec.env, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", *spec.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        service = RunningService(spec, process, log_path)
        self.running[spec.name] = service
        self.killed.discard(spec.name)
        return service

    def start_all(self, specs: Iterable[ServiceSpec]) -> None:
        for spec in specs:
            self.start(spec)

    def check_alive(self) -> None:
        """Raise with the tail of its log if any service has died."""
        for name, service in self.running.items():
            code = service.process.poll()
            if code is not None and name not in self.killed:
                raise StackError(
                    f"service {name} exited with code {code}; last lines of {service.log_path}:\n"
                    + tail(service.log_path)
                )

    def wait_for_api(self, timeout_s: float = 60.0) -> None:
        """Wait until ``GET /healthz`` answers 200, failing early if a service dies."""
        url = f"http://{self.settings.api_host}:{self.settings.api_port}/healthz"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise StackError(f"the API did not answer {url} within {timeout_s:.0f} s")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one service (SIGKILL simulates a crash) and wait for it to end."""
        service = self.running[name]
        self.killed.add(name)
        if service.process.poll() is None:
            os.killpg(service.process.pid, sig)
            service.process.wait(timeout=30)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every service, then SIGKILL what is still running after ``grace_s``."""
        for service in self.running.values():
            if service.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for service in self.running.values():
            remaining = max(0.1, deadline - time.monotonic())
            try:
                service.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                os.killpg(service.process.pid, signal.SIGKILL)
                service.process.wait(timeout=10)

    def __enter__(self) -> LocalServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
