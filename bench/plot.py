"""One PNG: launch and log latency distributions (empirical CDFs), from the saved JSON."""

from __future__ import annotations

import json
from pathlib import Path

SERIES = (
    ("launch", "submit_to_running", "gridledger submit -> running"),
    ("launch", "submit_to_terminal", "gridledger submit -> terminal"),
    ("launch", "docker_run", "bare docker run --rm (start -> exit)"),
    ("logs", "api_logs_f", "gridledger logs -f (print -> client)"),
    ("logs", "docker_logs_f", "docker logs -f (print -> client)"),
)


def plot(directory: Path) -> Path | None:
    """Write ``<directory>/latency.png``; None when neither launch nor logs results exist."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {}
    for name in ("launch", "logs"):
        path = directory / f"{name}.json"
        if path.is_file():
            data[name] = json.loads(path.read_text())
    if not data:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, name, title in (
        (axes[0], "launch", "Launch latency (no-op job)"),
        (axes[1], "logs", "Log latency (100 lines/s)"),
    ):
        doc = data.get(name)
        ax.set_title(title + ("" if doc is None else " - n per series in legend"))
        ax.set_xlabel("seconds" if name == "launch" else "milliseconds")
        ax.set_ylabel("fraction <= x")
        ax.grid(True, alpha=0.3)
        if doc is None:
            continue
        for bench, key, label in SERIES:
            values = sorted(doc.get("samples", {}).get(key, [])) if bench == name else []
            if not values:
                continue
            scale = 1.0 if name == "launch" else 1000.0
            xs = [v * scale for v in values]
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=f"{label} (n={len(xs)})")
        if name == "logs":
            ax.set_xscale("log")
        ax.legend(fontsize=8, loc="lower right")
    quick = any(d.get("quick") for d in data.values())
    fig.suptitle(
        "gridledger vs bare Docker on the same machine" + (" (quick run)" if quick else "")
    )
    fig.tight_layout()
    out = directory / "latency.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
