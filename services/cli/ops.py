"""``gridledger run`` and ``gridledger health``: the supervised local set and its health.

The logic lives in :mod:`services.cli.fleet` (over :mod:`services.ops.supervisor` and
:mod:`services.ops.health`); this module only declares the commands.
"""

from __future__ import annotations

from pathlib import Path

import click

from services.cli.exits import Exit
from services.cli.options import Output, output_options
from services.ops.fleet import DEFAULT_FLEET
from services.settings import load_settings


@click.command("run")
@click.option(
    "--fleet",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=DEFAULT_FLEET,
    show_default="the package's services/ops/fleet.yaml",
    help="The fleet file: which services, with which flags.",
)
@click.option("--ready-timeout", type=float, default=120.0, show_default=True, metavar="S")
def run(fleet: Path, ready_timeout: float) -> int:
    """Run the services of a fleet file until Ctrl-C or SIGTERM.

    A crashed service is restarted with capped exponential backoff; each
    service's output goes to <home>/run/logs/<service>.log; `gridledger health`
    shows the set. On Ctrl-C or SIGTERM every process it started is stopped
    (SIGTERM, then SIGKILL after 10 s).
    """
    from services.cli.fleet import run_fleet
    from services.ops.logs import setup_logging

    settings = load_settings()
    setup_logging("supervisor", "INFO", settings.log_format)
    return run_fleet(settings, fleet, ready_timeout_s=ready_timeout)


@click.command("health")
@click.option("--url", "urls", multiple=True, metavar="NAME=URL", help="Also ask this ops server.")
@click.option(
    "--state",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A supervisor's state file (default: <home>/run/fleet.json).",
)
@click.option("--timeout", type=float, default=3.0, show_default=True, metavar="S")
@output_options
def health(out: Output, urls: tuple[str, ...], state: Path | None, timeout: float) -> int:
    """Ask every service's /healthz and /readyz; exit 1 if one is down or not ready.

    The services come from the supervisor's state file (`gridledger run`,
    `gridledger demo`) and from --url NAME=URL pairs.
    """
    from services.cli.fleet import render_report
    from services.ops.health import report

    data = report(load_settings().home, urls, timeout, state)
    out.emit(data, render_report)
    return Exit.OK if data["ready"] else Exit.JOB_FAILED  # "a check found a problem"


COMMANDS = (run, health)
