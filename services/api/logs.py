"""Logs of a job: after the fact from Postgres, or followed live from its log-chunks partition.

Following reads the job's partition of ``gridledger.log-chunks`` through
``Ledger.follow`` (filtered by key), so it sees a line as soon as the agent
appended it, without waiting for the sink. Chunks already served from Postgres
are skipped by their ``(attempt, stream, seq)``. When the job turns terminal the
stream stays open ``log_follow_grace_s`` for late chunks, then serves whatever
the sink recorded that the follower missed, and closes.

``since`` keeps chunks read at or after a time and ``tail`` only the last N
lines (the first chunk served is cut to them); what they leave out is never
served by the live part either, and an NDJSON stream says so in a line
``{"skipped": POSITION}``. ``after`` (a :mod:`schemas.log_position`) resumes a
reader whose connection dropped: no chunk at or before it is sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import asyncpg
from aiohttp import web

from schemas.events import LogChunk
from schemas.log_position import LogPosition, advance, format_position, has
from schemas.views import TERMINAL_STATUSES
from services.api import queries
from services.ledger import compose
from services.ledger.port import LedgerPort
from services.settings import Settings

NDJSON = "application/x-ndjson"
TEXT = "text/plain; charset=utf-8"

ChunkKey = tuple[int, str, int]
KEEPALIVE_S = 15.0


def chunk_json(chunk: dict[str, Any]) -> dict[str, Any]:
    """A stored chunk row as one NDJSON line of the log stream."""
    out = {
        k: chunk[k]
        for k in ("attempt", "stream", "seq", "first_line", "line_count", "data", "truncated")
    }
    occurred = chunk.get("occurred_at")
    out["occurred_at"] = occurred.isoformat() if isinstance(occurred, datetime) else occurred
    return out


def chunk_dict(chunk: LogChunk) -> dict[str, Any]:
    """A LogChunk event shaped as a stored row, so live and stored chunks are written alike."""
    return {
        "attempt": chunk.attempt,
        "stream": chunk.stream,
        "seq": chunk.seq,
        "first_line": chunk.first_line,
        "line_count": chunk.line_count,
        "data": chunk.data,
        "truncated": chunk.truncated,
        "occurred_at": chunk.occurred_at,
    }


class LogWriter:
    """Writes chunks to a streamed response as NDJSON or plain text, each chunk once."""

    def __init__(
        self, response: web.StreamResponse, ndjson: bool, after: LogPosition | None = None
    ) -> None:
        self.response = response
        self.ndjson = ndjson
        self.sent: set[ChunkKey] = set()
        self.after: LogPosition = after or {}
        """The reader has every chunk at or before it (a resumed follow)."""

    async def write(self, chunks: Iterable[dict[str, Any]]) -> None:
        """Write the chunks not yet sent (the stored and the live reads overlap; each chunk goes out
        once)."""
        out = []
        for chunk in chunks:
            key = (chunk["attempt"], chunk["stream"], chunk["seq"])
            if key in self.sent or has(self.after, *key):
                continue
            self.sent.add(key)
            if self.ndjson:
                out.append(json.dumps(chunk_json(chunk)) + "\n")
            else:
                data = chunk["data"]
                out.append(data)
                if chunk["truncated"]:
                    out.append("\n[gridledger: log quota reached; later output was dropped]\n")
        if out:
            await self.response.write("".join(out).encode())

    async def skipped(self, chunks: list[dict[str, Any]]) -> None:
        """Tell an NDJSON reader which chunks the filters left out, so that a reader that
        resumes after a drop (``after=``) does not get them then."""
        if self.ndjson and chunks:
            position: LogPosition = {}
            for chunk in chunks:
                advance(position, *_key(chunk))
            line = json.dumps({"skipped": format_position(position)}) + "\n"
            await self.response.write(line.encode())

    async def keepalive(self) -> None:
        """An NDJSON line that carries nothing, so idle proxies and clients keep the stream."""
        if self.ndjson:
            await self.response.write(b'{"keepalive": true}\n')

    async def end(self, status: str | None) -> None:
        """End the stream; in NDJSON with a last line giving the job's status."""
        if self.ndjson:
            await self.response.write((json.dumps({"end": True, "status": status}) + "\n").encode())
        await self.response.write_eof()


