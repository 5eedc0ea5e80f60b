"""``gridledger bench [NAME ...] [--quick]``: the benchmarks under ``bench/``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

BENCHMARKS = ("scheduling", "replay", "sink", "pipeline", "launch", "logs")


def register(subparsers: Any) -> None:
    """Add the ``bench`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "bench",
        help="run benchmarks (launch, logs, pipeline, scheduling, replay, sink)",
        description="Runs against the local stack (`gridledger dev up`) with its own topics, "
        "Postgres schema and services; prints p50/p99/max/throughput and the same-run baseline "
        "ratio, saves JSON under bench/results/ (bench/results/quick/ with --quick).",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"any of {', '.join(BENCHMARKS)} (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds (CI)")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from bench.runner import run as run_benchmarks
    from services.settings import load_settings

    names = args.names or list(BENCHMARKS)
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        raise SystemExit(f"gridledger bench: unknown {unknown}; choose from {BENCHMARKS}")
    run_benchmarks(load_settings(), names, args.quick, args.out)
    return 0
