"""Entry point of the ``gridledger`` command (``[project.scripts]`` in pyproject.toml).

The command line is a click group whose commands are the rows of :data:`COMMANDS`
(name, module, help line); each command module exports ``COMMANDS`` (its click
commands and groups) and is imported only when one of them is used. See the
package docstring for how to add one.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from schemas.errors import GridledgerError
from services.cli.exits import Exit, exit_code_of, help_epilog
from services.ops.logs import log_fatal

COMMANDS: dict[str, tuple[str, str | None]] = {
    # name: (the module that defines it, the line `gridledger --help` shows; None: not listed).
    # A command lives in the package it belongs to: the demo's in services/demo, the
    # benchmarks' in bench/ (a dev extra), both above the CLI's client and rendering that
    # they use; the CLI names them here and imports neither (tests/test_import_rule.py).
    "submit": ("services.cli.jobs", "submit a job spec (YAML or JSON)"),
    "validate": ("services.cli.validate", "check a job spec offline, with the API's messages"),
    "status": ("services.cli.jobs", "a job's status, or your jobs (filters, --watch)"),
    "explain": ("services.cli.jobs", "what happened, why, whose side, what to do next"),
    "history": ("services.cli.jobs", "a job's events with the time between them"),
    "cancel": ("services.cli.jobs", "cancel a job"),
    "logs": ("services.cli.logs", "a job's logs (-f follows until the job ends)"),
    "usage": ("services.cli.usage", "GPU time by period and group, per job or per attempt"),
    "prices": (
        "services.cli.prices",
        "the price catalog: list, show --at, load FILE (operators)",
    ),
    "outputs": ("services.cli.artifacts", "a job's stored outputs and checkpoints"),
    "download": ("services.cli.artifacts", "fetch a job's outputs (or one PATH)"),
    "nodes": ("services.cli.nodes", "the fleet, with its inventory source"),
    "secret": ("services.cli.secrets", "your secrets: set, list, rm (values never shown)"),
    "webhooks": (
        "services.cli.webhooks",
        "your webhooks: add, list, rm, rotate, enable, deliveries (signed job events)",
    ),
    "demo": (
        "services.demo.command",
        "start the local stack and two agents, run one job per failure mode, print a table",
    ),
    "dev": ("services.cli.dev", "start, stop or inspect the local stack (Kafka, Postgres, S3 ...)"),
    "api": ("services.cli.services", "serve the HTTP API (default 127.0.0.1:8600)"),
    "sink": (
        "services.cli.services",
        "project the ledger into the Postgres read models (runs until Ctrl-C)",
    ),
    "scheduler": (
        "services.cli.scheduler",
        "run the scheduler (fleet view, pre-flight fit, placement, queue deadlines)",
    ),
    "processors": (
        "services.cli.processors",
        "run the stream processors (all in one worker, or --only some)",
    ),
    "agent": (
        "services.cli.agent",
        "run the node agent: take attempts placed on this node and run them in Docker",
    ),
    "replay": (
        "services.cli.replay",
        "rebuild projections from offset 0 and compare with the live tables (auditors)",
    ),
    "notary": (
        "services.cli.audit",
        "run the notary: Ed25519-signed seals over the ledger's partitions",
    ),
    "audit": ("services.cli.audit", "the notary's key, and checking the seals (audit verify)"),
    "bench": ("bench.command", "run benchmarks (the list: gridledger bench -h)"),
    "simulate": (
        "services.cli.simulate",
        "run simulated GPU nodes that speak the agent protocol, submit jobs, wait",
    ),
    "run": (
        "services.cli.ops",
        "run sink, api, scheduler, processors, webhooks and agents, supervised",
    ),
    "health": ("services.cli.ops", "each service's liveness, readiness, checks and lag"),
    "login": ("services.cli.auth", "save an API URL and token as a profile (checked first)"),
    "logout": ("services.cli.auth", "forget a profile's token"),
    "profiles": ("services.cli.auth", "the profiles of the config file (tokens masked)"),
    "tokens": ("services.cli.tokens", "issue, list and revoke API tokens (operators)"),
    "completion": (
        "services.cli.completion",
        "print the shell completion script (bash, zsh, fish)",
    ),
    "chaos": ("services.cli.chaos", "run the chaos suite on a private stack and report"),
    "chaos-simagents": ("services.cli.chaos", None),
}
"""Every command, by name. A command's module is imported only when the command runs or
its own help or completion is asked for, so ``gridledger --help`` and TAB completion of
command names import none of them (``tests/cli/test_lazy.py`` checks which modules load)."""

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LazyGroup(click.Group):
    """A click group whose commands are the rows of :data:`COMMANDS`, loaded on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, listed or not (click skips the hidden ones itself)."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, importing its module the first time; None for an unknown name."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module_name, short_help = COMMANDS[cmd_name]
            module = importlib.import_module(module_name)
            command = next(c for c in module.COMMANDS if c.name == cmd_name)
            command.short_help = short_help
            command.hidden = short_help is None
            self.add_command(command)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, from the table: no command module is imported."""
        rows = [(name, text) for name, (_, text) in sorted(COMMANDS.items()) if text]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        """Command names with their help line, from the table, then the group's options."""
        from click.shell_completion import CompletionItem

        items = [
            CompletionItem(name, help=text)
            for name, (_, text) in sorted(COMMANDS.items())
            if text and name.startswith(incomplete)
        ]
        return items + click.Command.shell_complete(self, ctx, incomplete)


def command(name: str) -> click.Command:
    """The command called ``name``, loaded (for tests and tools that inspect its options)."""
    found = cli.get_command(click.Context(cli), name)
    if found is None:
        raise KeyError(name)
    return found


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS, epilog=help_epilog())
@click.option(
    "--profile",
    metavar="NAME",
    help="Profile of ~/.config/gridledger/config.toml for every command (or $GRIDLEDGER_PROFILE).",
)
@click.version_option(
    package_name="gridledger", prog_name="gridledger", message="%(prog)s %(version)s"
)
def cli(profile: str | None) -> None:
    """Execution layer for containerised GPU jobs, built as an event-sourced ledger.

    Works from any folder once `gridledger login` has written the config file.
    Every command that prints a result takes -o table|wide|json|yaml|name|jsonpath=EXPR.
    """


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