def _key(chunk: dict[str, Any]) -> ChunkKey:
    return (chunk["attempt"], chunk["stream"], chunk["seq"])


def select_chunks(
    chunks: list[dict[str, Any]], since: datetime | None, tail: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chunks to serve, chunks cut): those read before ``since`` are cut, then all but
    the last ``tail`` lines. ``chunks`` are in serving order."""
    kept = [c for c in chunks if since is None or c["occurred_at"] >= since]
    if tail is not None:
        lines = 0
        start = len(kept)
        while start > 0 and lines < tail:
            start -= 1
            lines += kept[start]["line_count"]
        kept = kept[start:]
        if lines > tail:
            first = dict(kept[0])
            data = str(first["data"])
            drop = min(lines - tail, data.count("\n"))
            cut_at = 0
            for _ in range(drop):  # line_count counts newlines: cut after the drop-th one
                cut_at = data.index("\n", cut_at) + 1
            first["data"] = data[cut_at:]
            first["first_line"] += drop
            first["line_count"] -= drop
            kept[0] = first
    kept_keys = {_key(c) for c in kept}
    return kept, [c for c in chunks if _key(c) not in kept_keys]


async def serve_logs(
    request: web.Request,
    *,
    settings: Settings,
    pool: asyncpg.Pool,
    ledger: LedgerPort,
    job_id: str,
    attempt: int | None,
    stream: str | None,
    ndjson: bool,
    follow: bool,
    since: datetime | None = None,
    tail: int | None = None,
    after: LogPosition | None = None,
) -> web.StreamResponse:
    """Answer a log request: the stored chunks, then, when following, the live ones until the job
    ends."""
    response = web.StreamResponse(
        headers={"Content-Type": NDJSON if ndjson else TEXT, "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    writer = LogWriter(response, ndjson, after)
    served, cut = select_chunks(
        await queries.log_chunks(pool, job_id, attempt, stream), since, tail
    )
    writer.sent.update(_key(c) for c in cut)  # never served later by the follow either
    await writer.skipped(cut)
    await writer.write(served)
    status = await queries.job_status(pool, job_id)
    if follow:
        status = await _follow(writer, settings, pool, ledger, job_id, attempt, stream, since)
    await writer.end(status)
    return response


async def _follow(
    writer: LogWriter,
    settings: Settings,
    pool: asyncpg.Pool,
    ledger: LedgerPort,
    job_id: str,
    attempt: int | None,
    stream: str | None,
    since: datetime | None,
) -> str | None:
    queue: asyncio.Queue[LogChunk] = asyncio.Queue()

    async def pump() -> None:
        async for record in compose.follow(
            ledger, "log-chunks", key=job_id, consumer_name="api-logs"
        ):
            chunk = record.value
            if (
                isinstance(chunk, LogChunk)
                and (attempt is None or chunk.attempt == attempt)
                and (stream is None or chunk.stream == stream)
                and (since is None or chunk.occurred_at >= since)
            ):
                queue.put_nowait(chunk)

    loop = asyncio.get_running_loop()
    follower = asyncio.create_task(pump())
    terminal_since: float | None = None
    status: str | None = None
    last_write = loop.time()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(queue.get(), timeout=0.25)
                batch = [chunk]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                await writer.write(chunk_dict(c) for c in batch)
                last_write = loop.time()
            except TimeoutError:
                if loop.time() - last_write >= KEEPALIVE_S:
                    await writer.keepalive()
                    last_write = loop.time()
            if follower.done():
                follower.result()  # re-raise what stopped it
                break
            if terminal_since is None:
                status = await queries.job_status(pool, job_id)
                if status in TERMINAL_STATUSES:
                    terminal_since = loop.time()
            elif loop.time() - terminal_since >= settings.log_follow_grace_s:
                break
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    # Anything the sink recorded that the follower had not delivered yet.
    late, _ = select_chunks(await queries.log_chunks(pool, job_id, attempt, stream), since, None)
    await writer.write(late)
    return status
