"""docker-compose.yml, as ``docker-compose config`` resolves it: what a deployment keeps and runs.

Needs Debian's ``docker-compose`` (infra/setup.sh installs it); it does not
start anything, so it runs on any machine that has the command.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import in_ci

REPO = Path(__file__).resolve().parents[2]
ONE_SHOT = {"config", "bucket", "topics", "job-busybox", "job-python"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    if shutil.which("docker-compose") is None:
        message = "docker-compose is not installed (`apt-get install docker-compose`)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    result = subprocess.run(
        ["docker-compose", "config"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return dict(yaml.safe_load(result.stdout))


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return dict(env) if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            out.append((str(v.get("source", "")), str(v["target"])))
        else:
            source, _, rest = str(v).partition(":")
            out.append((source, rest.split(":")[0]))
    return out


def test_every_service_restarts_and_every_long_running_one_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        assert service.get("restart") in {"unless-stopped", "on-failure", "always"}, name
        if name not in ONE_SHOT:
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_state_lives_on_volumes(compose):
    services, volumes = compose["services"], set(compose["volumes"])
    kafka = services["kafka"]
    log_dirs = _env(kafka)["KAFKA_LOG_DIRS"]
    assert (("kafka-data", log_dirs)) in _mounts(kafka), "the ledger is not on the volume"
    assert ("postgres-data", "/var/lib/postgresql/data") in _mounts(services["postgres"])
    store = services["objectstore"]
    assert ("objectstore-data", "/data") in _mounts(store) and "-dir=/data" in store["command"]
    assert {"kafka-data", "postgres-data", "objectstore-data", "gridledger-config"} <= volumes


def test_the_agent_shares_its_home_with_the_host_daemon_at_the_same_path(compose):
    agent = compose["services"]["agent"]
    home = _env(agent)["GRIDLEDGER_HOME"]
    assert (home, home) in _mounts(agent), "job output folders would be invisible to the agent"
    assert ("/var/run/docker.sock", "/var/run/docker.sock") in _mounts(agent)
    assert _env(agent)["GRIDLEDGER_AGENT_PULL_POLICY"] == "if_not_present"
    needs = agent["depends_on"]
    assert needs["job-python"]["condition"] == "service_completed_successfully"
    assert needs["bucket"]["condition"] == "service_completed_successfully"


def test_job_images_are_built_and_secrets_made_at_first_start(compose):
    services = compose["services"]
    for name, image in (("job-busybox", "gridledger/busybox"), ("job-python", "gridledger/python")):
        assert services[name]["image"].startswith(image) and services[name]["build"]
    assert services["config"]["command"][:2] == ["dev", "init"]
    assert not (REPO / "deploy" / "tokens.json").exists(), "no token ships with the repository"
    for name, service in services.items():
        if name in {"kafka", "postgres", "topics", "job-busybox", "job-python"}:
            continue
        mounted = dict((t, s) for s, t in _mounts(service))
        assert mounted.get("/etc/gridledger") == "gridledger-config", name
    api = _env(services["api"])
    assert api["GRIDLEDGER_S3_ENDPOINT"] == "http://objectstore:8333"
    assert api["GRIDLEDGER_S3_CREDENTIALS_FILE"].startswith("/etc/gridledger/")
