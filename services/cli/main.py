"""Entry point of the ``gridledger`` command (``[project.scripts]`` in pyproject.toml).

Each command group is a module with ``register(subparsers)`` that adds its
parser and sets ``handler`` (``args -> exit code``). To add a group, write the
module and list it in :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from schemas.errors import GridledgerError
from services.cli import agent as agent_cli
from services.cli import bench as bench_cli
from services.cli import demo as demo_cli
from services.cli import dev
from services.cli import jobs as jobs_cli
from services.cli import processors as processors_cli
from services.cli import replay as replay_cli
from services.cli import scheduler as scheduler_cli
from services.cli import services as services_cli
from services.cli import simulate as simulate_cli

COMMAND_GROUPS = (
    demo_cli,
    dev,
    scheduler_cli,
    processors_cli,
    jobs_cli,
    services_cli,
    replay_cli,
    agent_cli,
    bench_cli,
    simulate_cli,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gridledger",
        description="Execution layer for containerised GPU jobs, built as an event-sourced ledger.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in COMMAND_GROUPS:
        group.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the chosen command and return its exit code.

    Errors gridledger raises on purpose are printed as one message (they say
    what to do); anything else is a bug and keeps its traceback.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except GridledgerError as exc:
        print(f"gridledger: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gridledger status --json | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
