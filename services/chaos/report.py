"""The chaos report: totals over the phases, the verdict, and the lines a person reads.

``summarize`` turns the phases' results into one JSON-able report; ``ok`` is
true only when every check (after each fault and at the end) found nothing,
every ``replay --verify`` exited 0, every idempotency key named one job and
every service came back within the recovery timeout.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.clock import utcnow


def _checks(phase: dict[str, Any]) -> list[dict[str, Any]]:
    return [f["check"] for f in phase["faults"]] + [phase["final"]["check"]]


def _verifies(phase: dict[str, Any]) -> list[dict[str, Any]]:
    found = [f["replay_verify"] for f in phase["faults"] if f["replay_verify"]]
    return found + [phase["final"]["replay_verify"]]


def problems(phase: dict[str, Any]) -> list[str]:
    """Why a phase is not a pass (empty when it is)."""
    out = []
    for fault in phase["faults"]:
        if not fault["check"]["ok"]:
            out.append(f"after {fault['fault']}: {fault['check']['findings']}")
        missing = [k for k, v in fault["recovery_s"].items() if v is None]
        if missing:
            out.append(f"after {fault['fault']}: not recovered within the timeout: {missing}")
        if fault["replay_verify"] and fault["replay_verify"]["exit"] != 0:
            out.append(
                f"after {fault['fault']}: replay --verify exit {fault['replay_verify']['exit']}"
            )
    final = phase["final"]
    if not final["check"]["ok"]:
        out.append(f"at the end: {final['check']['findings']}")
    if final["replay_verify"]["exit"] != 0:
        out.append(f"at the end: replay --verify exit {final['replay_verify']['exit']}")
    keys = phase["workload"]["keys_with_more_than_one_job"]
    if keys:
        out.append(f"{len(keys)} Idempotency-Key(s) answered with more than one job: {keys[:5]}")
    return out


def summarize(phases: list[dict[str, Any]], started: datetime, elapsed_s: float) -> dict[str, Any]:
    """The run's report: every phase, and the totals the verdict rests on."""
    finals = [p["final"]["check"] for p in phases]
    kinds = sorted({m for p in phases for f in p["faults"] for m in f["members"]})
    reasons = [f"{p['phase']}: {why}" for p in phases for why in problems(p)]
    worst = max(finals, key=lambda c: c["longest_time_to_terminal_s"], default=None)
    totals = {
        "ok": not reasons,
        "faults_injected": sum(len(p["faults"]) for p in phases),
        "fault_kinds": len(kinds),
        "kinds": kinds,
        "overlapping": [f["fault"] for p in phases for f in p["faults"] if len(f["members"]) > 1],
        "jobs": sum(c["jobs"] for c in finals),
        "events": sum(c["events"] for c in finals),
        "lost": max((c["lost"] for p in phases for c in _checks(p)), default=0),
        "stuck": sum(c["stuck"] for c in finals),
        "double_billed": max((c["double_billed"] for p in phases for c in _checks(p)), default=0),
        "longest_time_to_terminal_s": worst["longest_time_to_terminal_s"] if worst else 0.0,
        "replay_verify_all_exit_0": all(v["exit"] == 0 for p in phases for v in _verifies(p)),
        "postgres_equals_replay": all(
            v["tables_equal_replay"] for p in phases for v in _verifies(p)
        ),
        "unexpected_exits": {
            f"{p['phase']}/{f['fault']}": f["unexpected_exits"]
            for p in phases
            for f in p["faults"]
            if f["unexpected_exits"]
        },
        "problems": reasons,
        "skipped": {k: v for p in phases for k, v in p["skipped"].items()},
    }
    return {
        "suite": "gridledger chaos",
        "started_at": started.isoformat(),
        "finished_at": utcnow().isoformat(),
        "elapsed_s": round(elapsed_s, 1),
        "totals": totals,
        "phases": phases,
    }


def lines(report: dict[str, Any]) -> list[str]:
    """The report for people: the totals, then each phase and its faults' recovery."""
    t = report["totals"]
    out = [
        f"gridledger chaos: {'PASS' if t['ok'] else 'FAIL'} in {report['elapsed_s']:.0f} s",
        f"  faults injected {t['faults_injected']} ({t['fault_kinds']} kinds: "
        f"{', '.join(t['kinds'])}); overlapping: {', '.join(t['overlapping']) or 'none'}",
        f"  jobs {t['jobs']}, events {t['events']}",
        f"  lost {t['lost']}, stuck {t['stuck']}, double-billed {t['double_billed']}",
        f"  longest time to terminal {t['longest_time_to_terminal_s']:.1f} s",
        f"  replay --verify exit 0 every time: {t['replay_verify_all_exit_0']}; "
        f"Postgres tables equal to the replay: {t['postgres_equals_replay']}",
    ]
    for phase in report["phases"]:
        w = phase["workload"]
        out.append(
            f"  [{phase['phase']}] {phase['brokers']} broker(s), replication "
            f"{phase['replication']}, min.insync.replicas {phase['min_insync_replicas']}; "
            f"{w['acknowledged_jobs']} jobs acknowledged by the API ({w['submitters']} "
            f"submitters, {w['idempotency_keys']} idempotency keys), answers {w['answers']}"
        )
        for fault in phase["faults"]:
            rec = ", ".join(
                f"{k} {'NOT RECOVERED' if v is None else f'{v:.1f}s'}"
                for k, v in fault["recovery_s"].items()
            )
            state = "ok" if fault["check"]["ok"] else f"VIOLATED {fault['check']['findings']}"
            out.append(f"    {fault['fault']:<26} recovery: {rec}")
            out.append(f"    {'':<26} restarts {fault['restarts'] or 'none'}; invariants {state}")
            if fault["unexpected_exits"]:
                out.append(
                    f"    {'':<26} exited on their own (not killed by the harness): "
                    f"{', '.join(fault['unexpected_exits'])}"
                )
        if phase.get("no_ops_endpoint"):
            out.append(
                f"    no /readyz answered by {', '.join(phase['no_ops_endpoint'])}: their "
                "readiness is taken as 'process running'"
            )
        for name, why in phase["skipped"].items():
            out.append(f"    {name:<26} SKIPPED: {why}")
    for why in t["problems"]:
        out.append(f"  problem: {why}")
    return out
