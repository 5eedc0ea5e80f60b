"""Latency statistics: one nearest-rank percentile for the simulator and the benchmarks.

The simulator's summary (``gridledger simulate``) and every benchmark's figures are
computed here, so a p99 means the same thing wherever it is printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summary(values: Sequence[float], unit: str = "s") -> dict[str, Any]:
    """count, p50, p90, p99, max, mean of a latency sample."""
    return {
        "unit": unit,
        "count": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values) if values else 0.0,
        "mean": sum(values) / len(values) if values else 0.0,
    }
