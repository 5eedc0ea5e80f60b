"""Entry point of the ``gridledger`` command (``[project.scripts]`` in pyproject.toml).

Each command group is a module with ``register(subparsers)`` that adds its
parser and sets ``handler`` (``args -> exit code``). To add a group, write the
module and list it in :data:`COMMAND_GROUPS`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from schemas.errors import GridledgerError
from services.cli import agent as agent_cli
from services.cli import dev

COMMAND_GROUPS = (dev,)


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


if __name__ == "__main__":
    sys.exit(main())
