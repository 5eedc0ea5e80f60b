"""In-memory per-job history for the processors, rebuilt from the topics.

The processors keep no faust tables (no changelog topics to create and
restore). Instead, the first time a partition of the job-keyed topics is
needed, the store reads that partition of ``job-events`` (and of
``meter-ticks`` when accounting runs) from the beginning to its current end
with a plain reader. Records a faust agent then consumes from its committed
offset are added again, which is a no-op: events are kept once per
``event_id``, at the offset where they first appeared.

Because the rebuild reads to the end, a processor restarted after a crash
knows which derived events it already appended and does not append them again;
for the decisions themselves it folds only the *prefix* of the history up to
the event being processed, so the answer is the one it would have given live.

Catch-up from the snapshot: before reading a partition the store reads the
latest views and accounting records the processors published on the compacted
topics (:mod:`services.processors.snapshot`). The records of *settled* jobs
(terminal and accounted for) are skipped by key without decoding them, and such
a job's history is read (:meth:`JobStore.unsettle`) only when a record for it
arrives, before that record is taken: what the processors then see of the job
is what a full rebuild would have given them.

The same path bounds a running worker's memory: once a job is settled (its published
view and record say so, :meth:`JobStore.settled_now`), it stays in memory while it is
one of the latest ``keep_settled`` settled jobs (late records mostly come within
seconds: a heartbeat or tick on another topic, the read-back of the worker's own final
appends), and is then dropped and marked settled as if skipped at a rebuild. A
heartbeat for a settled job is dropped unread: nothing a terminal, accounted job shows
depends on one.

The leader fence (:mod:`projections.fence`): the rebuild reads every fence marker of a
partition, and the store keeps a scheduler decision only when :attr:`JobStore.fence`
admits it at its offset (the step asks the same fence of every live record), so a
deposed scheduler's decision is in no history.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime

from projections.fence import Fence
from schemas import codec
from schemas.errors import EventDecodeError
from schemas.events import AttemptHeartbeat, Event, MeterTick
from services.ledger import LedgerPort
from services.ledger.client import heard_at, partition_for
from services.processors.snapshot import read_snapshot

log = logging.getLogger(__name__)

LOCAL = math.inf
"""Offset of an event this process appended and has not read back yet."""

KEEP_SETTLED = 4096
"""Default of ``processors_keep_settled``: how many settled jobs a running worker keeps
in memory (the latest settled) before it drops the oldest one's history."""


@dataclass
class JobLog:
    """One job's job-events (each event once, by offset), meter ticks and last heartbeats."""

    offsets: list[float] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    ids: dict[str, float] = field(default_factory=dict)
    ticks: dict[tuple[int, int], MeterTick] = field(default_factory=dict)
    heartbeats: dict[int, AttemptHeartbeat] = field(default_factory=dict)
    """Latest heartbeat of each attempt."""
    heard: dict[str, datetime] = field(default_factory=dict)
    """Event id -> when the platform heard it (``services.ledger.client.heard_at``), for
    job-events and the latest heartbeats. The watchdog times silence by these, not by
    ``occurred_at``."""

    def add(self, offset: float, event: Event, heard: datetime | None = None) -> bool:
        """Keep ``event`` at ``offset`` unless its id is known; True when it was new."""
        if heard is not None:
            self.heard.setdefault(event.event_id, heard)
        known = self.ids.get(event.event_id)
        if known is not None:
            if known == LOCAL and offset != LOCAL:
                # Our own append came back: move it to where the log has it.
                index = self._index_of(event.event_id)
                del self.offsets[index], self.events[index]
                self._insert(offset, event)
            return False
        self._insert(offset, event)
        return True

    def _insert(self, offset: float, event: Event) -> None:
        index = bisect.bisect_right(self.offsets, offset)
        self.offsets.insert(index, offset)
        self.events.insert(index, event)
        self.ids[event.event_id] = offset

    def _index_of(self, event_id: str) -> int:
        for index in range(len(self.events) - 1, -1, -1):
            if self.events[index].event_id == event_id:
                return index
        raise KeyError(event_id)

    def prefix(self, offset: float) -> list[Event]:
        """Events read at or before ``offset``: the history as of that record."""
        return self.events[: bisect.bisect_right(self.offsets, offset)]

    def between(self, after: float, upto: float) -> list[Event]:
        """Events read after offset ``after`` and at or before ``upto``."""
        lo = bisect.bisect_right(self.offsets, after)
        return self.events[lo : bisect.bisect_right(self.offsets, upto)]

    def read(self) -> list[Event]:
        """Every known event, including this process's not yet read back appends."""
        return list(self.events)

    def has(self, event_id: str) -> bool:
        """Whether the event is known (read back or appended by this process): a redelivery is
        skipped."""
        return event_id in self.ids


