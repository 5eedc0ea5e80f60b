"""Plain-words explanations of a job, from its API document: what the API's
``/explain`` serves and ``gridledger explain`` prints.

Pure functions over the JSON the API returns, so they are easy to test. The text is
plain; the CLI passes its terminal :class:`Markup` for colour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Markup(NamedTuple):
    """How headings, a status and minor marks are set off: plain by default, colour on
    the CLI's terminal (``services.cli.render.MARKUP``)."""

    bold: Callable[[str], str] = str
    status: Callable[[str], str] = str
    dim: Callable[[str], str] = str


PLAIN = Markup()

WHOSE_SIDE = {
    "user": "your job: the code, image, inputs or spec (not the platform)",
    "platform": "the platform or the provider, not your job — platform failures are credited, "
    "not billed",
    "capacity": "capacity: no suitable GPU was free in time — not your code",
}

STATUS_LINES = {
    "submitted": "Submitted; waiting for the scheduler to check that it fits and queue it.",
    "queued": "Queued; waiting for a GPU node with room for it.",
    "scheduled": "Placed on a node; waiting for the node to accept it.",
    "starting": "Starting: the node holds the GPUs and is preparing the container.",
    "running": "Running.",
    "finishing": "The process ended; storing outputs and releasing the GPUs.",
    "lost_contact": "The node stopped sending heartbeats; gridledger waits until a deadline "
    "before declaring it lost.",
    "retrying": "An attempt failed for a retryable reason; another attempt is planned.",
    "succeeded": "Succeeded.",
    "succeeded_with_errors": "The process succeeded but a declared output could not be stored.",
    "failed": "Failed.",
    "cancelled": "Cancelled.",
    "rejected": "Rejected before any compute was held; nothing is owed.",
}


def _attempt_line(a: dict[str, Any]) -> str:
    parts = [f"attempt {a['attempt']}", a.get("status", "")]
    if a.get("node_id"):
        parts.append(f"on {a['node_id']}")
    if a.get("gpu_count"):
        parts.append(f"{a['gpu_count']}x {a.get('gpu_model') or 'GPU'}")
    if a.get("exit_code") is not None:
        parts.append(f"exit {a['exit_code']}")
    if a.get("oom_killed"):
        parts.append("OOM-killed")
    if a.get("failure_class"):
        parts.append(f"{a['failure_class']} ({a.get('attribution', '')})")
    return " · ".join(p for p in parts if p)


EVIDENCE_SHOWN = (
    ("node", "node"),
    ("provider", "provider"),
    ("gpu_model", "GPU"),
    ("image", "image"),
    ("runtime", "ran for"),
    ("memory_limit", "memory limit"),
    ("signal_name", "signal"),
    ("max_runtime", "runtime limit"),
    ("queue_timeout", "queue timeout"),
    ("last_heartbeat", "last heartbeat"),
    ("missing_outputs", "missing outputs"),
    ("failed_outputs", "outputs not stored"),
    ("store_message", "store error"),
)
"""Evidence details worth a line in plain words; `status --json` has all of them."""


def explain(job: dict[str, Any], markup: Markup = PLAIN) -> str:
    """What happened, why, whose side, what to do next, and the last log lines."""
    lines: list[str] = []
    status = job.get("status", "")
    name = f" ({job['name']})" if job.get("name") else ""
    attempts = job.get("attempts") or []
    lines.append(
        f"{markup.bold(job['job_id'])}{name}: {markup.status(status)}"
        + (f" after {len(attempts)} attempt(s)" if attempts else "")
    )
    if job.get("as_of"):
        lines.append(f"As of {job['as_of']}: what the ledger held then, not what came after.")
    lines.append("")
    failure = job.get("failure")
    summary_text = (failure or {}).get("summary")
    lines.append(markup.bold("What happened"))
    if failure and status not in ("succeeded",):
        lines.append(f"  {failure.get('summary') or STATUS_LINES.get(status, status)}")
    else:
        lines.append(f"  {STATUS_LINES.get(status, status)}")
    for a in attempts:
        lines.append(f"  - {_attempt_line(a)}")
    if failure:
        evidence = failure.get("evidence") or {}
        lines.append("")
        lines.append(markup.bold("Why"))
        facts = [f"class {failure.get('failure_class')}", f"rule {failure.get('rule_id')}"]
        if evidence.get("exit_code") is not None:
            facts.append(f"exit code {evidence['exit_code']}")
        if evidence.get("signal"):
            facts.append(f"signal {evidence['signal']}")
        if evidence.get("oom_killed"):
            facts.append("killed for using more host memory than its limit")
        lines.append("  " + ", ".join(facts))
        if job.get("reason") and job["reason"] != failure.get("summary"):
            lines.append(f"  decision: {job['reason']}")
        details = evidence.get("details") or {}
        for key, label in EVIDENCE_SHOWN:
            if details.get(key):
                lines.append(f"  {label}: {details[key]}")
        for line in evidence.get("log_lines") or []:
            lines.append(f"  > {line}")
        lines.append("")
        lines.append(markup.bold("Whose side"))
        attribution = failure.get("attribution", "")
        lines.append(f"  {WHOSE_SIDE.get(attribution, attribution)}")
        lines.append("")
        lines.append(markup.bold("What to do next"))
        lines.append(f"  {failure.get('advice') or 'nothing to change; resubmit when ready'}")
        if failure.get("retryable") and status not in ("failed", "cancelled", "rejected"):
            lines.append("  gridledger retries this automatically.")
    fit = job.get("fit")
    if fit and not fit.get("fits", True) and fit.get("explanation") != summary_text:
        lines.append("")
        lines.append(markup.bold("Fit check"))
        lines.append(f"  {fit.get('explanation', '')}")
    last_lines = _last_log_lines(attempts)
    if last_lines:
        lines.append("")
        lines.append(markup.bold("Last log lines"))
        lines += [f"  {markup.dim('|')} {line}" for line in last_lines]
    accounting = job.get("accounting")
    if accounting:
        lines.append("")
        lines.append(markup.bold("Usage"))
        lines.append(
            f"  {accounting.get('billable_gpu_seconds', 0):.1f} GPU-seconds billable, "
            f"{accounting.get('credited_gpu_seconds', 0):.1f} credited"
            + ("" if accounting.get("final") else " (so far)")
        )
    return "\n".join(lines)


def _last_log_lines(attempts: list[dict[str, Any]]) -> list[str]:
    for a in reversed(attempts):
        if a.get("last_log_lines"):
            return list(a["last_log_lines"])[-10:]
    return []
