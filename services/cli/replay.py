"""``gridledger replay --verify | --job JOB | --file FILE``: rebuild from the ledger, or
from an exported history without the cluster, and compare (auditors)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from services.cli import render
from services.cli.options import Output, output_options
from services.settings import load_settings


@click.command("replay")
@click.option("--verify", is_flag=True, help="Rebuild everything and compare.")
@click.option("--job", metavar="JOB", help="Print one job's rebuilt history and decisions.")
@click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False, allow_dash=True),
    metavar="FILE",
    help="Refold an export of `history JOB -o json` offline and compare with its views "
    "(- reads stdin).",
)
@click.option("--strict", is_flag=True, help="Decision drift also fails --verify.")
@click.option("--schema", help="Live read-model schema (default: settings.pg_schema).")
@click.option(
    "--catch-up",
    type=float,
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the sink to reach the ledger's end.",
)
@click.option("--keep-scratch", is_flag=True, help="Keep the scratch schema.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    metavar="N",
    help="Processes that rebuild the jobs, each on whole partitions (default: one per core).",
)
@output_options
def replay(
    out: Output,
    verify: bool,
    job: str | None,
    file: str | None,
    strict: bool,
    schema: str | None,
    catch_up: float,
    keep_scratch: bool,
    workers: int | None,
) -> int:
    """Rebuild projections from offset 0 and compare with the live tables.

    --verify and --job read Kafka and Postgres directly (not the API). --file
    needs neither: it refolds an exported history (state, classification,
    decisions, accounting) with the same code and compares with the views the
    file recorded. Exactly one of --verify, --job and --file; --verify and
    --file exit 1 on any difference.
    """
    if sum((verify, bool(job), file is not None)) != 1:
        raise click.UsageError("give exactly one of --verify, --job JOB and --file FILE")
    if file is not None:
        return _file(file, out)
    settings = load_settings()
    if job:
        return asyncio.run(_job(settings, job, out))
    from services.replay.verify import run

    report = run(
        settings,
        live_schema=schema,
        strict=strict,
        catch_up_s=catch_up,
        keep_scratch=keep_scratch,
        workers=workers,
    )
    lines = []
    for line in report.lines():
        if line in ("VERIFIED", "FAILED"):
            line = render.paint(line, "32" if report.ok else "31")
        lines.append(line)
    payload = {
        "ok": report.ok,
        "records": report.records,
        "jobs": report.jobs,
        "lag": report.lag,
        "table_counts": report.table_counts,
        "job_state_differences": report.job_state_differences,
        "decision_drift": len(report.drift),
        "lines": report.lines(),
    }
    out.emit(payload, lambda _: "\n".join(lines))
    return 0 if report.ok else 1


def _file(path: str, out: Output) -> int:
    from services.replay.offline import replay_document

    try:
        with click.open_file(path, "rb") as f:
            doc = json.load(f)
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.strerror}", param_hint="--file"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise click.BadParameter(f"{path} is not JSON: {exc}", param_hint="--file") from None
    report = replay_document(doc)
    lines = [
        render.paint(line, "32" if report.ok else "31") if line in ("EQUAL", "DIFFERENT") else line
        for line in report.lines()
    ]
    out.emit(report.to_json(), lambda _: "\n".join(lines))
    return 0 if report.ok else 1


async def _job(settings: Any, job_id: str, out: Output) -> int:
    from services.ledger.client import Ledger
    from services.replay.job import replay_job

    async with Ledger(settings, "replay") as ledger:
        result = await replay_job(ledger, job_id)
    if not result.history:
        click.echo(f"no events for {job_id} on {settings.topic('job-events')}", err=out.machine)
        return 1
    out.emit(result.to_json(), lambda _: "\n".join(result.lines()))
    return 0


COMMANDS = (replay,)
