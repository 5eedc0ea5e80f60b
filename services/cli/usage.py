"""``gridledger usage [JOB]``: GPU time by period and group, every job's record, or one job's.

Without JOB it reads ``GET /v1/usage`` (or ``GET /v1/accounting`` with ``--records``)
page by page until the last, so the output holds every line, however many jobs.
"""

from __future__ import annotations

import functools
import json
import sys
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import click

from services.cli import render
from services.cli.client import ApiClient
from services.cli.options import (
    ROW_FORMATS,
    Connection,
    Output,
    api_options,
    complete_job,
    rows_output_options,
)

_SUMS = ("held_us", "gpu_us", "metered_gpu_us", "billable_gpu_us", "credited_gpu_us")
CLOUDEVENTS = "cloudevents"
CE_TYPE = "gridledger.UsageLine"
CE_SOURCE = "/gridledger/usage"


def _money_row(item: dict[str, Any]) -> dict[str, Any]:
    """The money columns of a line's or a record's row: costs as exact Decimals (a decimal
    column in Parquet, the same text in CSV), the versions space-separated."""
    return {
        "currency": item.get("currency", ""),
        "billable_cost": Decimal(item.get("billable_cost", "0")),
        "credited_cost": Decimal(item.get("credited_cost", "0")),
        "unpriced_gpu_us": item.get("unpriced_gpu_us", 0),
        "price_versions": " ".join(str(v) for v in item.get("price_versions", [])),
    }


def _cost(item: dict[str, Any]) -> str:
    """A line's or a record's billable cost as a table shows it: exact, with the currency."""
    cost = f"{item.get('billable_cost', '0')} {item.get('currency') or ''}".strip()
    return cost + (" +unpriced" if item.get("unpriced_gpu_us") else "")


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
    head += f"  cost {_cost(record)}, credited {record.get('credited_cost', '0')}"
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
            _cost(r),
        ]
        for r in records
    ]
    total_b = sum(r["billable_gpu_seconds"] for r in records)
    total_c = sum(r["credited_gpu_seconds"] for r in records)
    return (
        render.table(["JOB", "STATUS", "FINAL", "GPU-S", "BILLABLE", "CREDITED", "COST"], rows)
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
            _cost(line),
            "yes" if line["final"] else "no",
        ]
        for line in lines
    ]
    headers = ["PERIOD (UTC)", *(d.upper() for d in by)]
    headers += ["JOBS", "GPU-S", "METERED", "BILLABLE", "CREDITED", "COST", "FINAL"]
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
        **_money_row(line),
        "final": line["final"],
    }


def _record_row(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "labels": json.dumps(r.get("labels", {}), sort_keys=True), **_money_row(r)}


def cloud_event(line: dict[str, Any]) -> dict[str, Any]:
    """A final usage line as a CloudEvent (structured JSON) in the shape OpenMeter and Lago
    ingest: the line's id is the event's (a re-export de-duplicates), the tenant its subject,
    the period start its time; seconds as exact decimal text, money as the API gives it."""
    data = {
        "line_id": line["line_id"],
        "period": line["period"],
        "period_start": line["period_start"],
        "period_end": line["period_end"],
        "group": line["group"],
        "jobs": line["jobs"],
        **{c.removesuffix("_us") + "_seconds": seconds(line[c]) for c in _SUMS},
        **{c: line[c] for c in ("currency", "billable_cost", "credited_cost", "price_versions")},
        "unpriced_gpu_seconds": seconds(line.get("unpriced_gpu_us", 0)),
    }
    return {
        "specversion": "1.0",
        "id": line["line_id"],
        "source": CE_SOURCE,
        "type": CE_TYPE,
        "subject": line["group"]["tenant"],
        "time": line["period_start"],
        "datacontenttype": "application/json",
        "data": data,
    }


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
@functools.partial(rows_output_options, formats=(*ROW_FORMATS, CLOUDEVENTS))
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
    -o json, csv and parquet give them as integer microseconds (held_us, gpu_us,
    metered_gpu_us, billable_gpu_us, credited_gpu_us) with a deterministic line_id,
    and the money at the price catalog's prices (billable_cost, credited_cost: exact
    decimals; parquet writes a binary file to stdout). -o cloudevents prints one
    CloudEvent per final line (NDJSON, grouped by tenant too; the id is the line's):
    what OpenMeter and Lago ingest.
    """
    if out.format == CLOUDEVENTS and (job or records):
        raise click.UsageError("-o cloudevents exports usage lines: without JOB and --records")
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
        by = [d.strip() for v in group_by for d in v.split(",") if d.strip()]
        if out.format == CLOUDEVENTS and "tenant" not in by:
            by.insert(0, "tenant")  # the subject; and ids then differ between tenants
        params = {"period": period, "by": by, "since": since, "until": until}
        lines = every_page(conn.client, "/v1/usage", {**params, "limit": 5000}, "lines")
        if out.format == CLOUDEVENTS:
            final = [line for line in lines if line["final"]]
            for line in final:
                click.echo(json.dumps(cloud_event(line), sort_keys=True))
            if len(final) < len(lines):
                print(
                    f"{len(lines) - len(final)} line(s) not final yet left out (their jobs "
                    "still run or wait for their end): export them again once final",
                    file=sys.stderr,
                )
            return 0
        out.emit_rows(
            {"period": period, "by": by, "lines": lines},
            [_line_row(line, by) for line in lines],
            lambda _: _lines_text(lines, by),
        )
    return 0


COMMANDS = (usage,)
