"""A local durable spool in front of the ledger: nothing is lost while Kafka is away.

Every event the agent emits is first appended to an append-only segment file
under ``<home>/spool/<node_id>/<lane>/`` and fsynced; only then is it "emitted".
A sender per lane publishes the entries in order and records the acknowledged
position once the broker acknowledged them (``acks=all``); fully acknowledged
segments are deleted. While the broker is unreachable the sender retries with
back-off and the entries wait on disk; an agent restarted in between finds them
and sends them first.

There are two lanes, each with its own file, writer thread, sender and Kafka
producer: ``control`` (lifecycle, heartbeats, meter ticks, node events) and
``logs`` (log chunks), so a log flood never delays a heartbeat. Order is kept
within a lane (which covers every topic's per-key order, since a topic lives in
one lane). Delivery is at least once: a crash between the broker's ack and the
recorded position re-sends a few entries, which readers drop by event id.

Entry format: ``>II`` (payload length, CRC-32 of the payload) then the payload:
``>I`` metadata length, metadata JSON (topic suffix, key, headers, extra), value.
A torn last entry (a crash mid-write) fails its length or CRC check and is cut off.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from schemas import codec
from schemas.events import Event, LogChunk
from services.agent.errors import AgentError
from services.backoff import Backoff, Outage, wait_event
from services.ledger.errors import LedgerRefusedError

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")
_META = struct.Struct(">I")
SEGMENT_BYTES = 8 * 1024 * 1024
LANES = ("control", "logs")

Position = tuple[int, int]
"""(segment number, byte offset)."""


@dataclass(frozen=True)
class SpoolEntry:
    """One spooled event: already encoded, with its topic suffix, key and headers."""

    topic: str
    key: str
    value: bytes
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """Extra facts for recovery (e.g. the log cursor after a chunk); not sent."""

    @classmethod
    def of(cls, event: Event, meta: dict[str, Any] | None = None) -> SpoolEntry:
        """The spool record of an event: its topic, key, encoded value and headers, ready to
        send."""
        return cls(
            type(event).TOPIC, event.key, codec.encode(event), codec.headers(event), meta or {}
        )

    def to_bytes(self) -> bytes:
        """The record as one spool entry (length-prefixed, so a torn tail is detected)."""
        meta = json.dumps(
            {
                "t": self.topic,
                "k": self.key,
                "h": [[name, base64.b64encode(value).decode()] for name, value in self.headers],
                "m": self.meta,
            },
            separators=(",", ":"),
        ).encode()
        payload = _META.pack(len(meta)) + meta + self.value
        return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload

    @classmethod
    def from_payload(cls, payload: bytes) -> SpoolEntry:
        """The record of one spool entry's payload."""
        (meta_len,) = _META.unpack_from(payload)
        meta = json.loads(payload[_META.size : _META.size + meta_len])
        return cls(
            topic=meta["t"],
            key=meta["k"],
            value=payload[_META.size + meta_len :],
            headers=[(name, base64.b64decode(value)) for name, value in meta["h"]],
            meta=meta.get("m") or {},
        )


