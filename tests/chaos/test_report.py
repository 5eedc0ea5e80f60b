"""The chaos report passes only a clean run, and the fault table runs each fault where it can."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from services.chaos.faults import FAULTS, OVERLAPS, members, runs_on
from services.chaos.harness import FULL, QUICK
from services.chaos.report import lines, summarize

CLEAN_CHECK = {
    "ok": True, "jobs": 10, "terminal": 10, "events": 500, "lost": 0, "stuck": 0,
    "double_billed": 0, "longest_time_to_terminal_s": 12.5, "longest_job": "job-x",
    "findings": {}, "examples": [],
}  # fmt: skip
VERIFY_OK = {"exit": 0, "tables_equal_replay": True, "lines": []}


def _phase() -> dict[str, Any]:
    return {
        "phase": "p",
        "brokers": 1,
        "replication": 1,
        "min_insync_replicas": 1,
        "workload": {
            "acknowledged_jobs": 10,
            "submitters": 50,
            "idempotency_keys": 2,
            "answers": {},
            "keys_with_more_than_one_job": [],
        },  # fmt: skip
        "faults": [
            {
                "fault": "kill-sink",
                "members": ["kill-sink"],
                "detail": [],
                "recovery_s": {"sink_ready": 1.0},
                "restarts": {"sink": 1},
                "unexpected_exits": [],
                "check": dict(CLEAN_CHECK),
                "replay_verify": VERIFY_OK,
            }  # fmt: skip
        ],
        "skipped": {},
        "final": {"check": dict(CLEAN_CHECK), "replay_verify": VERIFY_OK},
    }


def _report(phase: dict[str, Any]) -> dict[str, Any]:
    return summarize([phase], datetime.now(UTC), 1.0)


def test_a_clean_run_passes_and_says_lost_stuck_double_billed_zero():
    report = _report(_phase())
    assert report["totals"]["ok"]
    text = "\n".join(lines(report))
    assert "PASS" in text and "lost 0, stuck 0, double-billed 0" in text


def test_a_violation_a_failed_verify_an_unrecovered_service_or_a_split_key_fails():
    broken = []
    violated = _phase()
    violated["faults"][0]["check"] = {**CLEAN_CHECK, "ok": False, "lost": 1}
    broken.append(violated)
    verify = _phase()
    verify["final"]["replay_verify"] = {**VERIFY_OK, "exit": 1, "tables_equal_replay": False}
    broken.append(verify)
    unrecovered = _phase()
    unrecovered["faults"][0]["recovery_s"] = {"sink_ready": None}
    broken.append(unrecovered)
    split = _phase()
    split["workload"]["keys_with_more_than_one_job"] = ["k1"]
    broken.append(split)
    for phase in broken:
        report = _report(copy.deepcopy(phase))
        assert not report["totals"]["ok"], phase
        assert report["totals"]["problems"]
        assert "FAIL" in lines(report)[0]


def test_every_configured_fault_exists_and_runs_on_its_phases_stack():
    for phase in (*QUICK, *FULL):
        for name in phase.faults:
            assert all(m in FAULTS for m in members(name)), name
            assert runs_on(name, phase.brokers), (phase.name, name)
    assert not runs_on("kill-leader", 1) and not runs_on("kill-broker", 3)
    assert set(OVERLAPS) <= {f for p in FULL for f in p.faults}
    kinds = {m for p in FULL for f in p.faults for m in members(f)}
    assert len(kinds) >= 12 and {"kill-leader", "kill-broker", "kill-postgres"} <= kinds
