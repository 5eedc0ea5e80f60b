"""Terminal output: colours and tables on a tty, plain text when piped (no ANSI)."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any, TextIO

STATUS_COLOURS = {
    "succeeded": "32",
    "succeeded_with_errors": "33",
    "failed": "31",
    "rejected": "31",
    "cancelled": "35",
    "lost_contact": "33",
    "retrying": "33",
    "running": "36",
}


def use_colour(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def paint(text: str, code: str, stream: TextIO | None = None) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if code and use_colour(stream) else text


def status(text: str) -> str:
    return paint(text, STATUS_COLOURS.get(text, "1"))


def bold(text: str) -> str:
    return paint(text, "1")


def dim(text: str) -> str:
    return paint(text, "2")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Left-aligned columns; widths from the plain text (colour codes are not counted)."""
    cells = [[str(c) if c is not None else "" for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(_strip(cell)))
    lines = ["  ".join(bold(h.ljust(w)) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append(
            "  ".join(
                c + " " * (w - len(_strip(c))) for c, w in zip(row, widths, strict=True)
            ).rstrip()
        )
    return "\n".join(lines)


def _strip(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def gpu_hours(seconds: float | None) -> str:
    return f"{(seconds or 0) / 3600:.3f}"
