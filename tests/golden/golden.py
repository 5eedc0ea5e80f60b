"""Golden histories: JSON fixtures of whole job histories and what they must project to.

A fixture holds the events (each with its ``type``), the meter ticks and the
``expected`` summary: job state, classification, the derived decisions and the
accounting record. ``summarize`` computes that summary with the current code;
``python -m tests.golden.regenerate`` writes it, the golden test compares against the
committed JSON, so any behaviour change shows up as a diff in review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS
from projections.job_state import project
from schemas.events import EVENT_TYPES, Event, MeterTick

HERE = Path(__file__).parent


def fixture_paths() -> list[Path]:
    return sorted(HERE.glob("*.json"))


def decode(record: dict[str, Any]) -> Event:
    """An event from its JSON form (the ``type`` field names the model)."""
    return EVENT_TYPES[record["type"]].model_validate(record)


def is_recorded(path: Path) -> bool:
    """The fixture was read from a real run's ledger (``tests/golden/record.py``)."""
    return "recorded" in json.loads(path.read_text())


def load(path: Path) -> tuple[list[Event], list[MeterTick], dict[str, Any]]:
    data = json.loads(path.read_text())
    events = [decode(r) for r in data["events"]]
    ticks = [t for t in (decode(r) for r in data["ticks"]) if isinstance(t, MeterTick)]
    return events, ticks, data["expected"]


def _decision(e: Event) -> dict[str, Any]:
    keep = {
        "FailureClassified": (
            "failure_class",
            "attribution",
            "retryable",
            "rule_id",
            "summary",
            "advice",
        ),
        "RetryScheduled": (
            "next_attempt",
            "delay_s",
            "not_before",
            "avoid_nodes",
            "avoid_providers",
            "reason",
        ),
        "JobFailed": ("failure_class", "attribution", "reason"),
        "JobSucceededWithErrors": ("summary",),
        "JobCancelled": ("summary",),
    }.get(e.type, ())
    data = e.model_dump(mode="json")
    out = {
        "type": e.type,
        "attempt": e.attempt,
        "event_id": e.event_id,
        "causation_id": e.causation_id,
    }
    out.update({k: data[k] for k in keep})
    if e.type == "RetryScheduled":
        out["resume_from"] = (data["resume_from"] or {}).get("name")
    return out


def summarize(events: list[Event], ticks: list[MeterTick]) -> dict[str, Any]:
    """What a history must project to, in plain JSON types."""
    view = project(events)
    record = account(events, ticks)
    failure = None
    if view.failure is not None:
        failure = view.failure.model_dump(
            mode="json",
            include={
                "failure_class",
                "attribution",
                "retryable",
                "rule_id",
                "summary",
                "advice",
                "attempt",
            },
        )
        failure["evidence_log_lines"] = view.failure.evidence.log_lines
    attempt_fields = {
        "attempt",
        "status",
        "node_id",
        "exit_code",
        "failure_class",
        "attribution",
        "release_reason",
    }
    accounting_fields = {
        "attempt",
        "outcome",
        "attribution",
        "failure_class",
        "held_seconds",
        "gpu_seconds",
        "metered_gpu_seconds",
        "uncounted_gpu_seconds",
        "uncounted_ticks",
        "billable_gpu_seconds",
        "credited_gpu_seconds",
        "missing_ticks",
        "release_source",
        "reconciled",
    }
    return {
        "status": view.status,
        "terminal_event": view.terminal_event,
        "reason": view.reason,
        "anomalies": view.anomalies,
        "attempts": [a.model_dump(mode="json", include=attempt_fields) for a in view.attempts],
        "failure": failure,
        "decisions": [_decision(e) for e in events if e.producer in DECISION_PRODUCERS],
        "accounting": {
            **record.model_dump(
                mode="json",
                include={
                    "status",
                    "final",
                    "policy_version",
                    "held_seconds",
                    "gpu_seconds",
                    "metered_gpu_seconds",
                    "uncounted_gpu_seconds",
                    "billable_gpu_seconds",
                    "credited_gpu_seconds",
                    "reconciled",
                },
            ),
            "attempts": [
                a.model_dump(mode="json", include=accounting_fields) for a in record.attempts
            ],
        },
    }


def dump(
    path: Path,
    description: str,
    events: list[Event],
    ticks: list[MeterTick],
    recorded: dict[str, Any] | None = None,
) -> None:
    """Write a fixture; ``recorded`` (where, which job, when) marks one read from a real
    ledger by ``tests/golden/record.py`` rather than built by a scenario."""
    data: dict[str, Any] = {
        "scenario": path.stem,
        "description": description,
        "events": [e.model_dump(mode="json") for e in events],
        "ticks": [t.model_dump(mode="json") for t in ticks],
        "expected": summarize(events, ticks),
    }
    if recorded is not None:
        data["recorded"] = recorded
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
