"""``gridledger bench [NAME ...] [--quick]``: the benchmarks under ``bench/``.

The command lives here, in the dev-only package: the CLI finds it by name
(``services.cli.main.COMMANDS``) and imports nothing of the benchmarks until it runs.
"""

from __future__ import annotations

from pathlib import Path

import click

from bench import NAMES as BENCHMARKS


@click.command("bench")
@click.argument("names", nargs=-1, metavar="[NAME]...", type=click.Choice(BENCHMARKS))
@click.option("--quick", is_flag=True, help="Small sizes, seconds (CI).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Results folder.")
def bench(names: tuple[str, ...], quick: bool, out: Path | None) -> int:
    """Run benchmarks against the local stack (`gridledger dev up`).

    Each uses its own topics, Postgres schema and services; prints
    p50/p99/max/throughput and the same-run baseline ratio, saves JSON under
    bench/results/ (bench/results/quick/ with --quick). NAME is any of the
    benchmarks (default: all).
    """
    from bench.runner import run as run_benchmarks
    from services.settings import load_settings

    run_benchmarks(load_settings(), list(names or BENCHMARKS), quick, out)
    return 0


COMMANDS = (bench,)
