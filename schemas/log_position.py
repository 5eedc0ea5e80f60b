"""Where a reader of a job's log is: the last chunk it has of each attempt and stream.

Log chunks are numbered per attempt and stream from 0 with no gaps
(:class:`schemas.events.LogChunk`), so "every chunk after these" is exact. The API's
``after=`` query and ``gridledger logs -f`` resuming after a dropped connection speak
this one format: ``ATTEMPT:STREAM:SEQ`` items, comma-separated (``1:stdout:41,1:stderr:3``).
"""

from __future__ import annotations

import re

LogPosition = dict[tuple[int, str], int]
"""(attempt, stream) -> the seq of the last chunk the reader has."""

STREAMS = ("stdout", "stderr", "system")
MAX_ITEMS = 64
"""Items one position may hold (attempts times streams of any job the reader follows)."""

_ITEM = re.compile(r"(\d{1,5}):(stdout|stderr|system):(\d{1,9})")


def format_position(position: LogPosition) -> str:
    """The position as the ``after=`` text."""
    return ",".join(f"{a}:{s}:{q}" for (a, s), q in sorted(position.items()))


def parse_position(text: str) -> LogPosition:
    """The position ``text`` names; a ValueError saying which item is wrong and why."""
    items = [t for t in text.split(",") if t]
    if len(items) > MAX_ITEMS:
        raise ValueError(f"{len(items)} items; at most {MAX_ITEMS}")
    position: LogPosition = {}
    for item in items:
        match = _ITEM.fullmatch(item)
        if match is None:
            raise ValueError(
                f"{ascii(item)[:40]} is not ATTEMPT:STREAM:SEQ (e.g. 1:stdout:41; the stream "
                f"is one of {', '.join(STREAMS)})"
            )
        key = (int(match[1]), match[2])
        position[key] = max(position.get(key, -1), int(match[3]))
    return position


def advance(position: LogPosition, attempt: int, stream: str, seq: int) -> None:
    """Note that the reader has the chunk ``(attempt, stream, seq)``."""
    key = (attempt, stream)
    position[key] = max(position.get(key, -1), seq)


def has(position: LogPosition, attempt: int, stream: str, seq: int) -> bool:
    """Whether the reader already has the chunk (it is at or before the position)."""
    return seq <= position.get((attempt, stream), -1)
