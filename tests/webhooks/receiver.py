"""A real webhook receiver for the tests: an aiohttp server on 127.0.0.1 that keeps every
request it got and answers as the test tells it (a status, a hang, a redirect)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: str


@dataclass
class Receiver:
    """Start it, point a webhook at :meth:`url`, read :attr:`received`."""

    status: int = 200
    hanging: set[str] = field(default_factory=set)
    """Paths that answer nothing: a request there stays open until the receiver stops."""
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.text()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.received.append(Received(request.path, headers, body))
        if request.path == "/redirect":
            raise web.HTTPFound("/elsewhere")
        if request.path in self.hanging:
            await asyncio.Event().wait()
        return web.Response(status=self.status, text="ok" if self.status < 300 else "broken")

    async def start(self) -> Receiver:
        """Listen (on the same port again after :meth:`stop`)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Close the port and every open connection (a request in flight gets no answer)."""
        if self._runner is not None:
            await self._runner.cleanup()  # a hanging handler is cancelled, unanswered
            self._runner = None

    def bodies(self, path: str = "/hook") -> list[Received]:
        return [r for r in self.received if r.path == path]
