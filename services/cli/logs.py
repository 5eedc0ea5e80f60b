"""``gridledger logs JOB``: a job's output, after the fact or live, filtered on the server."""

from __future__ import annotations

import http.client
import sys
import time
import urllib.parse
from typing import Any, TextIO

import click

from schemas.log_position import LogPosition, advance, format_position, parse_position
from schemas.views import TERMINAL_STATUSES
from services.cli import render
from services.cli.client import ApiClient
from services.cli.exits import CliError, Exit
from services.cli.options import (
    Connection,
    Deadline,
    Output,
    api_options,
    complete_job,
    moment,
    output_options,
    timeout_option,
)

TRUNCATED = "\n[gridledger: log quota reached; later output was dropped]\n"


@click.command("logs")
@click.argument("job", shell_complete=complete_job)
@click.option("-f", "--follow", is_flag=True, help="Stream until the job ends.")
@click.option("--attempt", type=click.IntRange(min=1), help="Only this attempt's output.")
@click.option(
    "--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N lines (then follow)."
)
@click.option(
    "--since",
    metavar="DURATION|TIME",
    callback=moment,
    help="Only output read since then: 10m, 1h30m, 2d, 14:05, 2026-12-01T14:05[+01:00].",
)
@click.option(
    "--stream",
    type=click.Choice(["stdout", "stderr", "system"]),
    help="Only this stream (system: gridledger's own notes).",
)
@click.option(
    "-t", "--timestamps", is_flag=True, help="Prefix each line with the time it was read."
)
@timeout_option
@output_options
@api_options
def logs(
    conn: Connection,
    out: Output,
    job: str,
    follow: bool,
    attempt: int | None,
    tail: int | None,
    since: str | None,
    stream: str | None,
    timestamps: bool,
    deadline: Deadline,
) -> int:
    """JOB's output: stdout to stdout, stderr to stderr.

    The filters run on the server, for a follow too. With -o json|yaml each
    chunk is one document (attempt, stream, seq, first_line, occurred_at, data).
    --timestamps shows when the agent read each chunk of output (lines read
    together share a time). Exit 4 for an unknown job or an attempt it does
    not have; with -f and --timeout, exit 9 once it passed (within the API's
    15 s keepalive) while the job goes on. A dropped connection is resumed
    after the last line received of each attempt and stream, with no gap and
    no repeat; after 2 minutes without an answer (or --timeout) it gives up
    (exit 5, or 9).
    """
    api = conn.client
    if attempt is not None:
        _check_attempt(api.get(f"/v1/jobs/{job}"), attempt, follow)
    query: list[tuple[str, str]] = []
    for name, value in (
        ("follow", "true" if follow else None),
        ("attempt", attempt),
        ("stream", stream),
        ("since", since),
        ("tail", tail),
    ):
        if value is not None:
            query.append((name, str(value)))
    status = follow_log(api, job, query, Printer(out, timestamps), deadline)
    if follow and not out.machine:
        click.echo(render.dim(f"[job {status}]"), err=True)
    return Exit.OK


RECONNECT_FOR_S = 120.0
"""How long a log stream whose connection dropped tries to reconnect (without --timeout)."""
_DROPPED = (OSError, http.client.HTTPException, ValueError)
"""What reading a stream raises when its connection drops mid-way (a reset, a chunk cut
short, half a JSON line); a timeout is an OSError too, and checked first."""


