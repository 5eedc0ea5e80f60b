"""A TCP forwarder in front of a test's API whose connections the test can cut.

What a client sees when the API process dies or a proxy between drops it: the
connection ends mid-response, and until the test lets it through again every new
connection is closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib


class Cutter:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`cut` drops every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.open = True
        self.connections = 0

    async def start(self) -> Cutter:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def cut(self) -> None:
        """Drop every open connection; refuse new ones until :meth:`let_through`."""
        self.open = False
        for writer in list(self.writers):
            writer.transport.abort()

    def let_through(self) -> None:
        self.open = True

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.transport.abort()
            return
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self.writers -= {writer, up_writer}

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.transport.abort()
