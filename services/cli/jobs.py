"""Job commands over the API: submit, status, explain, history, cancel."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Any

import click

from schemas.views import TERMINAL_STATUSES
from services.cli import render
from services.cli.client import ApiClient, ApiError
from services.cli.explain import STATUS_LINES, explain
from services.cli.options import Connection, Output, api_options, output_options

# --------------------------------------------------------------------------- submit


def _content_type(path: str, body: bytes) -> str:
    if path.endswith((".yaml", ".yml")):
        return "application/yaml"
    if path.endswith(".json") or body.lstrip().startswith(b"{"):
        return "application/json"
    return "application/yaml"


@click.command("submit", short_help="submit a job spec (YAML or JSON)")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--wait", "wait_end", is_flag=True, help="Wait until the job ends; exit 0 if it succeeded."
)
@click.option("--idempotency-key", help="Submitting again with the same key returns the same job.")
@api_options
@output_options
def submit(
    conn: Connection, out: Output, file: str, wait_end: bool, idempotency_key: str | None
) -> int:
    """Submit a job spec (YAML or JSON; - reads stdin).

    Prints the job id. An impossible job is rejected here, with the numbers.
    """
    with click.open_file(file, "rb") as stream:
        body = stream.read()
    api = conn.client
    try:
        created = api.post(
            "/v1/jobs", body, _content_type(file, body), idempotency_key=idempotency_key
        )
    except ApiError as exc:
        if exc.status in (400, 413, 422) and isinstance(exc.body, dict):
            if out.machine:
                click.echo(out.dump(exc.body))
            else:
                click.echo(f"{file}: the spec was not accepted:", err=True)
                for p in exc.body.get("problems", []):
                    click.echo(f"  {p['field']}: {p['problem']}\n    fix: {p['fix']}", err=True)
            return 2
        raise
    job_id = created["job_id"]
    if not wait_end:
        # The pre-flight fit runs within milliseconds of the submit: wait for it briefly so
        # an impossible job is reported here, with its numbers, not on a later status call.
        job = _past_preflight(api, job_id)
        if job is not None and job.get("status") == "rejected":
            if out.machine:
                out.emit(job)
            else:
                click.echo(explain(job), err=True)
            return 1
        out.emit(created, lambda c: str(c["job_id"]))
        return 0
    if not out.machine:
        click.echo(f"submitted {render.bold(job_id)}", err=True)
    job = wait(api, job_id, quiet=out.machine)
    out.emit(job, explain)
    return 0 if job.get("status") == "succeeded" else 1


def _past_preflight(api: ApiClient, job_id: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The job once it has left ``submitted`` (queued or rejected); None if that takes longer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}")
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            if job.get("status") != "submitted":
                return job
        time.sleep(0.2)
    return None


def wait(
    api: ApiClient, job_id: str, *, quiet: bool = False, poll_s: float = 1.0
) -> dict[str, Any]:
    """Poll until the job is terminal, printing each status change to stderr."""
    last = None
    began = time.monotonic()
    while True:
        try:
            job = api.get(f"/v1/jobs/{job_id}")
        except ApiError as exc:
            # The sink may not have recorded a brand-new job yet.
            if exc.status != 404 or time.monotonic() - began > 30:
                raise
            time.sleep(poll_s)
            continue
        status = job["status"]
        if status != last and not quiet:
            elapsed = render.duration(time.monotonic() - began)
            line = STATUS_LINES.get(status, status)
            print(f"  [{elapsed:>7}] {render.status(status)}: {line}", file=sys.stderr, flush=True)
            last = status
        if status in TERMINAL_STATUSES:
            return job
        time.sleep(poll_s)


# --------------------------------------------------------------------------- status


def _jobs_table(jobs: list[dict[str, Any]]) -> str:
    rows = [
        [
            j["job_id"],
            render.status(j["status"]),
            j["name"],
            j["image"],
            j["attempt"],
            (j["submitted_at"] or "")[:19],
            j["failure_class"],
        ]
        for j in jobs
    ]
    return render.table(["JOB", "STATUS", "NAME", "IMAGE", "ATT", "SUBMITTED", "FAILURE"], rows)


def _job_text(job: dict[str, Any]) -> str:
    lines = [
        f"{render.bold(job['job_id'])}  {render.status(job['status'])}",
        f"  {STATUS_LINES.get(job['status'], '')}",
    ]
    spec = job.get("spec") or {}
    lines.append(
        f"  image {spec.get('image', '')}, {spec.get('resources', {}).get('gpus', 0)} GPU(s)"
    )
    for a in job.get("attempts") or []:
        lines.append(f"  attempt {a['attempt']}: {a['status']} {a.get('node_id') or ''}".rstrip())
    failure = job.get("failure")
    if failure:
        lines.append(
            f"  {render.bold(failure['failure_class'])} ({failure['attribution']}): "
            f"{failure['summary']}"
        )
        lines.append(f"  next: {failure['advice']}")
    acc = job.get("accounting")
    if acc:
        lines.append(
            f"  GPU-seconds: {acc['gpu_seconds']:.1f} held, {acc['billable_gpu_seconds']:.1f} "
            f"billable, {acc['credited_gpu_seconds']:.1f} credited"
        )
    return "\n".join(lines)


@click.command("status", short_help="a job's status, or your jobs")
@click.argument("job", required=False)
@api_options
@output_options
def status(conn: Connection, out: Output, job: str | None) -> int:
    """One job's state, attempts and failure; without JOB, your jobs."""
    if not job:
        out.emit(conn.client.get("/v1/jobs")["jobs"], _jobs_table)
        return 0
    out.emit(conn.client.get(f"/v1/jobs/{job}"), _job_text)
    return 0


