"""Entry point of the ``gridledger`` command (``[project.scripts]`` in pyproject.toml).

The command line is a click group; every command module exports ``COMMANDS``
(its click commands and groups) and is listed once in :data:`COMMAND_MODULES`.
See the package docstring for how to add one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType

import click

from schemas.errors import GridledgerError
from services.cli import agent as agent_cli
from services.cli import artifacts as artifacts_cli
from services.cli import auth as auth_cli
from services.cli import bench as bench_cli
from services.cli import chaos as chaos_cli
from services.cli import completion as completion_cli
from services.cli import demo as demo_cli
from services.cli import dev as dev_cli
from services.cli import jobs as jobs_cli
from services.cli import logs as logs_cli
from services.cli import nodes as nodes_cli
from services.cli import ops as ops_cli
from services.cli import processors as processors_cli
from services.cli import replay as replay_cli
from services.cli import scheduler as scheduler_cli
from services.cli import services as services_cli
from services.cli import simulate as simulate_cli
from services.cli import usage as usage_cli
from services.cli.exits import Exit, exit_code_of, help_epilog
from services.ops.logs import log_fatal

COMMAND_MODULES: tuple[ModuleType, ...] = (
    jobs_cli,
    logs_cli,
    usage_cli,
    artifacts_cli,
    nodes_cli,
    demo_cli,
    dev_cli,
    services_cli,
    scheduler_cli,
    processors_cli,
    agent_cli,
    replay_cli,
    bench_cli,
    simulate_cli,
    ops_cli,
    auth_cli,
    completion_cli,
    chaos_cli,
)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS, epilog=help_epilog())
@click.option(
    "--profile",
    metavar="NAME",
    help="Profile of ~/.config/gridledger/config.toml for every command (or $GRIDLEDGER_PROFILE).",
)
def cli(profile: str | None) -> None:
    """Execution layer for containerised GPU jobs, built as an event-sourced ledger.

    Works from any folder once `gridledger login` has written the config file.
    Every command that prints a result takes -o json|yaml|table.
    """


for _module in COMMAND_MODULES:
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen command and return its exit code.

    Errors gridledger raises on purpose are printed as one message (they say
    what to do); anything else is a bug and keeps its traceback.
    """
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="gridledger",
            standalone_mode=False,
        )
    except click.exceptions.Abort:
        return Exit.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except GridledgerError as exc:
        log_fatal(exc)  # a service: also in its log, with the job/event it was handling
        click.echo(f"gridledger: error: {exc}", err=True)
        return exit_code_of(exc)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`gridledger status --json | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if not log_fatal(exc):  # a CLI command's bug keeps its traceback on stderr
            raise
        return Exit.ERROR  # a service's: the traceback is in its log line
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
