"""``gridledger chaos [--quick]``: the whole system under real faults, with invariants."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from pathlib import Path

import click

from services.cli.options import Output, output_options


@click.command("chaos")
@click.option(
    "--quick",
    is_flag=True,
    help="The CI subset: a small workload and three fault kinds (a few minutes).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the JSON report here (default: <home>/chaos/report-<mode>.json).",
)
@click.option(
    "--fault",
    "only",
    multiple=True,
    help="Run only these faults (repeatable; names as in the report).",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="Jobs per phase instead of the mode's own (quick 40; full 400 and 150).",
)
@output_options
def chaos(
    out: Output, quick: bool, report_path: Path | None, only: tuple[str, ...], jobs: int | None
) -> int:
    """Faults on a private installation, then invariants over its whole ledger.

    Each phase starts a stack of its own (own home, free ports: the shared stack
    is never touched) with sink, api, scheduler, processors, two Docker agents
    and simulated agents, under a supervisor; concurrent submitters post jobs
    through the API while faults are injected one at a time and overlapping.
    After each fault and at the end it checks: nothing acknowledged lost, one
    terminal event per job within its bound, no meter tick counted twice,
    billable + credited = held, accounting final and reconciled, and `replay
    --verify` exit 0. Exit 0 only when all of that held.
    """
    from services.chaos import report as report_module
    from services.chaos.faults import FAULTS, OVERLAPS
    from services.chaos.harness import FULL, QUICK, PhaseConfig, run_suite
    from services.settings import load_settings

    phases: tuple[PhaseConfig, ...] = QUICK if quick else FULL
    if only:
        unknown = sorted(set(only) - set(FAULTS) - set(OVERLAPS))
        if unknown:
            names = ", ".join([*FAULTS, *OVERLAPS])
            raise click.BadParameter(f"unknown fault(s) {unknown}; choose from {names}")
        phases = tuple(
            dataclasses.replace(p, faults=tuple(f for f in p.faults if f in only)) for p in phases
        )
        phases = tuple(p for p in phases if p.faults)
    if jobs:
        phases = tuple(dataclasses.replace(p, jobs=jobs) for p in phases)
    settings = load_settings()
    say = (lambda line: None) if out.machine else click.echo
    # A SIGTERM unwinds like Ctrl-C, so the private stacks and services are stopped.
    signal.signal(signal.SIGTERM, _interrupted)
    result = asyncio.run(run_suite(settings, phases, say))
    path = report_path or settings.home / "chaos" / f"report-{'quick' if quick else 'full'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    out.emit(result, lambda data: "\n".join([*report_module.lines(data), f"report: {path}"]))
    return 0 if result["totals"]["ok"] else 1


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@click.command(
    "chaos-simagents",
    context_settings={"ignore_unknown_options": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def chaos_simagents(args: tuple[str, ...]) -> int:
    """The chaos suite's simulated agents as a supervised service (services.chaos.simagents)."""
    from services.chaos.simagents import main

    return main(list(args))


COMMANDS = (chaos, chaos_simagents)
