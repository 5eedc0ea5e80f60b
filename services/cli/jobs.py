"""Job commands over the API: submit, status, explain, history, cancel."""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click

from schemas.views import JOB_STATUSES, TERMINAL_STATUSES
from services.api.explain import STATUS_LINES, Markup
from services.api.explain import explain as explain_text
from services.cli import render
from services.cli.client import ApiClient, ApiError
from services.cli.exits import CliError, Exit
from services.cli.logs import Printer, follow_log
from services.cli.options import (
    Connection,
    Deadline,
    Output,
    api_options,
    as_of_option,
    complete_job,
    moment,
    output_options,
    timeout_option,
)
from services.clock import utcnow


def explain(job: dict[str, Any]) -> str:
    """The job's explanation (:func:`services.api.explain.explain`), in colour on a terminal."""
    return explain_text(job, Markup(render.bold, render.status, render.dim))


def job_path(job: str, suffix: str = "", as_of: str | None = None) -> str:
    """The API path of a job's resource, as of a time when one is given."""
    path = f"/v1/jobs/{urllib.parse.quote(job, safe='')}{suffix}"
    return path + ("?" + urllib.parse.urlencode({"as_of": as_of}) if as_of else "")


# --------------------------------------------------------------------------- submit


def content_type(path: str, body: bytes) -> str:
    """The media type to send a spec file as: by its suffix, else JSON if it looks so."""
    if path.endswith((".yaml", ".yml")):
        return "application/yaml"
    if path.endswith(".json") or body.lstrip().startswith(b"{"):
        return "application/json"
    return "application/yaml"


def refused(out: Output, file: str, body: dict[str, Any]) -> int:
    """Print a refused spec's problems (the API's, or ``validate``'s own: the same)."""
    if out.machine:
        click.echo(out.dump(body))
    else:
        click.echo(f"{file}: the spec was not accepted:", err=True)
        for p in body.get("problems", []):
            click.echo(f"  {p['field']}: {p['problem']}\n    fix: {p['fix']}", err=True)
    return Exit.INVALID_SPEC


@click.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option(
    "--wait", "wait_end", is_flag=True, help="Wait until the job ends; exit 0 if it succeeded."
)
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Print the job's logs as `logs -f` does until it ends, then exit with its exit code.",
)
@click.option("--idempotency-key", help="Submitting again with the same key returns the same job.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check the spec and its fit against the live fleet; nothing is recorded. "
    "Exit 0 if it would queue, 1 if it would be rejected, 3 if the spec is invalid.",
)
@timeout_option
@api_options
@output_options
def submit(
    conn: Connection,
    out: Output,
    file: str,
    wait_end: bool,
    follow: bool,
    idempotency_key: str | None,
    dry_run: bool,
    deadline: Deadline,
) -> int:
    """Submit a job spec (YAML or JSON; - reads stdin).

    Prints the job id. An impossible job is rejected here, with the numbers.
    `gridledger validate FILE` checks a spec offline.

    With -f the job's output follows (stdout to stdout, stderr to stderr,
    resumed after a dropped connection), then what happened is printed to
    stderr and the exit code is the job's: 0 when it succeeded, its process's
    exit code when it ended with one, 128 + N when signal N killed it;
    otherwise (rejected, cancelled, lost, succeeded_with_errors) 1. The
    CLI's own codes stand for the rest: 9 when --timeout passed first (the
    job goes on), 3 for a refused spec, 5 when the API is away.
    """
    with click.open_file(file, "rb") as stream:
        body = stream.read()
    api = conn.client
    try:
        if dry_run:
            checked = api.post("/v1/jobs/dry-run", body, content_type(file, body))
        else:
            created = api.post(
                "/v1/jobs", body, content_type(file, body), idempotency_key=idempotency_key
            )
    except ApiError as exc:
        if exc.status in (400, 413, 422) and isinstance(exc.body, dict):
            return refused(out, file, exc.body)
        raise
    reply = checked if dry_run else created
    for w in reply.get("warnings") or []:
        click.echo(f"warning: {w['field']}: {w['problem']}\n    fix: {w['fix']}", err=True)
    if dry_run:
        out.emit(checked, _dry_run_text)
        return Exit.OK if checked["would"] == "queue" else Exit.JOB_FAILED
    job_id = created["job_id"]
    if follow:
        return _follow_to_end(api, job_id, out, deadline)
    if not wait_end:
        # The pre-flight fit runs within milliseconds of the submit: wait for it briefly so
        # an impossible job is reported here, with its numbers, not on a later status call.
        job = _past_preflight(api, job_id)
        if job is not None and job.get("status") == "rejected":
            if out.machine:
                out.emit(job)
            else:
                click.echo(explain(job), err=True)
            return Exit.JOB_FAILED
        out.emit(created, lambda c: str(c["job_id"]))
        return 0
    if not out.machine:
        click.echo(f"submitted {render.bold(job_id)}", err=True)
    job = wait(api, job_id, quiet=out.machine, deadline=deadline)
    out.emit(job, explain)
    return Exit.OK if job.get("status") == "succeeded" else Exit.JOB_FAILED


