"""The fleet `gridledger run` supervises without --fleet ships in the package, with every file it
names, so `gridledger run` works from any folder (no repository checkout needed)."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from services.ops.fleet import DEFAULT_FLEET, load_fleet

REPO = Path(__file__).resolve().parents[2]


def package_data(package: str) -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["setuptools"]["package-data"][package])


def test_the_default_fleet_and_its_inventory_are_package_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository: nothing may resolve against the cwd
    services = REPO / "services"
    specs = load_fleet(DEFAULT_FLEET).specs(DEFAULT_FLEET.parent)
    assert {s.name for s in specs} >= {"sink", "api", "scheduler", "processors", "agent-gpu-1"}
    named = [DEFAULT_FLEET]
    for spec in specs:
        if "--inventory" in spec.args:
            named.append(Path(spec.args[spec.args.index("--inventory") + 1]))
    assert len(named) == 2, "the agent's declared inventory is named"
    globs = package_data("services")
    for path in named:
        assert path.is_file() and path.is_relative_to(services), path
        relative = path.relative_to(services).as_posix()
        assert any(fnmatch.fnmatch(relative, g) for g in globs), f"{relative} is not package data"


def test_run_without_fleet_uses_the_packaged_one_from_any_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "run", "-h"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert "[default: (the package's services/ops/fleet.yaml)]" in " ".join(done.stdout.split())
