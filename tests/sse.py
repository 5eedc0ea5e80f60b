"""Reading ``GET /v1/events`` as a client does: the SSE line rules, and a follower that
resumes with ``Last-Event-ID`` after every dropped connection."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.waiting import wait_until


@dataclass
class Frame:
    """One SSE message: its id and data, or the comments of a frame without data."""

    id: str | None = None
    data: dict[str, Any] | None = None
    comments: list[str] = field(default_factory=list)


class Parser:
    """Lines in, frames out (a blank line ends a frame)."""

    def __init__(self) -> None:
        self.frame = Frame()

    def feed(self, line: str) -> Frame | None:
        """The frame ``line`` completes, if it does."""
        line = line.rstrip("\r\n")
        if not line:
            done, self.frame = self.frame, Frame()
            return done
        if line.startswith(":"):
            self.frame.comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                self.frame.id = value
            elif name == "data":
                self.frame.data = json.loads(value)
        return None


class Follower:
    """Follows the stream in a thread, reconnecting with the last id it received; the
    test can cut its connection (:meth:`pause`) and let it resume (:meth:`resume`)."""

    def __init__(self, base: str, token: str, query: str = "") -> None:
        parts = urllib.parse.urlsplit(base)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = f"/v1/events{query}"
        self.token = token
        self.events: list[dict[str, Any]] = []
        self.last_id: str | None = None
        self.connections = 0
        self.connected = threading.Event()
        self.running = threading.Event()
        self.running.set()
        self.stopped = False
        self.conn: http.client.HTTPConnection | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="sse-follower")

    def start(self) -> Follower:
        self.thread.start()
        return self

    def pause(self) -> None:
        """Cut the connection and stay away until :meth:`resume`."""
        self.running.clear()
        self.connected.clear()
        self._cut()

    def resume(self) -> None:
        self.running.set()

    def stop(self) -> None:
        self.stopped = True
        self.running.set()
        self._cut()
        self.thread.join(10)

    def _cut(self) -> None:
        conn = self.conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        while not self.stopped:
            self.running.wait()
            if self.stopped:
                return
            headers = {"Authorization": f"Bearer {self.token}"}
            if self.last_id is not None:
                headers["Last-Event-ID"] = self.last_id
            self.conn = http.client.HTTPConnection(*self.address, timeout=30)
            try:
                self.conn.request("GET", self.path, headers=headers)
                response = self.conn.getresponse()
                if response.status == 200:
                    self.connections += 1
                    self.connected.set()
                    self._read(response)
            except (OSError, http.client.HTTPException, ValueError):
                pass  # dropped (or refused while the API is away): resume
            finally:
                self.conn.close()
                self.conn = None
            self.running.wait(0.2)

    def _read(self, response: http.client.HTTPResponse) -> None:
        parser = Parser()
        for raw in response:
            if not self.running.is_set():
                return  # cut by the test: what arrives after it is not counted
            frame = parser.feed(raw.decode())
            if frame is not None and frame.data is not None:
                self.events.append(frame.data)
                self.last_id = frame.id

    def check_every_event_once(
        self, jobs: list[str], stored: Callable[[str], list[str]], timeout_s: float = 60
    ) -> None:
        """Wait until the stream has shown, for each job, exactly its ``stored`` event ids in
        order; then no event may have come twice. Stops the follower."""
        try:
            wait_until(
                lambda: all(self.ids_of(j) == stored(j) for j in jobs),
                "the SSE client to have every stored event of every job",
                timeout_s,
            )
        finally:
            self.stop()
        ids = [e["id"] for e in self.events]
        assert len(ids) == len(set(ids)), "an event came twice over the stream"

    def ids_of(self, job_id: str) -> list[str]:
        """The event ids received for ``job_id``, in the order they came."""
        return [e["id"] for e in list(self.events) if e.get("subject") == job_id]