def _follow_to_end(api: ApiClient, job_id: str, out: Output, deadline: Deadline) -> int:
    """``submit -f``: the job's logs until it ends, then its explanation and its exit code."""
    if not out.machine:
        click.echo(f"submitted {render.bold(job_id)}", err=True)
    _recorded(api, job_id, deadline)
    follow_log(api, job_id, [("follow", "true")], Printer(out), deadline)
    job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}")
    if out.machine:
        out.emit(job)
    else:
        click.echo(explain(job), err=True)
    return job_exit_code(job)


def job_exit_code(job: dict[str, Any]) -> int:
    """What ``submit -f`` exits with: 0 for a job that succeeded, the exit code of the process
    that ended a failed job (128 + N for signal N), else :data:`Exit.JOB_FAILED`."""
    if job.get("status") == "succeeded":
        return Exit.OK
    last = (job.get("attempts") or [{}])[-1]
    if job.get("status") == "failed":
        if last.get("exit_code"):
            return int(last["exit_code"]) & 0xFF or Exit.JOB_FAILED
        if last.get("signal"):
            return 128 + int(last["signal"])
    return Exit.JOB_FAILED


def _recorded(api: ApiClient, job_id: str, deadline: Deadline, within_s: float = 30.0) -> None:
    """Wait until the API knows the new job (the sink may lag the submit): its logs are a 404
    before."""
    began = time.monotonic()
    while True:
        try:
            api.get(f"/v1/jobs/{job_id}")
        except ApiError as exc:
            if exc.status != 404 or time.monotonic() - began > within_s:
                raise
        else:
            return
        deadline.check("not recorded", job_id)
        time.sleep(0.2)


def _dry_run_text(checked: dict[str, Any]) -> str:
    fit = checked["fit"]
    if checked["would"] == "queue":
        head = "valid; it would queue (nothing was recorded)"
    else:
        head = "valid, but it would be rejected: does_not_fit (nothing was recorded)"
    return f"{head}\n  {fit['explanation']}"


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
    api: ApiClient,
    job_id: str,
    *,
    quiet: bool = False,
    poll_s: float = 1.0,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """Poll until the job is terminal, printing each status change to stderr
    (with a live line of the current state and the time waited on a terminal);
    a TIMED_OUT error once ``deadline`` passed."""
    deadline = deadline or Deadline()
    last = None
    began = time.monotonic()
    with render.Progress(enabled=not quiet) as progress:
        while True:
            try:
                job = api.get(f"/v1/jobs/{job_id}")
            except ApiError as exc:
                # The sink may not have recorded a brand-new job yet.
                if exc.status != 404 or time.monotonic() - began > 30:
                    raise
                deadline.check("not recorded", job_id)
                time.sleep(poll_s)
                continue
            status = job["status"]
            elapsed = render.duration(time.monotonic() - began)
            if status != last:
                line = STATUS_LINES.get(status, status)
                progress.log(f"  [{elapsed:>7}] {render.status(status)}: {line}")
                last = status
            if status in TERMINAL_STATUSES:
                return job
            deadline.check(status, job_id)
            progress.update(f"{render.status(status)} for {job_id}, waited {elapsed}")
            time.sleep(poll_s)


# --------------------------------------------------------------------------- status

PAGE_MAX = 500
"""The API's largest page (``GET /v1/jobs?limit=``)."""


