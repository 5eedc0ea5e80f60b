"""``GET /v1/events``: the tenant's job events as server-sent events, resumable.

Where the events come from: the ``job_events`` read model. Every stored event has a
``stream_position`` (one bigserial, assigned by the one sink of the schema as it
commits its batches in order), so "everything after position N" is a complete and
exact question, and the position is each SSE ``id:``. A client that reconnects with
``Last-Event-ID: N`` (or ``?since=N``) gets every event after N once, whatever
happened in between: a dropped connection, an API restart, a broker outage (the
sink catches up afterwards and the positions follow its commits).

One shared tail per API process (:class:`EventHub`) reads the new rows of all
tenants every ``events_poll_s`` while any stream is open and hands each one to the
open streams of its tenant; no stream runs a Kafka consumer or a query of its own
while it keeps up. A stream first reads what it missed from Postgres (its catch-up,
by pages), and again whenever it fell more than ``events_buffer`` events behind.

Bounds, against a tenant that opens streams without end: ``events_streams_per_tenant``
streams per tenant and ``events_streams_max`` in all per process (the next is a 429
naming the limit), ``events_buffer`` events waiting per stream, and
``events_stream_max_s`` per connection (the stream ends; the client resumes). A quiet
stream gets a comment line every ``events_heartbeat_s``.

The data of each event is a CloudEvents 1.0 JSON document whose attributes are the
ones the Kafka records carry (:func:`schemas.codec.headers`), with the event itself
(as ``GET /v1/jobs/{job_id}/events`` shows it) as ``data``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from aiohttp import web

from schemas.codec import headers
from services.backoff import outage_of
from services.settings import Settings
from services.sink import db
from services.sink.rows import event_from_payload

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"
PAGE = 500
"""Rows one catch-up or tail query reads at most."""
RETRY_MS = 2000
"""The reconnect delay the stream asks an EventSource for (SSE ``retry:``)."""

_ROWS = (
    "SELECT e.stream_position, e.job_id, e.type, e.payload, j.tenant "
    "FROM job_events e JOIN jobs j ON j.job_id = e.job_id WHERE e.stream_position > $1"
)


@dataclass(frozen=True)
class StreamEvent:
    """One stored event as a stream sends it: its position, whose it is, and the SSE frame."""

    position: int
    tenant: str
    job_id: str
    type: str
    frame: bytes


def cloudevent(type_name: str, payload: Any) -> dict[str, Any]:
    """The CloudEvents JSON (structured mode) of a stored event: the ``ce_*`` attributes its
    Kafka record carries, ``datacontenttype`` and the event as ``data``."""
    data = json.loads(payload) if isinstance(payload, str) else payload
    attributes = {
        name.removeprefix("ce_"): value.decode()
        for name, value in headers(event_from_payload(type_name, data))
        if name.startswith("ce_")
    }
    return {**attributes, "datacontenttype": "application/json", "data": data}


def stream_event(row: asyncpg.Record) -> StreamEvent:
    """A ``job_events`` row (with its job's tenant) as a stream event."""
    position = row["stream_position"]
    document = json.dumps(cloudevent(row["type"], row["payload"]), separators=(",", ":"))
    return StreamEvent(
        position,
        row["tenant"],
        row["job_id"],
        row["type"],
        f"id: {position}\ndata: {document}\n\n".encode(),
    )


class TooManyStreamsError(Exception):
    """A stream over one of the bounds: which one, for the 429."""

    def __init__(self, setting: str, limit: int, whose: str) -> None:
        super().__init__(f"{whose} already hold {limit} open event streams ({setting})")
        self.setting = setting
        self.limit = limit


class AheadError(Exception):
    """A resume position this stream never gave out (it is past the newest event)."""

    def __init__(self, after: int, newest: int) -> None:
        super().__init__(f"{after} is past the newest event of this stream ({newest})")
        self.after = after
        self.newest = newest


@dataclass(eq=False)
class Subscription:
    """One open stream's place in the hub: the events of its tenant waiting for it."""

    tenant: str
    queue: asyncio.Queue[StreamEvent]
    behind: bool = False
    """More events arrived than the queue holds; the stream catches up from Postgres."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class EventHub:
    """The API process's one tail of ``job_events``, fanned out to the open streams by tenant."""

    def __init__(self, settings: Settings, pool: asyncpg.Pool) -> None:
        self.settings = settings
        self.pool = pool
        self.by_tenant: dict[str, set[Subscription]] = {}
        self.cursor = 0
        """Every stored event after it reaches the open streams (the tail's promise)."""
        self.tail: asyncio.Task[None] | None = None
        self.closing = asyncio.Event()
        self.active = asyncio.Event()
        self.starting = asyncio.Lock()

    @property
    def open_streams(self) -> int:
        """Streams open on this process, of all tenants."""
        return sum(len(s) for s in self.by_tenant.values())

    async def subscribe(self, tenant: str) -> Subscription:
        """A place for one more stream of ``tenant``; TooManyStreamsError past a bound.

        Once it returns, every event stored after what the stream's own catch-up reads
        reaches its queue: an idle tail first moves its cursor to the newest event."""
        s = self.settings
        async with self.starting:
            if len(self.by_tenant.get(tenant, ())) >= s.events_streams_per_tenant:
                raise TooManyStreamsError(
                    "events_streams_per_tenant", s.events_streams_per_tenant, "you"
                )
            if self.open_streams >= s.events_streams_max:
                raise TooManyStreamsError("events_streams_max", s.events_streams_max, "all tenants")
            if not self.by_tenant:
                self.cursor = await latest_position(self.pool)
            sub = Subscription(tenant, asyncio.Queue(maxsize=s.events_buffer))
            self.by_tenant.setdefault(tenant, set()).add(sub)
            self.active.set()
            if self.tail is None or self.tail.done():
                self.tail = asyncio.create_task(self._follow(), name="events-tail")
                self.tail.add_done_callback(_said_why)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """The stream ended: its place is free."""
        subs = self.by_tenant.get(sub.tenant)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.by_tenant[sub.tenant]
        if not self.by_tenant:
            self.active.clear()

    async def _follow(self) -> None:
        """Read the new rows while any stream is open (idle otherwise); an outage of
        Postgres is waited out, and every stream then catches up from Postgres."""
        while not self.closing.is_set():
            if not self.active.is_set():
                await _first(self.active.wait(), self.closing.wait())
                continue
            postgres = outage_of(f"Postgres at {self.settings.dsn_redacted}")
            try:
                rows = await self.pool.fetch(
                    f"{_ROWS} ORDER BY e.stream_position LIMIT {PAGE}", self.cursor
                )
            except db.POSTGRES_UNAVAILABLE as exc:
                postgres.down(exc)  # one line per outage, shared with the API's other reads
                self._all_behind()
                rows = []
            else:
                postgres.up()
            for row in rows:
                self._deliver(stream_event(row))
            if rows:
                self.cursor = max(self.cursor, rows[-1]["stream_position"])
            if len(rows) < PAGE:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), self.settings.events_poll_s)

    def _deliver(self, event: StreamEvent) -> None:
        for sub in self.by_tenant.get(event.tenant, ()):
            if sub.behind:
                continue
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                sub.behind = True
            sub.wake.set()

    def _all_behind(self) -> None:
        for subs in self.by_tenant.values():
            for sub in subs:
                sub.behind = True
                sub.wake.set()

    async def close(self) -> None:
        """End the tail and every open stream (the app shuts down)."""
        self.closing.set()
        self._all_behind()
        if self.tail is not None:
            await asyncio.gather(self.tail, return_exceptions=True)