class SegmentLog:
    """The files of one lane. Not thread-safe: one thread (the lane's executor) uses it."""

    def __init__(self, directory: Path, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._acked_file = directory / "acked"
        self.acked: Position = (1, 0)
        self.end: Position = (1, 0)
        self._recover()

    def _segment(self, number: int) -> Path:
        return self.directory / f"{number:012d}.seg"

    def pending_bytes(self) -> int:
        """Bytes between the acknowledged position and the end: what a restart would resend."""
        (acked_seg, acked_off), (end_seg, end_off) = self.acked, self.end
        if (acked_seg, acked_off) >= (end_seg, end_off):
            return 0
        if acked_seg == end_seg:
            return end_off - acked_off
        total = 0
        for number in range(acked_seg, end_seg + 1):
            path = self._segment(number)
            size = path.stat().st_size if path.exists() else 0
            if number == acked_seg:
                size -= acked_off
            elif number == end_seg:
                size = end_off
            total += max(0, size)
        return total

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob("*.seg"))

    def _recover(self) -> None:
        if self._acked_file.exists():
            seg, off = self._acked_file.read_text().split()
            self.acked = (int(seg), int(off))
        segments = self._segments() or [self.acked[0]]
        last = segments[-1]
        path = self._segment(last)
        path.touch()
        valid = 0
        for _, end in self._iter_segment(last, 0):
            valid = end
        if valid != path.stat().st_size:
            log.warning("spool %s: cutting a torn entry at %s of %s", path, valid, path.name)
            with path.open("r+b") as fh:
                fh.truncate(valid)
                os.fsync(fh.fileno())
        self.end = (last, valid)
        if self.acked > self.end:
            self.acked = self.end

    def _iter_segment(self, number: int, offset: int) -> Iterator[tuple[SpoolEntry, int]]:
        try:
            fh = self._segment(number).open("rb")
        except FileNotFoundError:
            return
        with fh:
            fh.seek(offset)
            pos = offset
            while len(header := fh.read(_HEADER.size)) == _HEADER.size:
                length, crc = _HEADER.unpack(header)
                payload = fh.read(length)
                if len(payload) != length or zlib.crc32(payload) != crc:
                    return
                pos += _HEADER.size + length
                yield SpoolEntry.from_payload(payload), pos

    def append(self, records: list[SpoolEntry]) -> None:
        """Append and fsync; rolls to a new segment once the current one is large."""
        seg, off = self.end
        if off >= self.segment_bytes:
            seg, off = seg + 1, 0
        blob = b"".join(r.to_bytes() for r in records)
        with self._segment(seg).open("ab") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        self.end = (seg, off + len(blob))

    def read(
        self, start: Position, max_records: int = 500, max_bytes: int = 4 * 1024 * 1024
    ) -> list[tuple[SpoolEntry, Position]]:
        """Records after ``start`` (each with the position after it), in order."""
        out: list[tuple[SpoolEntry, Position]] = []
        seg, off = start
        size = 0
        while (seg, off) < self.end:
            for record, stop in self._iter_segment(seg, off):
                out.append((record, (seg, stop)))
                size += len(record.value)
                off = stop
                if len(out) >= max_records or size >= max_bytes:
                    return out
            if seg >= self.end[0]:
                break
            seg, off = seg + 1, 0
        return out

    def ack(self, position: Position) -> None:
        """Record that everything up to ``position`` reached the broker; drop old segments."""
        tmp = self._acked_file.with_suffix(".tmp")
        with tmp.open("w") as fh:
            fh.write(f"{position[0]} {position[1]}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._acked_file)
        self.acked = position
        for number in self._segments():
            if number < position[0]:
                self._segment(number).unlink(missing_ok=True)

    def scan(self) -> Iterator[SpoolEntry]:
        """Every record still on disk, acknowledged or not (for recovery)."""
        for number in self._segments():
            for record, _ in self._iter_segment(number, 0):
                yield record


class Publisher(Protocol):
    """Where a lane sends what it spooled (the ledger's producer, in production)."""

    async def publish(self, records: list[SpoolEntry]) -> None:
        """Send ``records`` in order; return once the broker acknowledged all of them."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


PublisherFactory = Callable[[str], Publisher]


SEND_BACKOFF = Backoff(initial_s=0.2, cap_s=2.0)
"""The sender's retry schedule: short, because every second the broker is back and the
spool still holds facts brings an attempt's heartbeats closer to the watchdog's deadline."""


class Lane:
    """One lane: a writer that group-commits appends and a sender that drains to Kafka."""

    def __init__(
        self,
        name: str,
        segments: SegmentLog,
        publisher: Publisher,
        publish_timeout_s: float = 10.0,
        outage: Outage | None = None,
    ) -> None:
        self.name = name
        self.segments = segments
        self.publisher = publisher
        self.publish_timeout_s = publish_timeout_s
        self.outage = outage or Outage("the broker")
        """Told of every failed send: one log line when the broker goes, one when it is back."""
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"spool-{name}")
        self._queue: list[tuple[SpoolEntry, asyncio.Future[None]]] = []
        self._wake_writer = asyncio.Event()
        self._written = asyncio.Event()
        self._acked = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.sent = 0
        self.failures = 0
        self.last_error = ""

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def start(self) -> None:
        """Start the lane's writer and sender tasks."""
        self._tasks = [
            asyncio.create_task(self._write_loop(), name=f"spool-{self.name}-writer"),
            asyncio.create_task(self._send_loop(), name=f"spool-{self.name}-sender"),
        ]
        if self.segments.acked < self.segments.end:
            self._written.set()

    async def put(self, records: list[SpoolEntry]) -> None:
        """Append durably; returns once the records are fsynced."""
        loop = asyncio.get_running_loop()
        futures = []
        for record in records:
            fut: asyncio.Future[None] = loop.create_future()
            self._queue.append((record, fut))
            futures.append(fut)
        self._wake_writer.set()
        await asyncio.gather(*futures)

    async def _write_loop(self) -> None:
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                await self._io(self.segments.append, [record for record, _ in batch])
            except Exception as exc:  # every waiting caller must hear of it
                log.exception("spool %s: append failed", self.segments.directory)
                error = AgentError(f"spool {self.segments.directory} is not writable: {exc}")
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(error)
                continue
            for _, fut in batch:
                if not fut.done():
                    fut.set_result(None)
            self._written.set()

    async def _send_loop(self) -> None:
        tries = 0
        while not self._stopping:
            batch = await self._io(self.segments.read, self.segments.acked)
            if not batch:
                self._written.clear()
                if self.segments.acked >= self.segments.end:
                    self._acked.set()
                    await self._written.wait()
                continue
            self._acked.clear()
            try:
                async with asyncio.timeout(self.publish_timeout_s):
                    await self.publisher.publish([record for record, _ in batch])
            except Exception as exc:  # retried, never lost (TimeoutError too)
                if self._stopping:
                    raise asyncio.CancelledError from exc
                self.failures += 1
                error = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, LedgerRefusedError):
                    self._refused(error)
                else:
                    self.outage.down(f"spool lane {self.name} holds {len(batch)}+ entries: {error}")
                self.last_error = error
                await asyncio.sleep(SEND_BACKOFF.delay(tries))
                tries += 1
                continue
            tries = 0
            self.outage.up()
            self.sent += len(batch)
            await self._io(self.segments.ack, batch[-1][1])

    def _refused(self, error: str) -> None:
        """Not an outage: the broker refuses the entry until someone fixes the cause. A
        fact is never dropped, so it stays on disk and is retried; the log says what to
        fix, once per refusal."""
        if error != self.last_error:
            log.error("spool lane %s: %s; the entry stays on disk and is retried", self.name, error)

    @property
    def drained(self) -> bool:
        """Whether everything appended reached the broker."""
        return not self._queue and self.segments.acked >= self.segments.end

    async def drain(self, timeout: float) -> bool:
        """Wait until everything appended so far is acknowledged (or ``timeout``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.drained:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._acked.clear()
            self._written.set()
            await wait_event(self._acked, min(remaining, 0.2))
        return True

    async def stop(self) -> None:
        """Stop the lane's tasks; what is spooled and not yet sent stays on disk for the next
        start."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.publisher.close()
        self._executor.shutdown(wait=True)