def _statuses(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    chosen = [s.strip() for v in value for s in v.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(JOB_STATUSES))
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; use {', '.join(JOB_STATUSES)}")
    return chosen


def _jobs_table(jobs: list[dict[str, Any]], clock: render.Clock, wide: bool = False) -> str:
    """The listing; ``wide`` (-o wide) adds GPUs, the last change, whose side and the summary."""
    headers = ["JOB", "STATUS", "NAME", "IMAGE", "ATT", clock.header("SUBMITTED"), "FAILURE"]
    if wide:
        headers += ["GPUS", clock.header("UPDATED"), "SIDE", "SUMMARY"]
    rows = []
    for j in jobs:
        row = [
            j["job_id"],
            render.status(j["status"]),
            j["name"],
            j["image"],
            j["attempt"],
            clock.format(j["submitted_at"]),
            j["failure_class"],
        ]
        if wide:
            row += [
                j.get("gpus"),
                clock.format(j.get("updated_at")),
                j.get("attribution"),
                j.get("summary"),
            ]
        rows.append(row)
    return render.table(headers, rows)


def _job_text(job: dict[str, Any], clock: render.Clock) -> str:
    lines = [
        f"{render.bold(job['job_id'])}  {render.status(job['status'])}"
        + (f"  (as of {clock.stamp(job['as_of'])})" if job.get("as_of") else ""),
        f"  {STATUS_LINES.get(job['status'], '')}",
    ]
    spec = job.get("spec") or {}
    lines.append(
        f"  image {spec.get('image', '')}, {spec.get('resources', {}).get('gpus', 0)} GPU(s)"
    )
    if job.get("submitted_at"):
        lines.append(f"  submitted {clock.stamp(job['submitted_at'])}")
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


@dataclass
class JobPage:
    """One page of the job listing, and where the next one starts."""

    jobs: list[dict[str, Any]]
    next_cursor: str | None
    """Where the listing continues; None when the last job was shown."""


def list_jobs(
    api: ApiClient,
    statuses: list[str],
    limit: int | None,
    cursor: str | None = None,
) -> JobPage:
    """Up to ``limit`` jobs (all with None), newest first, following the API's cursor."""
    jobs: list[dict[str, Any]] = []
    while True:
        want = PAGE_MAX if limit is None else min(PAGE_MAX, limit - len(jobs))
        query = [("limit", str(want))] + [("status", s) for s in statuses]
        if cursor:
            query.append(("cursor", cursor))
        page = api.get("/v1/jobs?" + urllib.parse.urlencode(query))
        jobs += page["jobs"]
        cursor = page.get("next_cursor")
        if not cursor or (limit is not None and len(jobs) >= limit):
            return JobPage(jobs, cursor)


def _more_hint(page: JobPage, statuses: list[str], limit: int) -> str:
    filters = f" --status {','.join(statuses)}" if statuses else ""
    return (
        f"showing the newest {len(page.jobs)} jobs; more exist. Next page: "
        f"gridledger status{filters} --limit {limit} --cursor {page.next_cursor}  "
        f"(or --all for every job)"
    )


@click.command("status")
@click.argument("job", required=False, shell_complete=complete_job)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    callback=_statuses,
    metavar="STATUS[,STATUS]",
    shell_complete=lambda ctx, param, incomplete: [
        s for s in JOB_STATUSES if s.startswith(incomplete)
    ],
    help="Only jobs in these states (repeat or comma-separate).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Jobs to list; when more exist, how to see them is printed on stderr.",
)
@click.option("--all", "every", is_flag=True, help="List every job (pages through all).")
@click.option("--cursor", metavar="CURSOR", help="Continue a listing where it stopped.")
@click.option(
    "-w", "--watch", is_flag=True, help="Keep watching: redraw on a terminal, else print changes."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    metavar="S",
    help="Seconds between refreshes of --watch.",
)
@as_of_option
@timeout_option
@api_options
@output_options
def status(
    conn: Connection,
    out: Output,
    job: str | None,
    statuses: list[str],
    limit: int,
    every: bool,
    cursor: str | None,
    watch: bool,
    interval: float,
    deadline: Deadline,
    as_of: str | None,
) -> int:
    """One job's state, attempts and failure; without JOB, your jobs, newest first.

    With --watch, a single job is watched until it ends (exit code as for
    `submit --wait`; 9 when --timeout passed first); a listing is watched until
    Ctrl-C or --timeout (exit 0). With -o json|yaml, --watch prints one document
    per change. With --as-of, the job as the ledger knew it then.
    """
    api = conn.client
    if as_of and (not job or watch):
        raise click.UsageError("--as-of takes one JOB, without --watch")
    if job:
        if watch:
            return watch_job(api, job, out, interval, deadline)
        out.emit(api.get(job_path(job, as_of=as_of)), lambda j: _job_text(j, out.clock))
        return 0
    if watch:
        return watch_jobs(api, out, statuses, None if every else limit, interval, deadline)
    page = list_jobs(api, statuses, None if every else limit, cursor)
    out.emit(
        page.jobs,
        lambda jobs: _jobs_table(jobs, out.clock),
        wide=lambda jobs: _jobs_table(jobs, out.clock, wide=True),
    )
    if page.next_cursor:
        click.echo(_more_hint(page, statuses, limit), err=True)
    return 0


