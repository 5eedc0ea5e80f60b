"""Logs of a job: after the fact from Postgres, or followed live from its log-chunks partition.

Following reads the job's partition of ``gridledger.log-chunks`` through
``Ledger.follow`` (filtered by key), so it sees a line as soon as the agent
appended it, without waiting for the sink. Chunks already served from Postgres
are skipped by their ``(attempt, stream, seq)``. When the job turns terminal the
stream stays open ``log_follow_grace_s`` for late chunks, then serves whatever
the sink recorded that the follower missed, and closes.
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
from schemas.views import TERMINAL_STATUSES
from services.api import queries
from services.ledger.client import Ledger
from services.settings import Settings

NDJSON = "application/x-ndjson"
TEXT = "text/plain; charset=utf-8"

ChunkKey = tuple[int, str, int]
KEEPALIVE_S = 15.0


def chunk_json(chunk: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: chunk[k]
        for k in ("attempt", "stream", "seq", "first_line", "line_count", "data", "truncated")
    }
    occurred = chunk.get("occurred_at")
    out["occurred_at"] = occurred.isoformat() if isinstance(occurred, datetime) else occurred
    return out


def chunk_dict(chunk: LogChunk) -> dict[str, Any]:
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

    def __init__(self, response: web.StreamResponse, ndjson: bool) -> None:
        self.response = response
        self.ndjson = ndjson
        self.sent: set[ChunkKey] = set()

    async def write(self, chunks: Iterable[dict[str, Any]]) -> None:
        out = []
        for chunk in chunks:
            key = (chunk["attempt"], chunk["stream"], chunk["seq"])
            if key in self.sent:
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

    async def keepalive(self) -> None:
        """An NDJSON line that carries nothing, so idle proxies and clients keep the stream."""
        if self.ndjson:
            await self.response.write(b'{"keepalive": true}\n')

    async def end(self, status: str | None) -> None:
        if self.ndjson:
            await self.response.write((json.dumps({"end": True, "status": status}) + "\n").encode())
        await self.response.write_eof()


async def serve_logs(
    request: web.Request,
    *,
    settings: Settings,
    pool: asyncpg.Pool,
    ledger: Ledger,
    job_id: str,
    attempt: int | None,
    stream: str | None,
    ndjson: bool,
    follow: bool,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": NDJSON if ndjson else TEXT, "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    writer = LogWriter(response, ndjson)
    await writer.write(await queries.log_chunks(pool, job_id, attempt, stream))
    status = await queries.job_status(pool, job_id)
    if follow:
        status = await _follow(writer, settings, pool, ledger, job_id, attempt, stream)
    await writer.end(status)
    return response


async def _follow(
    writer: LogWriter,
    settings: Settings,
    pool: asyncpg.Pool,
    ledger: Ledger,
    job_id: str,
    attempt: int | None,
    stream: str | None,
) -> str | None:
    queue: asyncio.Queue[LogChunk] = asyncio.Queue()

    async def pump() -> None:
        async for record in ledger.follow("log-chunks", key=job_id, consumer_name="api-logs"):
            chunk = record.value
            if (
                isinstance(chunk, LogChunk)
                and (attempt is None or chunk.attempt == attempt)
                and (stream is None or chunk.stream == stream)
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
    await writer.write(await queries.log_chunks(pool, job_id, attempt, stream))
    return status