class Spool:
    """The node's spool: one :class:`Lane` per kind of traffic."""

    def __init__(
        self,
        directory: Path,
        publisher_factory: PublisherFactory,
        publish_timeout_s: float = 10.0,
        segment_bytes: int = SEGMENT_BYTES,
        outage: Outage | None = None,
    ) -> None:
        self.directory = directory
        outage = outage or Outage("the broker")
        self.lanes = {
            name: Lane(
                name,
                SegmentLog(directory / name, segment_bytes),
                publisher_factory(name),
                publish_timeout_s,
                outage,
            )
            for name in LANES
        }

    @staticmethod
    def lane_of(event: Event) -> str:
        """The lane an event travels on: logs apart, so a log flood never delays heartbeats or
        facts."""
        return "logs" if isinstance(event, LogChunk) else "control"

    def start(self) -> None:
        """Start every lane."""
        for lane in self.lanes.values():
            lane.start()

    async def append(self, event: Event, meta: dict[str, Any] | None = None) -> None:
        """Spool one event durably (its lane is chosen by its type)."""
        await self.lanes[self.lane_of(event)].put([SpoolEntry.of(event, meta)])

    async def append_many(
        self, events: Sequence[Event], meta: dict[str, Any] | None = None
    ) -> None:
        """Spool events of one lane in one fsync."""
        if events:
            records = [SpoolEntry.of(e, meta) for e in events]
            await self.lanes[self.lane_of(events[0])].put(records)

    def scan(self, lane: str) -> Iterator[SpoolEntry]:
        """Every record of the lane still on disk."""
        return self.lanes[lane].segments.scan()

    async def drain(self, timeout: float) -> bool:
        """Until every lane reached the broker, or ``timeout``; True when all did."""
        results = await asyncio.gather(*(lane.drain(timeout) for lane in self.lanes.values()))
        return all(results)

    async def stop(self) -> None:
        """Stop every lane."""
        await asyncio.gather(*(lane.stop() for lane in self.lanes.values()))