def _said_why(tail: asyncio.Task[None]) -> None:
    """A tail that failed (a bug, never an outage) says so; its streams end and the next
    stream starts another one."""
    if not tail.cancelled() and tail.exception() is not None:
        log.error("the event stream tail failed; its streams end", exc_info=tail.exception())


async def _first(*waits: Any) -> None:
    """Wait until one of the awaitables is done; cancel the others."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def latest_position(pool: asyncpg.Pool) -> int:
    """The position of the newest stored event (0 when there is none)."""
    return int(await pool.fetchval("SELECT coalesce(max(stream_position), 0) FROM job_events"))


@dataclass(frozen=True)
class Filters:
    """What one stream shows of its tenant's events."""

    tenant: str
    job_id: str | None = None
    types: frozenset[str] = frozenset()

    def keeps(self, event: StreamEvent) -> bool:
        """Whether the stream shows ``event`` (of its tenant)."""
        return (self.job_id is None or event.job_id == self.job_id) and (
            not self.types or event.type in self.types
        )


async def missed(pool: asyncpg.Pool, filters: Filters, after: int) -> list[StreamEvent]:
    """A page of the tenant's stored events after position ``after`` (the catch-up)."""
    args: list[Any] = [after, filters.tenant]
    sql = f"{_ROWS} AND j.tenant = $2"
    if filters.job_id is not None:
        args.append(filters.job_id)
        sql += f" AND e.job_id = ${len(args)}"
    if filters.types:
        args.append(sorted(filters.types))
        sql += f" AND e.type = ANY(${len(args)}::text[])"
    rows = await pool.fetch(f"{sql} ORDER BY e.stream_position LIMIT {PAGE}", *args)
    return [stream_event(r) for r in rows]


