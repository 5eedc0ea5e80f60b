"""What every benchmark shares: isolated settings, peak RSS, the machine, results."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import platform
import subprocess
import sys
import time
import types
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.clock import utcnow
from services.ledger.topics import delete_topics, ensure_topics
from services.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results"


def ratio(a: float, b: float) -> float | None:
    """``a / b`` to three decimals; None when ``b`` is 0 (a ratio against a baseline that did
    nothing)."""
    return round(a / b, 3) if b else None


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident set (VmHWM) of a live process in MiB; None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def self_peak_rss_mb() -> float:
    """This process's peak resident memory, in MiB."""
    return peak_rss_mb(os.getpid()) or 0.0


def deep_size(roots: Iterable[object]) -> int:
    """Bytes of ``roots`` and every object they reach, each counted once.

    Classes, modules and functions are shared by the whole process, not held by the
    roots, so the walk stops at them. ``sys.getsizeof`` per object: the allocator's
    own overhead is not included (RSS is a few percent higher).
    """
    shared = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
    seen: set[int] = set()
    total = 0
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, shared):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model and the versions that matter for the figures."""
    import aiokafka
    import asyncpg
    import fastavro
    import pydantic

    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "aiokafka": aiokafka.__version__,
        "fastavro": fastavro.__version__,
        "asyncpg": asyncpg.__version__,
        "pydantic": pydantic.__version__,
        "kafka": "3.9.1 (single KRaft broker on 127.0.0.1)",
        "postgres": _run(["psql", "--version"]),
        "docker": _run(["docker", "version", "--format", "{{.Server.Version}}"]),
    }


@dataclass
class Result:
    """One benchmark's figures; ``save`` writes ``<dir>/<name>.json``."""

    name: str
    quick: bool
    params: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    ratios: dict[str, Any] = field(default_factory=dict)
    targets: dict[str, Any] = field(default_factory=dict)
    peak_rss_mb: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    """Raw latency samples (seconds) for the plot; kept in the JSON."""
    started_at: str = field(default_factory=lambda: utcnow().isoformat())
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as the JSON file under bench/results holds it."""
        return {
            "name": self.name,
            "quick": self.quick,
            "started_at": self.started_at,
            "elapsed_s": round(self.elapsed_s, 2),
            "machine": machine(),
            "params": self.params,
            "figures": self.figures,
            "baseline": self.baseline,
            "ratios": self.ratios,
            "targets": self.targets,
            "peak_rss_mb": self.peak_rss_mb,
            "notes": self.notes,
            "samples": {k: [round(v, 6) for v in vs] for k, vs in self.samples.items()},
        }

    def save(self, directory: Path) -> Path:
        """Write the result as ``NAME.json`` in ``directory``; return the file."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    def lines(self) -> list[str]:
        """The result for people: parameters, figures, targets met or not."""
        out = [f"== {self.name}{' (quick)' if self.quick else ''}: {self.elapsed_s:.1f} s"]
        out += [f"  params   {json.dumps(self.params)}"]
        for label, block in (("", self.figures), ("baseline ", self.baseline)):
            for key, value in block.items():
                out.append(f"  {label}{key}: {_fmt(value)}")
        for key, value in self.ratios.items():
            out.append(f"  ratio {key}: {value}")
        for key, value in self.targets.items():
            out.append(f"  target {key}: {value}")
        if self.peak_rss_mb:
            rss = ", ".join(f"{k} {v:.0f} MiB" for k, v in self.peak_rss_mb.items() if v)
            out.append(f"  peak RSS: {rss}")
        out += [f"  note: {n}" for n in self.notes]
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, dict) and "p50" in value:
        unit = value.get("unit", "s")
        scale, shown = (1000, "ms") if unit == "s" else (1, unit)
        return (
            f"n={value['count']} mean={value['mean'] * scale:.1f}{shown}"
            f" p50={value['p50'] * scale:.1f}{shown} "
            f"p99={value['p99'] * scale:.1f}{shown} max={value['max'] * scale:.1f}{shown}"
        )
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3f}"
    return str(value)


def target(value: float, limit: float, *, at_least: bool) -> dict[str, Any]:
    """A target and whether ``value`` meets it (at least, or at most, ``limit``)."""
    met = value >= limit if at_least else value <= limit
    return {
        "value": round(value, 4),
        "limit": (">= " if at_least else "<= ") + str(limit),
        "met": met,
    }


def unique(kind: str = "bench") -> str:
    """A fresh name (topic prefix, schema) so that runs never see each other's data."""
    return f"{kind}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def isolated(settings: Settings, **overrides: Any) -> AsyncIterator[Settings]:
    """Settings with their own topic prefix (created, deleted afterwards) and Postgres schema."""
    tag = uuid.uuid4().hex[:8]
    scoped = settings.model_copy(
        update={
            "topic_prefix": f"bench-{tag}.",
            "pg_schema": f"bench_{tag}",
            "processors_app_id": f"bench-{tag}",
            **overrides,
        }
    )
    await ensure_topics(scoped)
    try:
        yield scoped
    finally:
        with contextlib.suppress(Exception):
            await delete_topics(scoped)
        with contextlib.suppress(Exception):
            from services.sink.db import drop_schema

            await drop_schema(scoped, scoped.pg_schema)
        import shutil

        # faust keeps a data folder per app under <home>/faust; remove ours.
        for path in (scoped.home / "faust").glob(f"bench-{tag}*-data"):
            shutil.rmtree(path, ignore_errors=True)


class Clock:
    """A monotonic stopwatch."""

    def __init__(self) -> None:
        self.began = time.perf_counter()

    @property
    def elapsed(self) -> float:
        """Seconds since the timer started."""
        return time.perf_counter() - self.began


async def gather_limited(coros: Iterable[Any], limit: int = 50) -> list[Any]:
    """Await ``coros`` with at most ``limit`` running at once; results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))
