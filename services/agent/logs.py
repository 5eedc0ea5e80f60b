"""Turn a container's stdout/stderr into LogChunk payloads: pure, thread-safe, no I/O.

Reader threads :meth:`LogPipeline.feed` raw bytes (docker frames with the
timestamp stripped); a task on the event loop calls :meth:`LogPipeline.tick`
about every ``flush_s`` and :meth:`LogPipeline.drain` to take finished chunks
in order. Rules:

* a chunk holds at most ``chunk_bytes`` of UTF-8 and is cut after the last
  complete line that fits; a line longer than a chunk is split into parts;
* ``seq`` counts chunks per attempt and stream from 0 with no gaps;
  ``first_line`` is the number (from 1) of the line the chunk's data starts in,
  ``line_count`` the lines it completes (its newlines), so the next chunk's
  ``first_line`` is ``first_line + line_count``;
* a per-attempt byte quota (both streams together) bounds what is kept; bytes
  past it are dropped and counted, and when the output ends one chunk on the
  ``system`` stream with ``truncated=True`` says how much was dropped;
* a :class:`LogState` (persisted by the agent) lets a restarted agent replay the
  container's log from the start and skip what was already emitted.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

STREAMS = ("stdout", "stderr")
SYSTEM = "system"

_TIMESTAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) ")


def strip_timestamp(frame: bytes) -> bytes:
    """Remove the RFC 3339 timestamp docker prefixes to each log frame (``timestamps=True``)."""
    match = _TIMESTAMP.match(frame)
    return frame[match.end() :] if match else frame


def human_bytes(count: int) -> str:
    """``10 MiB``, ``41.2 MiB``, ``512 KiB``, ``17 B``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} B"


class StreamCursor(BaseModel):
    """How far one stream has been emitted."""

    seq: int = 0
    """Seq of the next chunk."""
    line: int = 1
    """Number of the line the next emitted byte belongs to."""
    consumed: int = 0
    """Raw bytes of the stream emitted so far (skipped when the log is replayed)."""


class LogState(BaseModel):
    """Everything a restarted agent needs to continue an attempt's log without gaps."""

    stdout: StreamCursor = Field(default_factory=StreamCursor)
    stderr: StreamCursor = Field(default_factory=StreamCursor)
    system: StreamCursor = Field(default_factory=StreamCursor)
    quota_used: int = 0
    marker_emitted: bool = False

    def cursor(self, stream: str) -> StreamCursor:
        """The cursor of one stream."""
        return getattr(self, stream)


@dataclass(frozen=True)
class Chunk:
    """One LogChunk's payload and the state after it (to persist once it is spooled)."""

    stream: str
    seq: int
    first_line: int
    line_count: int
    data: str
    truncated: bool
    state: LogState = field(repr=False, compare=False)


def _utf8_boundary(data: bytes | bytearray, cut: int) -> int:
    """Move ``cut`` back so it does not fall inside a UTF-8 sequence (at most 3 bytes)."""
    if cut >= len(data):
        return len(data)
    back = cut
    for _ in range(3):
        if back > 0 and (data[back] & 0xC0) == 0x80:
            back -= 1
        else:
            break
    return back if back > 0 else cut


