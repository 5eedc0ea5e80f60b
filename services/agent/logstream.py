"""Following one container's stdout and stderr live into LogChunks.

One reader thread per stream iterates docker's log frames (``follow=True``,
``timestamps=True``, from the start, so a restarted agent can skip what it
already emitted) and feeds the :class:`~services.agent.logs.LogPipeline`; a task
on the event loop flushes it every ``log_flush_s`` and hands finished chunks,
in order, to ``emit`` (which spools them on the logs lane). A reader thread
waits while too much chunked log is not yet spooled, so a flood is held back by
Docker's own log file, never by memory, and never by the heartbeats' lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from docker.errors import DockerException
from requests import RequestException
from urllib3.exceptions import HTTPError

from services.agent.logs import STREAMS, Chunk, LogPipeline, LogState, strip_timestamp
from services.agent.runtime import DockerRuntime, iter_frames
from services.agent.settings import AgentSettings
from services.agent.spool import wait_event

STREAM_GONE = (DockerException, RequestException, HTTPError, OSError)
"""What reading a container's log raises when the container or the daemon goes away."""

log = logging.getLogger(__name__)

OUTBOX_BYTES = 4 * 1024 * 1024
"""A reader thread waits while this much chunked log is not yet spooled."""
END_TIMEOUT_S = 30.0
"""How long to wait for the log streams to end after the process exited."""

Emit = Callable[[list[Chunk]], Awaitable[None]]


class LogFollower:
    """The live log of one attempt's container."""

    def __init__(
        self,
        runtime: DockerRuntime,
        container: str,
        name: str,
        agent: AgentSettings,
        state: LogState,
        emit: Emit,
    ) -> None:
        self.runtime = runtime
        self.container = container
        self.name = name
        self.flush_s = agent.log_flush_s
        self.emit = emit
        self.pipeline = LogPipeline(
            chunk_bytes=agent.log_chunk_bytes,
            quota_bytes=agent.log_quota_bytes,
            flush_s=agent.log_flush_s,
            state=state,
        )
        self._handles: list[Any] = []
        self._open = 0
        self._ended = asyncio.Event()
        self._wake = asyncio.Event()
        self._closing = threading.Event()
        self._drained = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start one reader thread per stream and the task that flushes chunks."""
        loop = asyncio.get_running_loop()
        self._open = len(STREAMS)
        for stream in STREAMS:
            threading.Thread(
                target=self._follow,
                args=(loop, stream),
                name=f"logs-{self.name}-{stream}",
                daemon=True,
            ).start()
        self._task = asyncio.create_task(self._drain(), name=f"{self.name}:logs")

    async def end(self) -> None:
        """After the exit: read the streams to their end, flush, add the quota marker."""
        if not await wait_event(self._ended, END_TIMEOUT_S):
            log.warning("log streams of %s did not end in %.0f s", self.name, END_TIMEOUT_S)
            self._close_streams()
        if self._task is not None:
            # Ended by a flag, not cancel(): a chunk being spooled is never cut off.
            self._drained = True
            self._wake.set()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.emit(self.pipeline.drain())
        self.pipeline.finish()
        await self.emit(self.pipeline.drain())

    async def close(self) -> None:
        """Stop following (agent shutdown or an end without a report)."""
        self._close_streams()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _close_streams(self) -> None:
        self._closing.set()
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.close()

    def _follow(self, loop: asyncio.AbstractEventLoop, stream: str) -> None:
        """Reader thread: docker frames of one stream into the pipeline, with back-pressure."""
        pipeline = self.pipeline
        try:
            handle = self.runtime.follow_logs(self.container, stream)
            self._handles.append(handle)
            if self._closing.is_set():
                handle.close()
            for frame in iter_frames(handle):
                pipeline.feed(stream, strip_timestamp(frame))
                loop.call_soon_threadsafe(self._wake.set)
                while not self._closing.is_set() and pipeline.outbox_full(OUTBOX_BYTES):
                    pipeline.wait_for_room(OUTBOX_BYTES)
        except Exception as exc:
            if self._closing.is_set() or isinstance(exc, STREAM_GONE):
                # Closed by us, or the container vanished: its log ends, nothing more.
                log.warning("log stream %s of %s ended: %s", stream, self.name, exc)
            else:  # a bug: the stream still ends (below), and the traceback says where
                log.exception("log stream %s of %s failed", stream, self.name)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may be closed on exit
                loop.call_soon_threadsafe(self._stream_ended)

    def _stream_ended(self) -> None:
        self._open -= 1
        self._wake.set()
        if self._open <= 0:
            self._ended.set()

    async def _drain(self) -> None:
        while not self._drained:
            await wait_event(self._wake, self.flush_s)
            self._wake.clear()
            self.pipeline.tick()
            await self.emit(self.pipeline.drain())