# --------------------------------------------------------------------------- explain, history


@click.command("explain", short_help="what happened, why, whose side, what to do next")
@click.argument("job")
@api_options
@output_options
def explain_job(conn: Connection, out: Output, job: str) -> int:
    """What happened to JOB, why, whose side it is on and what to do next."""
    out.emit(conn.client.get(f"/v1/jobs/{job}"), explain)
    return 0


_DETAIL_KEYS = (
    "node_id",
    "failure_class",
    "exit_code",
    "reason",
    "summary",
    "next_attempt",
    "image",
    "name",
    "path",
)


def _history_table(events: list[dict[str, Any]]) -> str:
    rows = []
    previous: datetime | None = None
    start: datetime | None = None
    for e in events:
        at = render.parse_time(e["occurred_at"])
        delta = (at - previous).total_seconds() if previous and at else None
        since = (at - start).total_seconds() if start and at else 0.0
        start = start or at
        previous = at
        detail = ", ".join(f"{k}={e[k]}" for k in _DETAIL_KEYS if e.get(k) not in (None, "", []))
        rows.append(
            [
                e["occurred_at"][11:23],
                f"+{render.duration(delta)}" if delta is not None else "",
                render.duration(since),
                e["attempt"],
                render.bold(e["type"]),
                detail[:90],
            ]
        )
    return render.table(["TIME", "DELTA", "T+", "ATT", "EVENT", "DETAIL"], rows)


@click.command("history", short_help="a job's events with the time between them")
@click.argument("job")
@api_options
@output_options
def history(conn: Connection, out: Output, job: str) -> int:
    """Every event of JOB, with the time between them."""
    out.emit(conn.client.get(f"/v1/jobs/{job}/events")["events"], _history_table)
    return 0


# --------------------------------------------------------------------------- cancel


@click.command("cancel", short_help="cancel a job")
@click.argument("job")
@click.option("--reason", default="", help="Recorded with the cancel.")
@api_options
@output_options
def cancel(conn: Connection, out: Output, job: str, reason: str) -> int:
    """Cancel JOB: a queued job ends at once, a running one is stopped."""
    body = json.dumps({"reason": reason}).encode()
    try:
        answer = conn.client.post(f"/v1/jobs/{job}/cancel", body)
    except ApiError as exc:
        if exc.status == 409:
            click.echo(str(exc), err=True)
            return 1
        raise
    out.emit(answer, lambda _: f"cancel requested for {job}")
    return 0


COMMANDS = (submit, status, explain_job, history, cancel)
