"""What ships in deploy/ matches the code: units run real commands, the dashboard real metrics."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from services.cli.main import COMMANDS
from services.ops import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICES = ("sink", "api", "scheduler", "processors", "notary", "webhooks")


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "systemd" / name).read_text())
    return parser


def test_one_unit_per_service_each_restarted_on_failure_running_a_real_command() -> None:
    names = [f"gridledger-{s}.service" for s in SERVICES] + ["gridledger-agent@.service"]
    ports = set()
    for name in names:
        service = unit(name)["Service"]
        assert service["Restart"] == "on-failure", name
        argv = shlex.split(service["ExecStart"])
        assert argv[0].endswith("/gridledger"), name
        assert argv[1] in COMMANDS, f"{name} runs `gridledger {argv[1]}`, which does not exist"
        if "GRIDLEDGER_OPS_PORT" in service.get("Environment", ""):
            ports.add(service["Environment"].split("=", 1)[1])
    assert len(ports) == len(SERVICES), "every service unit has an ops port of its own"
    agent = unit("gridledger-agent@.service")["Service"]
    assert "--node-id %i" in agent["ExecStart"]
    wants = unit("gridledger.target")["Unit"]["Wants"].split()
    assert sorted(wants) == sorted(f"gridledger-{s}.service" for s in SERVICES)


def exported_names() -> set[str]:
    """Sample names (``_total``, ``_bucket`` ... included) of gridledger's metrics and of
    faust's sensor, as their registries know them."""
    from faust.sensors.prometheus import FaustMetrics

    faust = CollectorRegistry()
    FaustMetrics.create(faust, "faust")
    return set(metrics.REGISTRY._names_to_collectors) | set(faust._names_to_collectors)


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gridledger.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for e in exprs for m in re.findall(r"\b((?:gridledger|faust)_[a-z_]+)", e)}
    missing = sorted(queried - exported_names())
    assert queried and not missing, f"the dashboard queries metrics nobody exports: {missing}"


def test_every_compose_service_is_healthy_only_when_its_readyz_says_so() -> None:
    compose = yaml.safe_load((DEPLOY.parent / "docker-compose.yml").read_text())["services"]
    long_running = {"api", "scheduler", "processors", "sink", "agent", "notary", "webhooks"}
    for name in long_running:
        service = compose[name]
        probe = " ".join(service["healthcheck"]["test"])
        port = service["environment"]["GRIDLEDGER_OPS_PORT"]
        assert service["command"][0] in COMMANDS, name
        assert f"127.0.0.1:{port}/readyz" in probe or (
            name == "api" and "127.0.0.1:8600/readyz" in probe
        ), f"{name}: {probe}"
