"""The scheduler service: rebuild from a snapshot and the topics, then follow them live.

One subscription reads every partition of ``node-events`` and ``job-events`` (no
consumer group: the scheduler owns placement for the whole fleet). On start it
reads the newest snapshot of its state on ``scheduler-state`` (:mod:`.snapshot`),
then catches up with both topics from the offsets the snapshot covers (from the
beginning without one), folding without deciding, so it never re-decides what the
log already holds; then it decides on every live batch and every
``scheduler_tick_s``. The leader writes a snapshot every ``scheduler_snapshot_s``,
at a moment when every decision it made is on the log and read back, so the state
is exactly the fold of the topics up to the offsets it names.

Live, deciding and appending overlap: decisions are already folded into the
state when they are decided, so the loop goes on reading and deciding while an
appender task waits for the broker's acknowledgement of the previous ones
(waiting for each ack before reading on cost half the live placement rate).
The appender sends them in decision order, one batch at a time, so one job's
events stay in order on its partition even across an outage. The decisions come
back on ``job-events``; they are recognised by key and type header when they
do and skipped unread (their content is already in the state).

Several schedulers may run: every one folds the topics, only the leader decides
(:mod:`.leader`: a lease held through the broker, a claimed epoch, a fence marker
on every partition of ``job-events``). A standby takes the lead when the lease
comes to it, and a deposed leader rebuilds its state and stands by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import Counter
from functools import partial
from typing import Any

from schemas import codec
from schemas.errors import LedgerError
from schemas.events import Event, JobRejected, JobSubmitted, NoCapacity, Role, with_role
from services.clock import utcnow
from services.ledger import Ledger, LedgerPort, compose
from services.ledger.port import Encoded
from services.ledger.subscription import Batch, Subscription
from services.ops import metrics
from services.ops.logs import event_context
from services.scheduler import snapshot
from services.scheduler.core import FOLDED_TYPE_NAMES, SchedulerConfig, SchedulerState
from services.scheduler.inventory import FitChecker
from services.scheduler.leader import DeposedError, Leadership
from services.settings import Settings

log = logging.getLogger(__name__)

WANTED_TYPE_NAMES = FOLDED_TYPE_NAMES | {cls.__name__ for cls in with_role(Role.FENCE)}
"""What the service decodes: what the state folds, and the fence markers (:mod:`.leader`)."""

FETCH_MAX_WAIT_MS = 20
"""How long the broker may hold a fetch that found nothing new (aiokafka's default: 500).

The consumer keeps one fetch in flight per broker, for the partitions with nothing
buffered; records that arrive meanwhile on the other partitions wait until it
returns. At 500 ms that wait was a third of the live placement time; 20 ms costs
an idle scheduler 50 empty fetches a second."""


class Scheduler:
    """Built by :func:`build_scheduler`; ``await run()`` until cancelled, or ``start``/``stop``."""

    def __init__(self, settings: Settings, ledger: LedgerPort, state: SchedulerState) -> None:
        self.settings = settings
        self.ledger = ledger
        self.state = state
        self.ready = asyncio.Event()
        """Set once the state is rebuilt from the topics and live decisions started."""
        self.placements = 0
        self.skipped_own = 0
        """Own decisions read back and skipped without decoding (see the module docstring)."""
        self.rounds = 0
        """Decision rounds run: a test that must show something is *not* decided waits
        for rounds to pass instead of for a fixed time."""
        self._own: Counter[tuple[bytes, str]] = Counter()
        """(key, type) of each decision not read back yet. Only this scheduler writes the
        types it decides, and the rebuild has read every earlier one, so the next record
        of that key and type is this decision (a second copy, appended again after an
        unacknowledged try, is decoded and changes nothing)."""
        self._outbox: list[tuple[list[Event], float | None]] = []
        """Decided, not yet handed to the appender: each round's events and the broker
        time of the newest record that led to them (None for a timer tick)."""
        self._outbox_ready = asyncio.Event()
        self._appender: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.consumer: Subscription | None = None
        """The subscription while :meth:`run` runs (its lag is the ops server's)."""
        self.leadership = Leadership(settings, ledger)
        """Whether this scheduler leads, with which epoch (:mod:`.leader`)."""
        self._job_events = settings.topic("job-events")
        self._unapplied: list[JobSubmitted] = []
        """Submissions the state could not take, to reject once this scheduler leads."""
        self._appending = False
        """An appended batch of decisions waits for the broker's acknowledgement."""
        self._snapshots = Snapshots(self)
        """Reads the newest snapshot at a start, writes one now and then (:mod:`.snapshot`)."""

    async def start(self) -> Scheduler:
        """Start the ledger and the decision loop (which first rebuilds the state from the
        topics)."""
        await self.ledger.start(wait=True)
        self._task = asyncio.create_task(self.run(), name="scheduler")
        return self

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the state is rebuilt and live decisions run; a scheduler that failed raises
        here."""
        waiter = asyncio.ensure_future(self.ready.wait())
        assert self._task is not None
        done, _ = await asyncio.wait(
            {waiter, self._task}, timeout=timeout, return_when="FIRST_COMPLETED"
        )
        if self._task in done:
            waiter.cancel()
            self._task.result()
        if not self.ready.is_set():
            raise TimeoutError("scheduler did not catch up with the topics in time")

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Return once ``stop`` is set; raise at once what a failed scheduler raised.

        A service loop needs both: a signal ends it, and a crash must not wait for one.
        """
        assert self._task is not None, "start() the scheduler first"
        waiter = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait({waiter, self._task}, return_when="FIRST_COMPLETED")
        if self._task in done:
            waiter.cancel()
            self._task.result()

    async def stop(self) -> None:
        """Stop deciding, then the ledger."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.ledger.stop()

    async def run(self) -> None:
        """Rebuild, then decide until cancelled; a broker outage is waited out, not fatal.

        The subscription rides out an outage of the broker by itself (it resumes where
        the handled batches ended) and an append waits for the broker
        (:meth:`Ledger.append_until_acked`), so the state is rebuilt once per start, and
        again after this scheduler was deposed (:meth:`_stand_by`).
        """
        await self.leadership.start()
        try:
            while True:
                self._appender = asyncio.create_task(
                    self._append_decided(), name="scheduler-appender"
                )
                try:
                    await self._follow()
                except DeposedError as exc:
                    log.warning("scheduler deposed (%s): rebuilding to stand by", exc)
                    self._stand_by()
                else:
                    return
                finally:
                    self._appender.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._appender
                    self._appender = None
        finally:
            await self.leadership.stop()

    def _stand_by(self) -> None:
        """After deposition: what this scheduler decided may be dropped by the fence, so
        its state, fence and unsent decisions go; the next run rebuilds from the topics."""
        self.state = SchedulerState(self.state.config, self.state.fit_check)
        self.leadership.reset()
        self._outbox = []

    async def _follow(self) -> None:
        """The handler: fold the catch-up (node events first, so pre-flight fits of the
        backlog see the fleet) without deciding, then decide on every batch that brought
        news and at every tick."""
        self._own.clear()  # the catch-up reads every decision, own ones included
        self._unapplied.clear()
        self.leadership.reset()  # and every fence marker
        positions = await self._snapshots.restore()
        subscription = self.ledger.subscribe(
            [self.settings.topic("node-events"), self.settings.topic("job-events")],
            name="scheduler",
            positions=positions,
            wanted=self._wanted,
            max_records=5000,
            options={"fetch_max_wait_ms": FETCH_MAX_WAIT_MS},
        )
        tick = self.settings.scheduler_tick_s
        next_tick = time.monotonic() + tick
        async with subscription:
            self.consumer = subscription
            try:
                async for batch in subscription:
                    self._check_appender()
                    changed = await self._observe(batch)
                    self._snapshots.covered(batch)
                    if not batch.live:
                        continue
                    await self._lead()
                    if not self.ready.is_set():
                        log.info(
                            "scheduler rebuilt: %d nodes, %d open jobs, %d queued",
                            len(self.state.fleet.nodes),
                            len(self.state.jobs),
                            len(self.state.queue),
                        )
                        await self._decide()
                        self.ready.set()
                        next_tick = time.monotonic() + tick
                    elif changed or time.monotonic() >= next_tick:
                        await self._decide(batch.newest_s if changed else None)
                        next_tick = time.monotonic() + tick
                    if self.settled:
                        await self._snapshots.maybe_write()
                    subscription.wait_ms = max(0, int((next_tick - time.monotonic()) * 1000))
            finally:
                self.consumer = None

    def _wanted(self, raw: Any) -> bool:
        """Whether to decode a record: not one of this scheduler's own decisions read back
        (see the module docstring), and of a type the state folds."""
        name = _type_name(raw)
        if name is None:
            return True  # no type header: decode it and let the codec judge
        own = self._own
        if own:
            mark = (raw.key, name)
            if own[mark] > 0:
                own[mark] -= 1
                if not own[mark]:
                    del own[mark]
                self.skipped_own += 1
                return False
        return name in WANTED_TYPE_NAMES

    async def _observe(self, batch: Batch) -> bool:
        """Fold a batch; True when anything but the scheduler's own decisions was in it.

        Node events count as heard at the broker's append time, else (live) now; the
        catch-up falls back to the events' own times where no append time is known.
        """
        seen = False
        received = utcnow() if batch.live else None
        for record in batch.records:
            event = record.value
            if not isinstance(event, Event):
                continue
            if record.topic == self._job_events and not self.leadership.admits(
                record.partition, record.offset, event
            ):
                continue  # a fence marker, or a deposed leader's decision
            # One the state cannot take is parked (its job named), not a crash that every
            # restart's rebuild would hit again.
            observe = partial(self.state.observe, event, record.appended_at or received)
            if await batch.apply(record, observe):
                seen = True
            elif isinstance(event, JobSubmitted):
                self._unapplied.append(event)
        return seen

    async def _lead(self) -> None:
        """Claim the lead when the lease came to this scheduler; raise :class:`DeposedError`
        when it went."""
        leadership = self.leadership
        leadership.check()
        if leadership.lease.held and not leadership.epoch:
            await leadership.claim()

    @property
    def settled(self) -> bool:
        """Leading, and every decision made is on the log and read back: the state is the
        fold of the topics up to the positions read (what a snapshot may hold)."""
        return (
            self.leadership.leading
            and not self._outbox
            and not self._appending
            and not self._own
            and not self._unapplied
        )

    @property
    def leading(self) -> bool:
        """Whether this scheduler decides now (:attr:`Leadership.leading`)."""
        return self.leadership.leading

    def _refused(self, submitted: JobSubmitted) -> JobRejected:
        """A submission the state could not take (parked above) still ends its job: it is
        rejected ``record_refused`` (by the leader), so nothing waits forever on a job the
        scheduler never knew. The decision's id derives from the submission, so a rebuild
        that parks the same record again appends an exact duplicate, which every reader
        drops."""
        return JobRejected.derived(
            submitted,
            "scheduler",
            "unapplicable",
            failure_class="record_refused",
            leader_epoch=self.leadership.epoch,
            summary="The scheduler could not apply this job's submission; it was parked on "
            "the dead-letter topic and nothing was run or billed.",
            advice="Nothing in the spec is known to be wrong: ask the operator, who finds the "
            "record and its error on the dead-letter topic under this job's id.",
        )

    async def _decide(self, newest_s: float | None = None) -> None:
        """Decide and hand the decisions to the appender; ``newest_s`` (the broker time
        of the newest record that led here, None for a timer tick) measures the
        decision latency. Only the leader decides."""
        if not self.leadership.leading:
            return
        self.state.epoch = self.leadership.epoch
        events: list[Event] = [self._refused(submitted) for submitted in self._unapplied]
        self._unapplied.clear()
        events += self.state.decide(utcnow())
        self.rounds += 1
        if events:
            self._own.update((e.key.encode(), type(e).__name__) for e in events)
            self._outbox.append((events, newest_s))
            self._outbox_ready.set()

    async def _append(self, events: list[Event]) -> None:
        """Append decisions until acknowledged; one over the topic's limit (a placement
        carrying a huge spec) is parked and a RecordRefused takes its place, on which the
        retry decider ends the job ``record_refused`` (and the state frees its GPUs)."""
        ledger = self.ledger
        _, parked = await ledger.within_limit(
            [(ledger.topic_of(e), e.key, e) for e in events], "scheduler"
        )
        if parked:
            gone = {id(item[2]) for item, _ in parked}
            events = [e for e in events if id(e) not in gone] + [
                ledger.record_refused(decision, "scheduler", item, size)
                for item, size in parked
                if isinstance(decision := item[2], Event)
            ]
        await compose.append_until_acked(ledger, events)

    async def _append_decided(self) -> None:
        """Append what was decided, in decision order, one acknowledged batch at a time.

        The state already counts these placements: wait for the broker, however long
        it is away, rather than forget them (their ids make a repeat harmless). Rounds
        decided while a batch waits for its ack go together in the next one.
        """
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            rounds, self._outbox = self._outbox, []
            if not rounds:
                continue
            events = [e for round_events, _ in rounds for e in round_events]
            self._appending = True
            try:
                await self._append(events)
            finally:
                self._appending = False
            _log_decisions(events)  # once they are on the ledger
            self.placements += sum(1 for e in events if e.type == "AttemptScheduled")
            acked_s = time.time()
            for _, newest_s in rounds:
                if newest_s is not None:
                    metrics.DECISION_LATENCY.labels(decider="scheduler").observe(
                        max(0.0, acked_s - newest_s)
                    )

    def _check_appender(self) -> None:
        """Raise what ended the appender (an error the ledger does not retry: a bug)."""
        appender = self._appender
        if appender is None:
            raise RuntimeError("the scheduler's appender is not running: start it with run()")
        if appender.done():
            appender.result()
            raise RuntimeError("the scheduler's appender stopped")


class Snapshots:
    """One scheduler's snapshots on ``scheduler-state`` (:mod:`.snapshot`): the newest read
    at a start, a new one written every ``scheduler_snapshot_s`` while it leads."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        settings = scheduler.settings
        self.every_s = settings.scheduler_snapshot_s
        self.topic = settings.topic("scheduler-state")
        self.inputs = ("node-events", "job-events")
        self.prefix = settings.topic_prefix
        self.part_bytes = max(1024, settings.kafka_max_message_bytes - 16 * 1024)
        self.positions: dict[tuple[str, int], int] = {}
        """(full topic, partition) -> the next offset after what the state folded."""
        self.written: dict[tuple[str, int], int] | None = None
        """The positions the last snapshot written or read covers."""
        self.seq = 0
        """The newest snapshot's sequence number."""
        self.keys: set[bytes] = set()
        """The parts on the topic not deleted yet (every one but the newest is, next time)."""
        self.encoded: dict[str, str] = {}
        """Event id -> its encoding, kept between snapshots (:func:`snapshot.encode`)."""
        self.due = 0.0
        self.count = 0
        """Snapshots written by this scheduler."""
        self.restored: int | None = None
        """The sequence of the snapshot the last start read (None: it refolded from 0)."""

    async def restore(self) -> dict[tuple[str, int], int] | None:
        """Put the newest usable snapshot into the scheduler (state, fence); the positions
        to read the tail from, or None to refold from offset 0 (logged once, with why)."""
        self.positions, self.written, self.restored = {}, None, None
        self.due = time.monotonic() + self.every_s
        if self.every_s <= 0:
            return None
        scheduler = self.scheduler
        try:
            latest: dict[bytes, bytes] = {}
            async for raw in scheduler.ledger.read_raw(self.topic):
                if raw.value is None:
                    latest.pop(raw.key or b"", None)
                else:
                    latest[raw.key or b""] = raw.value
            self.keys = set(latest) - {snapshot.HEAD}
            found = snapshot.assemble(latest)
            if found is None:
                log.info(
                    "no scheduler snapshot on %s: refolding the topics from offset 0", self.topic
                )
                return None
            self.seq, blob = found
            state = scheduler.state
            restored = snapshot.decode(blob, self.seq, state.config, state.fit_check)
            await self._within_topics(restored.positions)
        except (snapshot.SnapshotError, LedgerError) as exc:
            log.warning(
                "scheduler snapshot on %s ignored (%s): refolding the topics from offset 0",
                self.topic,
                exc,
            )
            return None
        scheduler.state = restored.state
        scheduler.leadership.fence = restored.fence
        self.positions = {(self.prefix + t, p): o for (t, p), o in restored.positions.items()}
        self.written, self.restored = dict(self.positions), restored.seq
        log.info(
            "scheduler snapshot %d restored: %d nodes, %d open jobs; reading the tail",
            restored.seq,
            len(restored.state.fleet.nodes),
            len(restored.state.jobs),
        )
        return dict(self.positions)

    async def _within_topics(self, positions: snapshot.Positions) -> None:
        """Raise :class:`snapshot.SnapshotError` when the snapshot covers more than the
        topics hold (they were recreated, or it is another deployment's)."""
        by_topic: dict[str, dict[int, int]] = {}
        for (suffix, partition), offset in positions.items():
            if suffix not in self.inputs:
                raise snapshot.SnapshotError(f"it names the topic {suffix!r}")
            by_topic.setdefault(suffix, {})[partition] = offset
        for suffix, wanted in by_topic.items():
            topic = self.prefix + suffix
            count = await self.scheduler.ledger.partitions(topic)
            ends = await self.scheduler.ledger.end_offsets(topic, [p for p in wanted if p < count])
            for partition, offset in sorted(wanted.items()):
                end = ends.get(partition)
                if end is None or offset > end:
                    raise snapshot.SnapshotError(
                        f"it is ahead of the topics: it covers {topic} partition {partition} "
                        f"up to offset {offset}, which "
                        + ("does not exist" if end is None else f"ends at {end}")
                    )

    def covered(self, batch: Batch) -> None:
        """Note how far the state has folded, after a batch."""
        for tp, offset in batch.offsets.items():
            self.positions[(tp.topic, tp.partition)] = offset

    async def maybe_write(self) -> None:
        """Write a snapshot when one is due and the state moved since the last (call it only
        while the scheduler is :attr:`Scheduler.settled`)."""
        if self.every_s <= 0 or time.monotonic() < self.due:
            return
        self.due = time.monotonic() + self.every_s
        if self.positions == self.written:
            return
        try:
            await self.write()
        except LedgerError as exc:
            log.warning("scheduler snapshot not written (%s); trying again later", exc)

    async def write(self) -> None:
        """Write the state as snapshot ``seq + 1``: its parts, its head, then the deletion
        of every older part."""
        scheduler = self.scheduler
        began = time.monotonic()
        positions = {(t.removeprefix(self.prefix), p): o for (t, p), o in self.positions.items()}
        blob = snapshot.encode(scheduler.state, scheduler.leadership.fence, positions, self.encoded)
        seq = self.seq + 1
        records = snapshot.records(blob, seq, self.part_bytes)
        parts = {key for key, _ in records} - {snapshot.HEAD}
        items: list[Encoded] = [(self.topic, key, value, []) for key, value in records]
        items += [(self.topic, key, None, []) for key in sorted(self.keys - parts)]
        await scheduler.ledger.append_encoded(items)
        self.seq, self.keys, self.written = seq, parts, dict(self.positions)
        self.count += 1
        log.info(
            "scheduler snapshot %d written: %d open jobs, %d nodes, %d bytes in %d part(s), %.3f s",
            seq,
            len(scheduler.state.jobs),
            len(scheduler.state.fleet.nodes),
            len(blob),
            len(parts),
            time.monotonic() - began,
        )


def _log_decisions(events: list[Event]) -> None:
    """A line per decision, with the job, attempt, event and node it concerns.

    Rejections and no-capacity ends are INFO: rare, and what a user asks an operator
    about. Placements and queueing (thousands a second at peak) are DEBUG.
    """
    debug = log.isEnabledFor(logging.DEBUG)
    for event in events:
        if isinstance(event, JobRejected):
            log.info(
                "rejected (%s): %s", event.failure_class, event.summary, extra=event_context(event)
            )
        elif isinstance(event, NoCapacity):
            log.info("no capacity: %s", event.detail, extra=event_context(event))
        elif debug:
            log.debug("decided %s", event.type, extra=event_context(event))


def _type_name(raw: Any) -> str | None:
    """The record's type header; None without one (decode it and let the codec judge)."""
    return codec.type_header(raw.headers)


def build_scheduler(settings: Settings, *, ledger: LedgerPort | None = None) -> Scheduler:
    """Composition root of the scheduler service (on the Kafka ledger unless given one)."""
    config = SchedulerConfig(
        node_timeout_s=settings.scheduler_node_timeout_s,
        dispatch_timeout_s=settings.scheduler_dispatch_timeout_s,
        retry_fallback_s=settings.scheduler_retry_fallback_s,
        producer=f"scheduler/{socket.gethostname()}",
    )
    state = SchedulerState(config, FitChecker())
    return Scheduler(settings, ledger or Ledger(settings, "scheduler"), state)
