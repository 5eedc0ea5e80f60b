"""``gridledger usage [JOB]``: GPU time by period and group, every job's record, or one job's.

Without JOB it reads ``GET /v1/usage`` (or ``GET /v1/accounting`` with ``--records``)
page by page until the last, so the output holds every line, however many jobs.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import click

from services.cli import render
from services.cli.client import ApiClient
from services.cli.options import (
    Connection,
    Output,
    api_options,
    complete_job,
    rows_output_options,
)

_SUMS = ("held_us", "gpu_us", "metered_gpu_us", "billable_gpu_us", "credited_gpu_us")


def _record_text(record: dict[str, Any]) -> str:
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
    head = f"{render.bold(record['job_id'])}  {render.status(record.get('status', ''))}" + (
        "" if record.get("final") else "  (not final)"
    )
    headers = ["ATT", "NODE", "GPUS", "HELD", "GPU-S", "METERED", "SIDE", "BILLABLE", "CREDITED"]
    return head + "\n" + render.table(headers, rows)


def _records_text(records: list[dict[str, Any]]) -> str:
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
    return (
        render.table(["JOB", "STATUS", "FINAL", "GPU-S", "BILLABLE", "CREDITED"], rows)
        + f"\ntotal: {total_b:.1f} GPU-seconds billable ({render.gpu_hours(total_b)} GPU-hours), "
        f"{total_c:.1f} credited"
    )


def seconds(us: int) -> str:
    """Whole microseconds as exact decimal seconds (``90000001`` -> ``90.000001``)."""
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _lines_text(lines: list[dict[str, Any]], by: list[str]) -> str:
    rows = [
        [
            line["period_start"][: {"hour": 13, "day": 10, "month": 7}[line["period"]]],
            *(line["group"][d] or "-" for d in by),
            line["jobs"],
            seconds(line["gpu_us"]),
            seconds(line["metered_gpu_us"]),
            seconds(line["billable_gpu_us"]),
            seconds(line["credited_gpu_us"]),
            "yes" if line["final"] else "no",
        ]
        for line in lines
    ]
    headers = ["PERIOD (UTC)", *(d.upper() for d in by)]
    headers += ["JOBS", "GPU-S", "METERED", "BILLABLE", "CREDITED", "FINAL"]
    billable = sum(line["billable_gpu_us"] for line in lines)
    return (
        render.table(headers, rows) + f"\ntotal: {seconds(billable)} GPU-seconds billable "
        f"({render.gpu_hours(billable / 1e6)} GPU-hours), "
        f"{seconds(sum(line['credited_gpu_us'] for line in lines))} credited"
    )


def _line_row(line: dict[str, Any], by: list[str]) -> dict[str, Any]:
    return {
        "line_id": line["line_id"],
        "period": line["period"],
        "period_start": line["period_start"],
        "period_end": line["period_end"],
        **{d: line["group"][d] for d in by},
        "jobs": line["jobs"],
        **{c: line[c] for c in _SUMS},
        "final": line["final"],
    }


def _record_row(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "labels": json.dumps(r.get("labels", {}), sort_keys=True)}


def every_page(client: ApiClient, path: str, params: dict[str, Any], items: str) -> list[Any]:
    """Every item of a paged listing: follow ``next_cursor`` until it is null."""
    out: list[Any] = []
    query = {k: v for k, v in params.items() if v not in (None, "", [], ())}
    while True:
        page = client.get(f"{path}?{urlencode(query, doseq=True)}")
        out += page[items]
        if not page.get("next_cursor"):
            return out
        query["cursor"] = page["next_cursor"]


def _utc_time(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return render.parse_since(value, render.Clock(utc=True)).isoformat()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("usage", short_help="GPU time by period and group, per job or per attempt")
@click.argument("job", required=False, shell_complete=complete_job)
@click.option(
    "--period",
    type=click.Choice(["hour", "day", "month"]),
    default="day",
    show_default=True,
    help="UTC periods the usage is split and summed by.",
)
@click.option(
    "--by",
    "group_by",
    multiple=True,
    metavar="DIM",
    help="Group by tenant, gpu_model, provider, region or label:KEY (repeat or comma-separate).",
)
@click.option(
    "--since",
    metavar="TIME",
    callback=_utc_time,
    help="From this UTC time on (a period start, e.g. 2026-12-01 or 2026-12-01T14:00).",
)
@click.option(
    "--until",
    metavar="TIME",
    callback=_utc_time,
    help="Up to this UTC time, exclusive (a period start).",
)
@click.option(
    "--records",
    is_flag=True,
    help="Every job's accounting record instead (--since/--until on its latest event).",
)
@api_options
@rows_output_options
def usage(
    conn: Connection,
    out: Output,
    job: str | None,
    period: str,
    group_by: tuple[str, ...],
    since: str | None,
    until: str | None,
    records: bool,
) -> int:
    """Usage of every job, split exactly at UTC period boundaries and grouped by DIMs; with
    --records, every job's accounting record; with JOB, that job's record per attempt.

    Every page is read, however many jobs. Seconds are exact (whole microseconds);
    -o json and -o csv give them as integer microseconds (held_us, gpu_us,
    metered_gpu_us, billable_gpu_us, credited_gpu_us) with a deterministic line_id.
    """
    if job:
        record = conn.client.get(f"/v1/jobs/{job}/accounting")
        out.emit_rows(record, record.get("attempts", []), _record_text)
    elif records:
        found = every_page(
            conn.client,
            "/v1/accounting",
            {"limit": 5000, "since": since, "until": until},
            "records",
        )
        out.emit_rows(found, [_record_row(r) for r in found], _records_text)
    else:
        params = {"period": period, "by": list(group_by), "since": since, "until": until}
        lines = every_page(conn.client, "/v1/usage", {**params, "limit": 5000}, "lines")
        by = [d.strip() for v in group_by for d in v.split(",") if d.strip()]
        out.emit_rows(
            {"period": period, "by": by, "lines": lines},
            [_line_row(line, by) for line in lines],
            lambda _: _lines_text(lines, by),
        )
    return 0


COMMANDS = (usage,)