def _change_line(job: dict[str, Any], clock: render.Clock) -> str:
    parts = [
        clock.format(utcnow(), "%H:%M:%S"),
        job["job_id"],
        render.status(job["status"]),
        f"attempt {job.get('attempt') or 0}",
    ]
    if job.get("failure_class"):
        parts.append(job["failure_class"])
    return "  ".join(parts)


def _print_change(job: dict[str, Any], out: Output) -> None:
    click.echo(out.line(job) if out.machine else _change_line(job, out.clock))


def watch_job(api: ApiClient, job_id: str, out: Output, interval: float, deadline: Deadline) -> int:
    """Follow one job until it ends; exit 0 only if it succeeded."""
    with render.Live(enabled=not out.machine) as live:
        seen: tuple[Any, ...] | None = None
        while True:
            job = api.get(f"/v1/jobs/{job_id}")
            key = (job["status"], job.get("attempt"), len(job.get("attempts") or []))
            if live.on:
                live.show(_job_text(job, out.clock))
            elif key != seen:
                _print_change(_summary(job), out)
            seen = key
            if job["status"] in TERMINAL_STATUSES:
                return Exit.OK if job["status"] == "succeeded" else Exit.JOB_FAILED
            deadline.check(job["status"], job_id)
            time.sleep(interval)


def _summary(job: dict[str, Any]) -> dict[str, Any]:
    """The listing's fields of a job document, so both watches print the same lines."""
    failure = job.get("failure") or {}
    return {
        "job_id": job["job_id"],
        "status": job["status"],
        "attempt": job.get("attempt"),
        "name": job.get("name"),
        "failure_class": failure.get("failure_class"),
    }


def watch_jobs(
    api: ApiClient,
    out: Output,
    statuses: list[str],
    limit: int | None,
    interval: float,
    deadline: Deadline,
) -> int:
    """Redraw the listing (terminal) or print each job whose state changed, until Ctrl-C or
    the deadline (exit 0: a listing awaits nothing)."""
    seen: dict[str, tuple[Any, ...]] = {}
    with render.Live(enabled=not out.machine) as live:
        while True:
            page = list_jobs(api, statuses, limit)
            if live.on:
                live.show(_jobs_table(page.jobs, out.clock, wide=out.format == "wide"))
            else:
                for job in reversed(page.jobs):  # oldest first, as events happen
                    key = (job["status"], job.get("attempt"))
                    if seen.get(job["job_id"]) != key:
                        _print_change(job, out)
                        seen[job["job_id"]] = key
            if deadline.passed():
                return Exit.OK
            time.sleep(interval)


# --------------------------------------------------------------------------- explain, history


@click.command("explain")
@click.argument("job", shell_complete=complete_job)
@as_of_option
@api_options
@output_options
def explain_job(conn: Connection, out: Output, job: str, as_of: str | None) -> int:
    """What happened to JOB, why, whose side it is on and what to do next."""
    out.emit(conn.client.get(job_path(job, as_of=as_of)), explain)
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


def _history_table(events: list[dict[str, Any]], clock: render.Clock) -> str:
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
                clock.format(at, "%H:%M:%S.%f"),
                f"+{render.duration(delta)}" if delta is not None else "",
                render.duration(since),
                e["attempt"],
                render.bold(e["type"]),
                detail[:90],
            ]
        )
    headers = [clock.header("TIME"), "DELTA", "T+", "ATT", "EVENT", "DETAIL"]
    return render.table(headers, rows)