class JobStore:
    """Job logs by job id plus which partitions have been rebuilt."""

    def __init__(
        self,
        ledger: LedgerPort,
        with_ticks: bool = False,
        *,
        from_snapshot: bool = True,
        keep_settled: int = KEEP_SETTLED,
    ) -> None:
        self.ledger = ledger
        self.keep_settled = keep_settled
        """Settled jobs kept in memory (the latest settled); older ones are dropped."""
        self._recently_settled: OrderedDict[str, None] = OrderedDict()
        self.with_ticks = with_ticks
        self.from_snapshot = from_snapshot
        """Skip settled jobs' records at rebuild (False: read every job's history)."""
        self.settled: set[str] = set()
        """Jobs whose records the rebuild skipped (settled in the snapshot) and that have
        not been loaded since: :meth:`unsettle` before taking anything for one of them."""
        self.jobs: dict[str, JobLog] = {}
        self.loaded_at: dict[int, datetime] = {}
        """Partition -> when its rebuild finished (wall clock, for the watchdog's grace)."""
        self._locks: dict[int, asyncio.Lock] = {}
        self.on_job_changed: list[Callable[[str], None]] = []
        """Called with a job id whenever a new job-event (or meter tick on rebuild) is known."""
        self.on_heartbeat: list[Callable[[str], None]] = []
        """Called with a job id when a newer heartbeat of one of its attempts arrives."""
        self.on_dropped: list[Callable[[str], None]] = []
        """Called with a job id whose history was dropped: forget what is derived from it."""
        self.fence = Fence()
        """The leader epochs announced on ``job-events``: which scheduler decisions count."""

    def log(self, job_id: str) -> JobLog:
        """The job's log, created empty on first sight."""
        found = self.jobs.get(job_id)
        if found is None:
            found = self.jobs[job_id] = JobLog()
        return found

    async def ensure(self, partition: int, now: datetime) -> None:
        """Rebuild ``partition`` of the job-keyed topics once (again after a revoke)."""
        if partition in self.loaded_at:
            return
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            if partition in self.loaded_at:
                return
            settings = self.ledger.settings
            skipped: set[str] = set()
            if self.from_snapshot:
                skipped = (await read_snapshot(self.ledger, [partition])).settled()
            skip = {job_id.encode() for job_id in skipped}
            count = 0
            changed: set[str] = set()
            topic = settings.topic("job-events")
            async for offset, event, heard in self._read(topic, partition, lambda k: k in skip):
                if not self.fence.admits(partition, offset, event):
                    continue
                if self.log(event.job_id).add(offset, event, heard):
                    changed.add(event.job_id)
                count += 1
            if self.with_ticks:
                topic = settings.topic("meter-ticks")
                async for _, event, _ in self._read(topic, partition, lambda k: k in skip):
                    if isinstance(event, MeterTick):
                        self.add_tick(event)
                        changed.add(event.job_id)
            self.settled |= skipped
            self.loaded_at[partition] = now
            log.info(
                "rebuilt partition %d: %d job-events, %d jobs, %d settled jobs skipped",
                partition,
                count,
                len(changed),
                len(skipped),
            )
            for job_id in changed:
                for callback in self.on_job_changed:
                    callback(job_id)

    def settled_now(self, settled: dict[str, bool]) -> None:
        """Which jobs are settled as of what this worker just published (job -> settled).

        A settled job joins the latest settled; beyond :attr:`keep_settled` of them the
        oldest ones' histories are dropped and they are marked settled, so a record for one
        reloads it (:meth:`unsettle`). A job with an append of this worker not yet read
        back is not dropped: the read-back touches it again.
        """
        recent = self._recently_settled
        for job_id, now in settled.items():
            if not now:
                recent.pop(job_id, None)
            elif job_id in self.jobs:
                recent[job_id] = None
                recent.move_to_end(job_id)
        while len(recent) > self.keep_settled:
            oldest, _ = recent.popitem(last=False)
            job = self.jobs.get(oldest)
            if job is not None and job.offsets and job.offsets[-1] == LOCAL:
                continue
            self.jobs.pop(oldest, None)
            self.settled.add(oldest)
            for callback in self.on_dropped:
                callback(oldest)

    async def unsettle(self, job_id: str, partition: int) -> None:
        """Read the history of a job the rebuild skipped; a no-op for any other job."""
        if job_id not in self.settled:
            return
        async with self._locks.setdefault(partition, asyncio.Lock()):
            if job_id not in self.settled:
                return
            key = job_id.encode()
            settings = self.ledger.settings
            topic = settings.topic("job-events")
            async for offset, event, heard in self._read(topic, partition, lambda k: k != key):
                # The rebuild and the live records read every marker before this offset.
                if self.fence.admits(partition, offset, event):
                    self.log(job_id).add(offset, event, heard)
            if self.with_ticks:
                topic = settings.topic("meter-ticks")
                async for _, event, _ in self._read(topic, partition, lambda k: k != key):
                    if isinstance(event, MeterTick):
                        self.add_tick(event)
            self.settled.discard(job_id)
            log.info("loaded the history of settled job %s: a record for it arrived", job_id)
            for callback in self.on_job_changed:
                callback(job_id)

    async def _read(
        self, topic: str, partition: int, skip: Callable[[bytes], bool] = lambda key: False
    ) -> AsyncIterator[tuple[int, Event, datetime | None]]:
        """Every decodable event of one partition up to its end as of the call, with when
        the broker appended it (None on a topic that keeps the producer's time: a rebuild
        cannot know when an old record was heard).

        This does not dead-letter: the live agent that consumes the record parks it
        once; a rebuild only skips it. Records whose key ``skip`` accepts are not decoded.
        """
        async for raw in self.ledger.read_raw(topic, [partition]):
            if raw.value is None or skip(raw.key or b""):
                continue
            try:
                value = codec.decode(raw.value, trusted=True)  # the ledger's own topic
            except EventDecodeError:
                continue
            if isinstance(value, Event):
                yield raw.offset, value, heard_at(raw, None)

    def forget_partition(self, partition: int) -> None:
        """Called on revoke: rebuild it again if it comes back."""
        self.loaded_at.pop(partition, None)
        count = self.ledger.settings.job_partitions
        self.settled = {j for j in self.settled if partition_for(j, count) != partition}
        for job_id in [j for j in self._recently_settled if partition_for(j, count) == partition]:
            del self._recently_settled[job_id]

    def add(self, job_id: str, offset: float, event: Event, heard: datetime | None = None) -> bool:
        """Add a job-event; True when it was new (the job's change callbacks ran)."""
        new = self.log(job_id).add(offset, event, heard)
        if new:
            for callback in self.on_job_changed:
                callback(job_id)
        return new

    def add_tick(self, tick: MeterTick) -> bool:
        """Add a meter tick; True when its (attempt, index) was new (a duplicate tick is the
        same tick)."""
        ticks = self.log(tick.job_id).ticks
        key = (tick.attempt, tick.tick_index)
        if key in ticks:
            return False
        ticks[key] = tick
        return True

    def add_heartbeat(self, beat: AttemptHeartbeat, heard: datetime | None = None) -> bool:
        """Keep the attempt's newest heartbeat; True when this one is newer (callbacks ran)."""
        job = self.log(beat.job_id)
        beats = job.heartbeats
        known = beats.get(beat.attempt)
        if known is not None and (known.occurred_at, known.seq) >= (beat.occurred_at, beat.seq):
            return False
        beats[beat.attempt] = beat
        if known is not None:
            job.heard.pop(known.event_id, None)  # only the latest heartbeat's is kept
        if heard is not None:
            job.heard[beat.event_id] = heard
        for callback in self.on_heartbeat:
            callback(beat.job_id)
        return True