def follow_log(
    api: ApiClient,
    job: str,
    query: list[tuple[str, str]],
    printer: Printer,
    deadline: Deadline,
) -> str | None:
    """Print the job's log from ``GET /v1/jobs/JOB/logs`` (NDJSON) until its end line; the job's
    status then. A dropped connection is resumed after the last chunk printed of each attempt
    and stream (``after=``, without ``tail``, which the first answer applied): no gap, no
    repeat. Gives up once ``deadline`` passed (TIMED_OUT) or after ``RECONNECT_FOR_S`` without
    a connection (API_UNREACHABLE)."""
    position: LogPosition = {}
    failing_since: float | None = None
    pause = 0.5
    first = True
    while True:
        params = [("format", "ndjson"), *query]
        if not first:
            params = [(k, v) for k, v in params if k != "tail"]
            params.append(("after", format_position(position)))
        url = f"/v1/jobs/{job}/logs?{urllib.parse.urlencode(params)}"
        try:
            for item in api.stream(url, timeout=deadline.remaining(3600.0)):
                failing_since, pause, first = None, 0.5, False
                if item.get("end"):
                    return str(item.get("status"))
                if "skipped" in item:  # what --tail or --since left out: never asked for again
                    for (a, s), seq in parse_position(item["skipped"]).items():
                        advance(position, a, s, seq)
                elif "data" in item:  # else a keepalive
                    printer.chunk(item)
                    advance(position, item["attempt"], item["stream"], item["seq"])
                deadline.check("not ended", job)
            why = "the API ended the stream early"
        except TimeoutError:
            deadline.check("not ended", job)
            why = "the API sent nothing for an hour"
        except CliError as exc:  # an ApiError too: 502/503/504 are retried
            if exc.exit_code != Exit.API_UNREACHABLE:
                raise
            why = str(exc)
        except _DROPPED as exc:
            why = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if failing_since is None:
            failing_since = now
            click.echo(
                render.dim(f"[connection to the API lost ({why}); resuming where it stopped]"),
                err=True,
            )
        elif deadline.timeout_s is None and now - failing_since > RECONNECT_FOR_S:
            raise CliError(
                f"the log stream of {job} dropped and the API did not answer again for "
                f"{RECONNECT_FOR_S:g} s ({why}); `gridledger logs {job}` shows what is stored",
                Exit.API_UNREACHABLE,
            )
        deadline.check("not ended", job)
        time.sleep(min(pause, deadline.remaining(pause)))
        pause = min(pause * 2, 5.0)


def _check_attempt(doc: dict[str, Any], attempt: int, follow: bool) -> None:
    """An attempt the job does not have (and, when following, will not have) is an error."""
    attempts = [a["attempt"] for a in doc.get("attempts") or []]
    if attempt in attempts or (follow and doc["status"] not in TERMINAL_STATUSES):
        return
    has = f"attempt(s) {', '.join(map(str, attempts))}" if attempts else "no attempt"
    raise CliError(
        f"job {doc['job_id']} ({doc['status']}) has {has}; there is no attempt {attempt}"
        + (f" (see `gridledger history {doc['job_id']}`)" if attempts else ""),
        Exit.NOT_FOUND,
    )


class Printer:
    """Writes chunks as they come: raw text per stream, or one document per chunk."""

    def __init__(self, out: Output, timestamps: bool = False) -> None:
        self.out = out
        self.timestamps = timestamps
        self.at_line_start: dict[str, bool] = {}

    def chunk(self, item: dict[str, Any]) -> None:
        """Print one chunk of the NDJSON log stream."""
        if self.out.machine:
            click.echo(self.out.line(item))
            return
        target: TextIO = sys.stderr if item["stream"] == "stderr" else sys.stdout
        text = item["data"]
        if self.timestamps:
            text = self._stamped(item, text)
        target.write(text)
        if item.get("truncated"):
            target.write(TRUNCATED)
        target.flush()

    def _stamped(self, item: dict[str, Any], text: str) -> str:
        """Prefix every line that starts in this chunk (a chunk may continue a line)."""
        clock = self.out.clock
        stamp = f"{clock.format(item.get('occurred_at'), '%Y-%m-%d %H:%M:%S.%f')} "
        stamp += f"{clock.zone_of(item.get('occurred_at'))} "
        fresh = self.at_line_start.get(item["stream"], True)
        lines = text.split("\n")
        last = len(lines) - 1
        stamped = [
            line if (i == 0 and not fresh) or (i == last and not line) else stamp + line
            for i, line in enumerate(lines)
        ]
        self.at_line_start[item["stream"]] = text.endswith("\n")
        return "\n".join(stamped)


COMMANDS = (logs,)