@click.command("history")
@click.argument("jobs", nargs=-1, metavar="[JOB]...", shell_complete=complete_job)
@click.option("--all", "every", is_flag=True, help="Every job of yours instead of JOB ids.")
@click.option(
    "--since",
    callback=moment,
    metavar="TIME",
    help="With --all: only jobs submitted since then (2026-12-01T14:05, 14:05, 2d).",
)
@api_options
@output_options
def history(
    conn: Connection, out: Output, jobs: tuple[str, ...], every: bool, since: str | None
) -> int:
    """Every event of JOB, with the time between them.

    With -o json or -o yaml: an export for auditors instead, complete and
    self-describing: every record of the job on job-events and meter-ticks in ledger
    order (topic, partition, offset, record time, Avro schema fingerprint, Avro bytes,
    decoded payload), each schema once, and the live views (job view, classification,
    decisions, accounting record). Several JOBs (or --all) make one file.
    `gridledger replay --file FILE` refolds it without the cluster.
    """
    if bool(jobs) == every:
        raise click.UsageError("give JOB ids or --all")
    if since and not every:
        raise click.UsageError("--since goes with --all")
    api = conn.client
    start = render.parse_time(since)
    ids = list(jobs) or [
        j["job_id"]
        for j in list_jobs(api, [], None).jobs
        if start is None or (render.parse_time(j.get("submitted_at")) or start) >= start
    ]
    if out.machine:
        from services.replay.export import merge

        out.emit(merge([api.get(job_path(j, "/export")) for j in ids]))
        return 0
    for job in ids:
        events = api.get(job_path(job, "/events"))["events"]
        if len(ids) > 1:
            click.echo(render.bold(job))
        out.emit(events, lambda e: _history_table(e, out.clock))
    return 0


# --------------------------------------------------------------------------- cancel


def default_stop_grace_s() -> float:
    """The agent's default stop grace; a node may be configured otherwise."""
    from services.agent.settings import AgentSettings

    return float(AgentSettings.model_fields["stop_grace_s"].default)


HOLDING = frozenset({"starting", "running", "lost_contact"})
"""States in which a container may be running, so a cancel waits for its stop."""


@click.command("cancel")
@click.argument("job", shell_complete=complete_job)
@click.option("--reason", default="", help="Recorded with the cancel.")
@click.option("--wait", "wait_end", is_flag=True, help="Wait until the job has ended.")
@timeout_option
@api_options
@output_options
def cancel(
    conn: Connection, out: Output, job: str, reason: str, wait_end: bool, deadline: Deadline
) -> int:
    """Cancel JOB: a queued job ends at once; a running one is stopped.

    A running container gets SIGTERM and the node's stop grace (GRIDLEDGER_AGENT_STOP_GRACE_S,
    10 s by default) to exit before SIGKILL; the job is cancelled once the node has released
    its GPUs. Exit 7 when the job had already ended.
    """
    api = conn.client
    current = api.get(f"/v1/jobs/{job}")
    body = json.dumps({"reason": reason}).encode()
    try:
        answer = api.post(f"/v1/jobs/{job}/cancel", body)
    except ApiError as exc:
        if exc.status == 409:
            raise CliError(str(exc), Exit.CONFLICT) from None
        raise
    running = current.get("status") in HOLDING
    grace = default_stop_grace_s()
    answer = {**answer, "was": current.get("status"), "stop_grace_s": grace}

    def text(_: Any) -> str:
        if running:
            return (
                f"cancel requested for {job} ({current['status']}): the container gets SIGTERM "
                f"and up to the node's stop grace ({grace:g} s by default) before "
                "SIGKILL; the job ends as cancelled once the node releases its GPUs"
                + ("" if wait_end else f" (`gridledger status {job} --watch` to follow)")
            )
        return f"cancel requested for {job} ({current.get('status')}): it ends without running"

    out.emit(answer, text)
    if not wait_end:
        return Exit.OK
    ended = wait(api, job, quiet=out.machine, deadline=deadline)
    if out.machine:
        click.echo(out.line(_summary(ended)))
    return Exit.OK if ended["status"] == "cancelled" else Exit.JOB_FAILED


COMMANDS = (submit, status, explain_job, history, cancel)
