"""The benchmarks' --quick mode keeps working (CI). Figures are checked for shape, never speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.command import BENCHMARKS

pytestmark = pytest.mark.integration

EXPECTED: dict[str, list[tuple[str, ...]]] = {
    "scheduling": [
        ("figures", "pure", "steady_placements_per_s"),
        ("figures", "kafka", "backlog_placements_per_s"),
        ("figures", "kafka", "live_placements_per_s"),
    ],
    "simulation": [
        ("figures", "simulation", "jobs_per_s"),
        ("figures", "simulation", "time_to_terminal_s", "p99"),
    ],
    "replay": [("figures", "replay", "events_per_s"), ("baseline", "raw_fastavro", "events_per_s")],
    "sink": [
        ("figures", "first_pass", "events_per_s"),
        ("figures", "duplicate_pass", "events_per_s"),
    ],
    "pipeline": [
        ("figures", "processors", "events_per_s"),
        ("figures", "processors", "lag", "p99"),
        ("baseline", "raw_aiokafka", "events_per_s"),
    ],
    "launch": [
        ("figures", "submit_to_running", "p99"),
        ("figures", "submit_to_terminal", "p99"),
        ("baseline", "docker_run_rm", "p99"),
    ],
    "logs": [("figures", "api_logs_f", "p99"), ("baseline", "docker_logs_f", "p99")],
}


def dig(doc: dict, path: tuple[str, ...]) -> object:
    for key in path:
        doc = doc[key]
    return doc


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ``gridledger bench --quick`` run of every benchmark (about a minute)."""
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "bench", "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_every_benchmark_has_a_quick_run() -> None:
    assert set(EXPECTED) == set(BENCHMARKS)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_quick_result_shape(quick_results: Path, name: str) -> None:
    doc = json.loads((quick_results / f"{name}.json").read_text())
    assert doc["quick"] is True
    assert doc["machine"]["cores"] >= 1
    assert doc["targets"], "every benchmark states its targets"
    for path in EXPECTED[name]:
        value = dig(doc, path)
        assert isinstance(value, int | float) and value > 0, (path, value)
    assert any(v for v in doc["peak_rss_mb"].values())


def test_machine_and_plot(quick_results: Path) -> None:
    machine = json.loads((quick_results / "machine.json").read_text())
    assert {"cores", "memory_gb", "cpu_model", "python"} <= set(machine)
    pytest.importorskip("matplotlib")
    png = quick_results / "latency.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
