"""Terminal output: colours and rich tables on a tty, plain aligned text when piped (no ANSI).

Piped output keeps one row per line and columns separated by two spaces, so
``grep``/``awk`` and the tests read it; only a terminal gets rich's boxes and
column wrapping.
"""

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


def table(headers: list[str], rows: list[list[Any]], stream: TextIO | None = None) -> str:
    """Left-aligned columns; widths from the plain text (colour codes are not counted)."""
    cells = [[str(c) if c is not None else "" for c in row] for row in rows]
    if use_colour(stream):
        return _rich_table(headers, cells)
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


def _rich_table(headers: list[str], cells: list[list[str]]) -> str:
    """The same table drawn by rich for a terminal (cells keep their colours)."""
    import shutil
    from io import StringIO

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    grid = Table(*headers, box=None, header_style="bold", pad_edge=False)
    for row in cells:
        grid.add_row(*(Text.from_ansi(cell) for cell in row))
    buffer = StringIO()
    width = shutil.get_terminal_size().columns
    Console(file=buffer, force_terminal=True, width=width, highlight=False).print(grid)
    return buffer.getvalue().rstrip("\n")


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
