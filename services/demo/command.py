"""``gridledger demo``: bring up the local stack and show every failure mode end to end."""

from __future__ import annotations

import click

from services.settings import load_settings


@click.command("demo")
@click.option(
    "--keep-running",
    is_flag=True,
    help="Leave the services and agents running after the table (Ctrl-C stops them), "
    "to try submit/status/logs/explain against them.",
)
def demo(keep_running: bool) -> int:
    """Show every failure mode end to end on the local stack.

    Brings up Kafka, Postgres and Docker (`dev up`), runs the api, sink,
    scheduler, processors and two agents with declared GPU inventories,
    submits jobs covering the failure modes, follows one job's logs live and
    ends with a table read back from the API. Takes a few minutes on 2 cores.
    """
    from services.demo.run import main

    return main(load_settings(), keep_running=keep_running)


COMMANDS = (demo,)
