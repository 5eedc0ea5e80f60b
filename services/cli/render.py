"""Terminal output: colours and rich tables on a tty, plain aligned text when piped (no ANSI).

Piped output keeps one row per line and columns separated by two spaces, so
``grep``/``awk`` and the tests read it; only a terminal gets rich's boxes and
column wrapping.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from services.clock import utcnow

STATUS_COLOURS = {
    "succeeded": "32",
    "succeeded_with_errors": "33",
    "failed": "31",
    "rejected": "31",
    "cancelled": "35",
    "lost_contact": "33",
    "retrying": "33",
    "running": "36",
    "silent": "33",
}


def use_colour(stream: TextIO | None = None) -> bool:
    """Colour only on a terminal, never with NO_COLOR or TERM=dumb (piped output stays plain)."""
    stream = stream or sys.stdout
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def paint(text: str, code: str, stream: TextIO | None = None) -> str:
    """``text`` in the ANSI style ``code`` when colour is in use, else as it is."""
    return f"\x1b[{code}m{text}\x1b[0m" if code and use_colour(stream) else text


def status(text: str) -> str:
    """A job status in its colour (green succeeded, red failed or rejected ...)."""
    return paint(text, STATUS_COLOURS.get(text, "1"))


def bold(text: str) -> str:
    """Bold when colour is in use."""
    return paint(text, "1")


def dim(text: str) -> str:
    """Dimmed when colour is in use: for what matters less than its neighbours."""
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
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601); one without a zone is UTC, as every API time is."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Clock:
    """Shows API times (UTC) in local time, honouring TZ, or in UTC with ``--utc``.

    Tables name the zone once, in the column header (``SUBMITTED (CET)``);
    single values carry it (``2026-12-01 10:34:05 CET``).
    """

    def __init__(self, utc: bool = False) -> None:
        self.utc = utc
        if not utc:
            time.tzset()  # TZ may have changed since the interpreter started

    def local(self, when: datetime) -> datetime:
        """``when`` in the zone this clock shows."""
        return when.astimezone(UTC) if self.utc else when.astimezone()

    @property
    def zone(self) -> str:
        """The zone's name, for column headers."""
        return self.local(utcnow()).tzname() or "UTC"

    def header(self, name: str) -> str:
        """A column header naming the zone, so the cells need not repeat it."""
        return f"{name} ({self.zone})"

    def format(self, value: str | datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
        """``value`` in the chosen zone; the zone is not repeated (see :meth:`header`)."""
        when = parse_time(value) if isinstance(value, str) else value
        if when is None:
            return ""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        text = self.local(when).strftime(fmt)
        # Milliseconds: strftime has only microseconds.
        return text[:-3] if fmt.endswith("%f") else text

    def stamp(self, value: str | datetime | None) -> str:
        """A single time with its zone: ``2026-12-01 10:34:05 CET``."""
        text = self.format(value)
        return f"{text} {self.zone_of(value)}" if text else ""

    def zone_of(self, value: str | datetime | None) -> str:
        """The zone name of one moment (local time can change zone across a DST change)."""
        when = parse_time(value) if isinstance(value, str) else value
        return (self.local(when).tzname() if when else None) or self.zone


def duration(seconds: float | None) -> str:
    """A duration for people: ms under a second, then s, m and s, h and m."""
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
    """GPU-seconds as GPU-hours, to three decimals."""
    return f"{(seconds or 0) / 3600:.3f}"


class Live:
    """A display redrawn in place on a terminal (rich); inactive when piped or not enabled.

    Callers print change lines themselves when ``on`` is false, so a pipe gets
    a log of changes instead of screens of redraws.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.on = enabled and sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
        self._live: Any = None

    def __enter__(self) -> Live:
        if self.on:
            from rich.console import Console
            from rich.live import Live as RichLive

            self._live = RichLive(console=Console(highlight=False), auto_refresh=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def show(self, text: str) -> None:
        """Redraw the display with ``text`` (ANSI colours kept)."""
        from rich.text import Text

        self._live.update(Text.from_ansi(text), refresh=True)


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float | None:
    """Seconds of ``90s``, ``10m``, ``1h30m``, ``2d``; None when ``text`` is not one."""
    text = text.strip()
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))


def parse_since(text: str, clock: Clock, now: datetime | None = None) -> datetime:
    """A point in time from a duration ago (``10m``), a time today (``14:05``) or a date-time
    (``2026-12-01T14:05``, ``2026-12-01 14:05:00+01:00``); times without a zone are in the
    clock's zone (local, or UTC with --utc). Raises ValueError saying what is accepted."""
    now = now or utcnow()
    seconds = parse_duration(text)
    if seconds is not None:
        return now - timedelta(seconds=seconds)
    local_now = clock.local(now)
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text.strip()):
            parts = [int(p) for p in text.strip().split(":")]
            when = local_now.replace(
                hour=parts[0],
                minute=parts[1],
                second=parts[2] if len(parts) > 2 else 0,
                microsecond=0,
            )
        else:
            when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (90s, 10m, 1h30m, 2d) nor a time "
            "(14:05, 2026-12-01T14:05, with an optional zone such as +01:00 or Z)"
        ) from None
    if when.tzinfo is None:
        # A naive time's astimezone() reads it as local time, with that date's DST.
        when = when.replace(tzinfo=UTC) if clock.utc else when.astimezone()
    return when.astimezone(UTC)


class Progress:
    """Progress of a wait on stderr: change lines, and on a terminal a live spinner line
    with the current state and the time waited (rich), so a long wait visibly moves."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.live = enabled and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self._console: Any = None
        self._status: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
            self._status = self._console.status("waiting")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)

    def log(self, line: str) -> None:
        """Print a line above the live status line, when the display is enabled."""
        if not self.enabled:
            return
        if self._console is not None:
            from rich.text import Text

            self._console.print(Text.from_ansi(line))
        else:
            print(line, file=sys.stderr, flush=True)

    def update(self, line: str) -> None:
        """Replace the live status line."""
        if self._status is not None:
            from rich.text import Text

            self._status.update(Text.from_ansi(line))
