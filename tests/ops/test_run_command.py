"""``gridledger run`` as a process: health at a glance, SIGTERM stops all, orphans reaped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.ops.specs import free_port
from services.ops.supervisor import reap_orphans
from services.settings import Settings
from tests.ops.test_supervisor import REPO, gone, wait_until
from tests.sink.pg import private_schema

pytestmark = pytest.mark.integration


def private_home(settings: Settings, tmp_path: Path) -> Path:
    """A home of its own (its own run/fleet.json), on the shared stack's addresses."""
    home = tmp_path / "home"
    home.mkdir()
    for name in ("stack.env", "tokens.json", "dev-tokens.json"):
        if (settings.home / name).exists():
            shutil.copy(settings.home / name, home / name)
    return home


def env_for(settings: Settings, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GRIDLEDGER_HOME": str(home),
        "GRIDLEDGER_TOPIC_PREFIX": settings.topic_prefix,
        "GRIDLEDGER_PG_SCHEMA": settings.pg_schema,
        "PYTHONUNBUFFERED": "1",
    }


def health(env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "health", "-o", "json"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


def service_pids(home: Path) -> list[int]:
    data = json.loads((home / "run" / "fleet.json").read_text())
    return [pid for s in data["services"] for pid in s["pids"]]


async def test_run_health_sigterm(topics: Settings, tmp_path: Path) -> None:
    async with private_schema(topics) as (settings, _pool):
        home = private_home(settings, tmp_path)
        env = env_for(settings, home)
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(
            "services:\n  - {name: sink, command: [sink]}\n"
            "  - {name: scheduler, command: [scheduler]}\n"
            f"  - {{name: api, command: [api, --port, '{free_port()}']}}\n"
        )
        run = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "run", "--fleet", str(fleet)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(lambda: health(env)[0] == 0, 120, "gridledger health to say ready")
            code, report = health(env)
            assert report["supervisor"] is True
            assert {r["name"] for r in report["services"]} == {"sink", "scheduler", "api"}
            assert all(r["up"] and r["ready"] for r in report["services"])
            table = subprocess.run(
                [sys.executable, "-m", "services.cli.main", "health"],
                capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
            ).stdout  # fmt: skip
            print(table)
            assert "3 service(s), all ready" in table
            assert all(name in table for name in ("sink", "scheduler", "api"))

            # The supervisor itself dies: its children outlive it, and are reaped by pid.
            pids = service_pids(home)
            run.send_signal(signal.SIGKILL)
            run.wait(timeout=30)
            assert not any(gone(pid) for pid in pids)
            code, report = health(env)
            assert report["supervisor"] is False
            assert sorted(reap_orphans(home / "run" / "fleet.json")) == sorted(pids)
            assert all(gone(pid) for pid in pids)

            # A new run starts cleanly; SIGTERM stops everything it started.
            run = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "run", "--fleet", str(fleet)],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            wait_until(lambda: health(env)[0] == 0, 120, "the second run to be ready")
            pids = service_pids(home)
            run.send_signal(signal.SIGTERM)
            output = run.communicate(timeout=60)[0].decode()
            assert run.returncode == 0, output
            assert "stopping every service" in output
            assert pids and all(gone(pid) for pid in pids)
            code, report = health(env)
            assert code == 1 and not any(r["up"] for r in report["services"])
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
            reap_orphans(home / "run" / "fleet.json")
