"""``gridledger usage [JOB]``: GPU time held, metered, billable and credited."""

from __future__ import annotations

from typing import Any

import click

from services.cli import render
from services.cli.options import (
    Connection,
    Output,
    api_options,
    complete_job,
    output_options,
)


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


@click.command("usage")
@click.argument("job", required=False, shell_complete=complete_job)
@api_options
@output_options
def usage(conn: Connection, out: Output, job: str | None) -> int:
    """JOB's accounting record per attempt; without JOB, every job's totals."""
    if job:
        out.emit(conn.client.get(f"/v1/jobs/{job}/accounting"), _record_text)
    else:
        out.emit(conn.client.get("/v1/accounting")["records"], _records_text)
    return 0


COMMANDS = (usage,)
