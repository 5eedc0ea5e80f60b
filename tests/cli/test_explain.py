"""Plain-words output: explain, tables, and no ANSI codes when the output is not a terminal."""

from __future__ import annotations

import io
from typing import Any

from services.api.explain import explain
from services.cli import render

FAILED_JOB: dict[str, Any] = {
    "job_id": "job-0123456789ab",
    "name": "train",
    "status": "failed",
    "attempts": [
        {
            "attempt": 1,
            "status": "ended",
            "node_id": "node-a",
            "gpu_count": 1,
            "gpu_model": "A100-80GB",
            "exit_code": 1,
            "failure_class": "missing_module",
            "attribution": "user",
            "last_log_lines": ["step 1", "ModuleNotFoundError: No module named 'transformers'"],
        }
    ],
    "failure": {
        "failure_class": "missing_module",
        "attribution": "user",
        "retryable": False,
        "summary": "The container is missing the Python module 'transformers'.",
        "advice": "Add transformers to the image and resubmit.",
        "evidence": {"rule_id": "missing_module", "exit_code": 1, "log_lines": []},
        "rule_id": "missing_module",
        "classifier_version": "1",
    },
    "accounting": {"billable_gpu_seconds": 12.0, "credited_gpu_seconds": 0.0, "final": True},
    "reason": "not retryable",
}


def test_explain_says_what_why_whose_side_and_what_next() -> None:
    text = explain(FAILED_JOB)
    assert text.splitlines()[0] == "job-0123456789ab (train): failed after 1 attempt(s)"
    for heading in ("What happened", "Why", "Whose side", "What to do next", "Last log lines"):
        assert heading in text
    assert "missing the Python module 'transformers'" in text
    assert "your job" in text
    assert "decision: not retryable" in text
    assert "Add transformers to the image" in text
    assert "| ModuleNotFoundError: No module named 'transformers'" in text
    assert "12.0 GPU-seconds billable" in text
    assert "\x1b[" not in text


def test_a_platform_failure_says_it_is_not_the_users_fault() -> None:
    job = {
        **FAILED_JOB,
        "failure": {**FAILED_JOB["failure"], "attribution": "platform", "retryable": True},
        "status": "retrying",
    }
    text = explain(job)
    assert "not your job" in text and "credited" in text
    assert "retries this automatically" in text


def test_a_running_job_is_explained_without_a_failure() -> None:
    text = explain({"job_id": "job-1", "status": "running", "attempts": []})
    assert "What happened\n  Running." in text and "Whose side" not in text


def test_tables_align_and_use_colour_only_on_a_terminal(monkeypatch) -> None:
    out = render.table(["JOB", "STATUS"], [["job-1", "failed"], ["job-22", "ok"]])
    assert out.splitlines() == ["JOB     STATUS", "job-1   failed", "job-22  ok"]

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert render.paint("x", "31", Tty()) == "\x1b[31mx\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.paint("x", "31", Tty()) == "x"
    assert render.duration(0.25) == "250ms" and render.duration(75) == "75.0s"
    assert render.duration(3 * 3600 + 60) == "3h01m"