class LogPipeline:
    """Chunking and quota for one attempt's logs. Thread-safe."""

    def __init__(
        self,
        *,
        chunk_bytes: int = 64 * 1024,
        quota_bytes: int = 10 * 1024 * 1024,
        flush_s: float = 0.1,
        state: LogState | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chunk_bytes = chunk_bytes
        self.quota_bytes = quota_bytes
        self.flush_s = flush_s
        self._clock = clock
        self._state = (state or LogState()).model_copy(deep=True)
        self._skip = {s: self._state.cursor(s).consumed for s in STREAMS}
        self._pending = {s: bytearray() for s in STREAMS}
        self._since: dict[str, float | None] = {s: None for s in STREAMS}
        self._dropped = {s: 0 for s in STREAMS}
        self._outbox: list[Chunk] = []
        self._outbox_bytes = 0
        self._cond = threading.Condition()

    # ------------------------------------------------------------------ feeding (any thread)

    @property
    def exhausted(self) -> bool:
        """Whether the attempt's log quota is spent: everything after it is dropped, and said so."""
        return self._state.quota_used >= self.quota_bytes

    @property
    def dropped(self) -> dict[str, int]:
        """Bytes dropped per stream after the quota was reached."""
        return dict(self._dropped)

    def feed(self, stream: str, data: bytes) -> None:
        """Add raw output of ``stream``; full chunks go to the outbox at once."""
        with self._cond:
            skip = self._skip[stream]
            if skip:
                n = min(skip, len(data))
                self._skip[stream] = skip - n
                data = data[n:]
            if not data:
                return
            room = max(0, self.quota_bytes - self._state.quota_used)
            if room < len(data):
                self._dropped[stream] += len(data) - room
                data = data[:room]
                if not data:
                    return
            self._state.quota_used += len(data)
            pending = self._pending[stream]
            if not pending:
                self._since[stream] = self._clock()
            pending += data
            while len(pending) >= self.chunk_bytes:
                self._cut(stream)
            if self.exhausted:
                for s in STREAMS:
                    self._flush(s)

    def outbox_full(self, max_outbox_bytes: int) -> bool:
        """Whether more than ``max_outbox_bytes`` of chunks wait to be spooled (the reader then
        waits)."""
        with self._cond:
            return self._outbox_bytes > max_outbox_bytes

    def wait_for_room(self, max_outbox_bytes: int, timeout: float = 0.5) -> None:
        """Block a reader thread while the outbox holds more than ``max_outbox_bytes``."""
        with self._cond:
            if self._outbox_bytes > max_outbox_bytes:
                self._cond.wait(timeout)

    # ------------------------------------------------------------------ loop side

    def tick(self) -> None:
        """Flush streams whose oldest pending byte is ``flush_s`` old."""
        now = self._clock()
        with self._cond:
            for stream in STREAMS:
                since = self._since[stream]
                if since is not None and now - since >= self.flush_s:
                    self._flush(stream)

    def finish(self) -> None:
        """The output ended: flush everything and, past the quota, add the truncation marker."""
        with self._cond:
            for stream in STREAMS:
                self._flush(stream)
            dropped = sum(self._dropped.values())
            if dropped and not self._state.marker_emitted:
                detail = ", ".join(f"{s} {human_bytes(n)}" for s, n in self._dropped.items() if n)
                text = (
                    f"[gridledger: log quota of {human_bytes(self.quota_bytes)} reached; "
                    f"{human_bytes(dropped)} dropped ({detail})]\n"
                )
                cursor = self._state.system
                self._state.marker_emitted = True
                self._emit(SYSTEM, cursor, text, 1, 0, truncated=True)

    def drain(self) -> list[Chunk]:
        """Take the finished chunks, in order."""
        with self._cond:
            out, self._outbox, self._outbox_bytes = self._outbox, [], 0
            self._cond.notify_all()
            return out

    def state(self) -> LogState:
        """A copy of the pipeline's state, for the journal (a restart continues the numbering)."""
        with self._cond:
            return self._state.model_copy(deep=True)

    # ------------------------------------------------------------------ internals (locked)

    def _flush(self, stream: str) -> None:
        while self._pending[stream]:
            self._cut(stream)

    def _cut(self, stream: str) -> None:
        pending = self._pending[stream]
        limit = self.chunk_bytes
        if len(pending) <= limit:
            cut = len(pending)
        else:
            newline = pending.rfind(b"\n", 0, limit)
            cut = newline + 1 if newline >= 0 else _utf8_boundary(pending, limit)
        text = bytes(pending[:cut]).decode("utf-8", errors="replace")
        while len(text.encode()) > limit:  # invalid bytes became 3-byte U+FFFD
            cut = max(1, cut * limit // len(text.encode()) - 4)
            text = bytes(pending[:cut]).decode("utf-8", errors="replace")
        del pending[:cut]
        self._since[stream] = self._clock() if pending else None
        self._emit(stream, self._state.cursor(stream), text, text.count("\n"), cut)

    def _emit(
        self,
        stream: str,
        cursor: StreamCursor,
        text: str,
        line_count: int,
        raw_bytes: int,
        truncated: bool = False,
    ) -> None:
        seq, first_line = cursor.seq, cursor.line
        cursor.seq += 1
        cursor.line += line_count
        cursor.consumed += raw_bytes
        chunk = Chunk(
            stream, seq, first_line, line_count, text, truncated, self._state.model_copy(deep=True)
        )
        self._outbox.append(chunk)
        self._outbox_bytes += len(text)