async def serve_events(
    request: web.Request,
    *,
    hub: EventHub,
    filters: Filters,
    after: int | None,
) -> web.StreamResponse:
    """Stream the tenant's events after position ``after`` (None: from now on) until the
    client leaves, ``events_stream_max_s`` passed or the API shuts down."""
    sub = await hub.subscribe(filters.tenant)  # TooManyStreamsError before anything is sent
    try:
        newest = await latest_position(hub.pool)
        if after is None:
            after = newest
        elif after > newest:
            raise AheadError(after, newest)
        response = web.StreamResponse(
            headers={
                "Content-Type": EVENT_STREAM,
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # proxies that buffer (nginx) pass each event on
            }
        )
        await response.prepare(request)
        stream = _Stream(request, response, hub, sub, filters, after)
        try:
            await stream.write(f"retry: {RETRY_MS}\n: events after {after}\n\n".encode())
            await stream.run()
        except ConnectionResetError:
            return response  # the client left
        except db.POSTGRES_UNAVAILABLE as exc:
            # The client reconnects with Last-Event-ID; until Postgres is back that is a 503.
            outage_of(f"Postgres at {hub.settings.dsn_redacted}").down(exc)
        await response.write_eof()
    finally:
        hub.unsubscribe(sub)
    return response


CHECK_S = 1.0
"""How often a quiet stream looks whether its client is still there."""


@dataclass
class _Stream:
    """One open stream: catch up from Postgres, then send what the hub hands over."""

    request: web.Request
    response: web.StreamResponse
    hub: EventHub
    sub: Subscription
    filters: Filters
    last: int
    """The position of the last event sent (or the one it resumes after)."""
    wrote_at: float = 0.0

    async def write(self, data: bytes) -> None:
        await self.response.write(data)
        self.wrote_at = asyncio.get_running_loop().time()

    async def send(self, events: Sequence[StreamEvent]) -> None:
        """Write the events after :attr:`last` (the catch-up and the tail overlap), in order."""
        out = [e for e in events if e.position > self.last and self.filters.keeps(e)]
        if out:
            await self.write(b"".join(e.frame for e in out))
            self.last = out[-1].position

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.hub.settings
        ends = loop.time() + settings.events_stream_max_s
        sub = self.sub
        caught_up = False
        while not self.hub.closing.is_set() and loop.time() < ends:
            transport = self.request.transport
            if transport is None or transport.is_closing():
                return
            if self.hub.tail is None or self.hub.tail.done():
                return  # the tail failed: end, so that the client's reconnect starts another
            if not caught_up or sub.behind:
                sub.behind = False
                page = await missed(self.hub.pool, self.filters, self.last)
                caught_up = len(page) < PAGE
                await self.send(page)
                continue
            waiting: list[StreamEvent] = []
            while not sub.queue.empty():
                waiting.append(sub.queue.get_nowait())
            if waiting:
                await self.send(waiting)
                continue
            sub.wake.clear()
            with contextlib.suppress(TimeoutError):
                wait_s = min(CHECK_S, settings.events_heartbeat_s, max(0.0, ends - loop.time()))
                await asyncio.wait_for(sub.wake.wait(), wait_s)
            if loop.time() - self.wrote_at >= settings.events_heartbeat_s:
                await self.write(b": keepalive\n\n")
