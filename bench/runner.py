"""``gridledger bench [NAME ...] [--quick]``: run benchmarks, print and save their figures."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import RESULTS, Result, machine
from schemas.errors import GridledgerError
from services.settings import Settings


def results_dir(quick: bool, out: Path | None = None) -> Path:
    """Where results are written: ``out``, else bench/results (quick runs in quick/)."""
    return out or (RESULTS / "quick" if quick else RESULTS)


def run(settings: Settings, names: list[str], quick: bool, out: Path | None = None) -> list[Result]:
    """Run each named benchmark in a fresh event loop; save ``<dir>/<name>.json``."""
    directory = results_dir(quick, out)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "machine.json").write_text(json.dumps(machine(), indent=1) + "\n")
    done: list[Result] = []
    if len(names) > 1:
        # One process per benchmark, so each one's peak RSS (VmHWM) is its own.
        for name in names:
            cmd = [
                sys.executable,
                "-m",
                "services.cli.main",
                "bench",
                name,
                "--out",
                str(directory),
                *(["--quick"] if quick else []),
            ]
            if subprocess.run(cmd, check=False).returncode != 0:
                raise GridledgerError(f"benchmark {name} failed (its output is above)")
        _plot(directory, names)
        return done
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        began = time.perf_counter()
        result: Result = asyncio.run(module.run(settings, quick))
        result.elapsed_s = time.perf_counter() - began
        path = result.save(directory)
        print("\n".join(result.lines()), flush=True)
        print(f"  saved {path}", flush=True)
        done.append(result)
    _plot(directory, names)
    return done


def _plot(directory: Path, names: list[str]) -> None:
    if {"launch", "logs"} & set(names):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install -e '.[bench]')")
            return
        from bench.plot import plot

        png = plot(directory)
        if png is not None:
            print(f"plot: {png}", flush=True)
