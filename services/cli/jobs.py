"""Job commands: submit, status, logs, explain, history, cancel, usage, nodes (over the API)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from schemas.views import TERMINAL_STATUSES
from services.cli import render
from services.cli.client import ApiClient, ApiError, base_url, resolve_token
from services.cli.explain import STATUS_LINES, explain
from services.settings import load_settings


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--token", help="API token (default: $GRIDLEDGER_TOKEN, dev tokens file)")
    parent.add_argument("--api", help="API base URL (default: $GRIDLEDGER_API_URL or settings)")
    return parent


def register(subparsers: Any) -> None:
    """Add the job commands to the top-level parser."""
    common = _common()
    p = subparsers.add_parser("submit", parents=[common], help="submit a job spec (YAML or JSON)")
    p.add_argument("file", help="job spec file, or - for stdin")
    p.add_argument(
        "--wait", action="store_true", help="wait until the job ends; exit 0 if it succeeded"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--idempotency-key", help="submitting again with the same key returns the same job"
    )
    p.set_defaults(handler=run_submit)
    p = subparsers.add_parser("status", parents=[common], help="a job's status, or your jobs")
    p.add_argument("job", nargs="?", help="job id (omit to list your jobs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_status)
    p = subparsers.add_parser("logs", parents=[common], help="a job's logs")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="stream until the job ends")
    p.add_argument("--attempt", type=int)
    p.set_defaults(handler=run_logs)
    p = subparsers.add_parser("explain", parents=[common], help="what happened and what to do next")
    p.add_argument("job")
    p.set_defaults(handler=run_explain)
    p = subparsers.add_parser("history", parents=[common], help="a job's events with durations")
    p.add_argument("job")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_history)
    p = subparsers.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job")
    p.add_argument("--reason", default="")
    p.set_defaults(handler=run_cancel)
    p = subparsers.add_parser("usage", parents=[common], help="GPU time held, billable, credited")
    p.add_argument("job", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_usage)
    p = subparsers.add_parser("nodes", parents=[common], help="the fleet")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run_nodes)


def client(args: argparse.Namespace) -> ApiClient:
    settings = load_settings()
    return ApiClient(base_url(settings, args.api), resolve_token(settings, args.token))


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


# --------------------------------------------------------------------------- submit


def _content_type(path: str, body: bytes) -> str:
    if path.endswith((".yaml", ".yml")):
        return "application/yaml"
    if path.endswith(".json") or body.lstrip().startswith(b"{"):
        return "application/json"
    return "application/yaml"


def run_submit(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    api = client(args)
    try:
        created = api.post(
            "/v1/jobs", body, _content_type(args.file, body), idempotency_key=args.idempotency_key
        )
    except ApiError as exc:
        if exc.status in (400, 413, 422) and isinstance(exc.body, dict):
            if args.json:
                _print_json(exc.body)
            else:
                print(f"{args.file}: the spec was not accepted:", file=sys.stderr)
                for p in exc.body.get("problems", []):
                    print(f"  {p['field']}: {p['problem']}\n    fix: {p['fix']}", file=sys.stderr)
            return 2
        raise
    job_id = created["job_id"]
    if not args.wait:
        # The pre-flight fit runs within milliseconds of the submit: wait for it briefly so
        # an impossible job is reported here, with its numbers, not on a later status call.
        job = _past_preflight(api, job_id)
        if job is not None and job.get("status") == "rejected":
            if args.json:
                _print_json(job)
            else:
                print(explain(job), file=sys.stderr)
            return 1
        _print_json(created) if args.json else print(job_id)
        return 0
    if not args.json:
        print(f"submitted {render.bold(job_id)}", file=sys.stderr)
    job = wait(api, job_id, quiet=args.json)
    if args.json:
        _print_json(job)
    else:
        print(explain(job))
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


# --------------------------------------------------------------------------- queries


def run_status(args: argparse.Namespace) -> int:
    api = client(args)
    if not args.job:
        jobs = api.get("/v1/jobs")["jobs"]
        if args.json:
            _print_json(jobs)
            return 0
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
        print(render.table(["JOB", "STATUS", "NAME", "IMAGE", "ATT", "SUBMITTED", "FAILURE"], rows))
        return 0
    job = api.get(f"/v1/jobs/{args.job}")
    if args.json:
        _print_json(job)
        return 0
    print(f"{render.bold(job['job_id'])}  {render.status(job['status'])}")
    print(f"  {STATUS_LINES.get(job['status'], '')}")
    spec = job.get("spec") or {}
    print(f"  image {spec.get('image', '')}, {spec.get('resources', {}).get('gpus', 0)} GPU(s)")
    for a in job.get("attempts") or []:
        print(f"  attempt {a['attempt']}: {a['status']} {a.get('node_id') or ''}".rstrip())
    failure = job.get("failure")
    if failure:
        print(
            f"  {render.bold(failure['failure_class'])} ({failure['attribution']}): "
            f"{failure['summary']}"
        )
        print(f"  next: {failure['advice']}")
    acc = job.get("accounting")
    if acc:
        print(
            f"  GPU-seconds: {acc['gpu_seconds']:.1f} held, {acc['billable_gpu_seconds']:.1f} "
            f"billable, {acc['credited_gpu_seconds']:.1f} credited"
        )
    return 0


def run_logs(args: argparse.Namespace) -> int:
    api = client(args)
    query = "?format=ndjson" + ("&follow=true" if args.follow else "")
    if args.attempt is not None:
        query += f"&attempt={args.attempt}"
    for item in api.stream(f"/v1/jobs/{args.job}/logs{query}"):
        if item.get("end"):
            if args.follow:
                print(render.dim(f"[job {item.get('status')}]"), file=sys.stderr)
            break
        if "data" not in item:
            continue  # keepalive
        out = sys.stderr if item["stream"] == "stderr" else sys.stdout
        out.write(item["data"])
        if item.get("truncated"):
            out.write("\n[gridledger: log quota reached; later output was dropped]\n")
        out.flush()
    return 0


def run_explain(args: argparse.Namespace) -> int:
    print(explain(client(args).get(f"/v1/jobs/{args.job}")))
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


def run_history(args: argparse.Namespace) -> int:
    events = client(args).get(f"/v1/jobs/{args.job}/events")["events"]
    if args.json:
        _print_json(events)
        return 0
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
    print(render.table(["TIME", "DELTA", "T+", "ATT", "EVENT", "DETAIL"], rows))
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    body = json.dumps({"reason": args.reason}).encode()
    try:
        client(args).post(f"/v1/jobs/{args.job}/cancel", body)
    except ApiError as exc:
        if exc.status == 409:
            print(str(exc), file=sys.stderr)
            return 1
        raise
    print(f"cancel requested for {args.job}")
    return 0


def run_usage(args: argparse.Namespace) -> int:
    api = client(args)
    if args.job:
        record = api.get(f"/v1/jobs/{args.job}/accounting")
        if args.json:
            _print_json(record)
            return 0
        rows = [
            [
                a["attempt"],
                a.get("node_id", ""),
                f"{a.get('gpu_count', 0)}x {a.get('gpu_model', '')}",
                render.duration(a.get("held_seconds")),
                f"{a.get('gpu_seconds', 0):.1f}",
                f"{a.get('metered_gpu_seconds', 0):.1f}",
                a.get("attribution", ""),
                f"{a.get('billable_gpu_seconds', 0):.1f}",
                f"{a.get('credited_gpu_seconds', 0):.1f}",
            ]
            for a in record.get("attempts", [])
        ]
        print(
            f"{render.bold(record['job_id'])}  {render.status(record.get('status', ''))}"
            + ("" if record.get("final") else "  (not final)")
        )
        print(
            render.table(
                ["ATT", "NODE", "GPUS", "HELD", "GPU-S", "METERED", "SIDE", "BILLABLE", "CREDITED"],
                rows,
            )
        )
        return 0
    records = api.get("/v1/accounting")["records"]
    if args.json:
        _print_json(records)
        return 0
    rows = [
        [
            r["job_id"],
            render.status(r["status"]),
            "yes" if r["final"] else "no",
            f"{r['gpu_seconds']:.1f}",
            f"{r['billable_gpu_seconds']:.1f}",
            f"{r['credited_gpu_seconds']:.1f}",
        ]
        for r in records
    ]
    total_b = sum(r["billable_gpu_seconds"] for r in records)
    total_c = sum(r["credited_gpu_seconds"] for r in records)
    print(render.table(["JOB", "STATUS", "FINAL", "GPU-S", "BILLABLE", "CREDITED"], rows))
    print(
        f"total: {total_b:.1f} GPU-seconds billable ({render.gpu_hours(total_b)} GPU-hours), "
        f"{total_c:.1f} credited"
    )
    return 0


def run_nodes(args: argparse.Namespace) -> int:
    nodes = client(args).get("/v1/nodes")["nodes"]
    if args.json:
        _print_json(nodes)
        return 0
    rows = []
    for n in nodes:
        models = sorted({g["model"] for g in n["gpus"]})
        rows.append(
            [
                n["node_id"],
                n["status"],
                n["provider"],
                n["region"],
                f"{len(n['gpus'])}x {'/'.join(models)}",
                len(n["free_gpu_indices"]),
                len(n["running_attempts"]),
                (n["last_heartbeat_at"] or "")[:19],
                n["inventory_source"],
            ]
        )
    print(
        render.table(
            [
                "NODE",
                "STATUS",
                "PROVIDER",
                "REGION",
                "GPUS",
                "FREE",
                "RUNNING",
                "LAST HEARTBEAT",
                "INVENTORY",
            ],
            rows,
        )
    )
    return 0
