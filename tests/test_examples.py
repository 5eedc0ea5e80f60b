"""The README's example specs stay valid, and docker-compose names every service it documents."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schemas.spec import JobSpec
from services.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_specs_validate(path: Path) -> None:
    JobSpec.model_validate(yaml.safe_load(path.read_text()))


def test_compose_file_has_every_service_with_the_commands_the_cli_knows() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("kafka", "postgres", "api", "scheduler", "processors", "sink", "agent", "topics"):
        assert name in services, f"docker-compose.yml lacks {name}"
    commands = COMMANDS
    for name, service in services.items():
        # Only the project's own image runs the gridledger CLI (the object store's image
        # is named gridledger/seaweedfs but runs weed).
        if "command" in service and service.get("image", "").startswith("gridledger/services"):
            assert service["command"][0] in commands, f"{name}: unknown command"
    agent = services["agent"]
    devices = agent["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    for name in ("kafka", "postgres", "api"):
        assert "healthcheck" in services[name]
