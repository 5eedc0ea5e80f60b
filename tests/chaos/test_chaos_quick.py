"""``gridledger chaos --quick``: the CI subset of the chaos suite, run as a user runs it.

A private stack (own home, free ports) with every service, two Docker agents
and simulated agents; 50 concurrent submitters; the processors worker and the
sink SIGKILLed, Postgres SIGKILLed and restarted. The command exits 0 only when
every invariant held after each fault and at the end; the test reads its
printed report and its JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_quick_chaos_loses_nothing_sticks_nothing_bills_nothing_twice(tmp_path: Path) -> None:
    report_path = tmp_path / "chaos.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli.main",
            "chaos",
            "--quick",
            "--report",
            str(report_path),
        ],
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(run.stdout[-6000:], run.stderr[-3000:])
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "gridledger chaos: PASS" in run.stdout
    assert "lost 0, stuck 0, double-billed 0" in run.stdout

    report = json.loads(report_path.read_text())
    totals = report["totals"]
    assert totals["ok"] and not totals["problems"]
    assert totals["kinds"] == ["kill-postgres", "kill-processors", "kill-sink"]
    assert totals["replay_verify_all_exit_0"] and totals["postgres_equals_replay"]
    (phase,) = report["phases"]
    workload = phase["workload"]
    assert workload["submitters"] >= 50 and workload["docker_agents"] == 2
    assert workload["acknowledged_jobs"] == phase["final"]["check"]["jobs"] > 0
    assert workload["idempotency_keys"] > 0 and not workload["keys_with_more_than_one_job"]
    final = phase["final"]["check"]
    assert final["terminal"] == final["jobs"]
    for fault in phase["faults"]:
        # Every part worked again after the fault: new jobs on both kinds of node ended.
        assert all(v is not None for v in fault["recovery_s"].values()), fault
        assert fault["check"]["ok"], fault["check"]
    killed = {f["fault"]: f["restarts"] for f in phase["faults"]}
    assert killed["kill-processors"].get("processors", 0) >= 1
    assert killed["kill-sink"].get("sink", 0) >= 1
