"""``gridledger logs JOB [-f] [--attempt N]``: a job's output, after the fact or live."""

from __future__ import annotations

import sys

import click

from services.cli import render
from services.cli.options import Connection, api_options


@click.command("logs", short_help="a job's logs (-f follows until the job ends)")
@click.argument("job")
@click.option("-f", "--follow", is_flag=True, help="Stream until the job ends.")
@click.option("--attempt", type=click.IntRange(min=1), help="Only this attempt's output.")
@api_options
def logs(conn: Connection, job: str, follow: bool, attempt: int | None) -> int:
    """JOB's output: stdout to stdout, stderr to stderr."""
    query = "?format=ndjson" + ("&follow=true" if follow else "")
    if attempt is not None:
        query += f"&attempt={attempt}"
    for item in conn.client.stream(f"/v1/jobs/{job}/logs{query}"):
        if item.get("end"):
            if follow:
                click.echo(render.dim(f"[job {item.get('status')}]"), err=True)
            break
        if "data" not in item:
            continue  # keepalive
        out = sys.stderr if item["stream"] == "stderr" else sys.stdout
        out.write(item["data"])
        if item.get("truncated"):
            out.write("\n[gridledger: log quota reached; later output was dropped]\n")
        out.flush()
    return 0


COMMANDS = (logs,)
