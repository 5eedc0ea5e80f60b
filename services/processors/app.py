"""The stream processors as faust agents (faust-streaming 0.15.3), one app per worker.

Processors (``--only`` picks a subset; each subset is its own consumer group):

- ``dispatch``: AttemptScheduled / CancelRequested -> ``node-commands`` keyed by node.
- ``state``: job-events -> ``projections.job_state.project`` -> ``job-state``.
- ``watchdog``: heartbeats + job-events + a timer -> :func:`.watchdog.overdue`.
- ``classifier``: job-events -> ``projections.decisions.react`` -> derived job-events
  (FailureClassified, RetryScheduled, the terminal event).
- ``accounting``: job-events + meter-ticks -> ``projections.accounting.account`` -> ``accounting``.

faust is used for what it is good at here (group membership, partition
assignment, per-partition ordered delivery, offset commits after the agent moved
on); its exactly-once mode, tables and changelogs are not used. Topics are
declared with their real partition counts and ``internal=False`` so faust never
creates them; values are raw bytes decoded with the one codec. Each agent runs
with ``concurrency=1``. Correctness across crashes comes from deterministic
event ids and from the :class:`.store.JobStore` rebuild, not from faust.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import faust
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from schemas import codec
from schemas.errors import EventDecodeError, LedgerError
from schemas.events import AttemptHeartbeat, Event, MeterTick
from schemas.views import JobView
from services.ledger import Ledger
from services.ledger.client import partition_for
from services.processors import dispatch, watchdog
from services.processors.store import LOCAL, JobStore
from services.settings import Settings

log = logging.getLogger(__name__)

PROCESSORS = ("dispatch", "state", "watchdog", "classifier", "accounting")

BATCH_MAX = 500
"""Records an agent takes at once; their side effects are awaited together."""
BATCH_WITHIN_S = 0.02
"""How long an agent waits to fill a batch (added latency at low traffic)."""
DECODE_CACHE = 20_000
"""Decoded records kept so the worker's agents decode each record once."""


@dataclass
class Batch:
    """What one agent's batch leads to: sends in flight and views to publish."""

    pending: list[asyncio.Future[Any]] = field(default_factory=list)
    views: dict[str, int] = field(default_factory=dict)
    """Job -> offset of its latest job-event in the batch (state)."""
    accounts: set[str] = field(default_factory=set)
    """Jobs whose accounting record changed (accounting)."""


Handler = Callable[[str, int, Event, Batch], Awaitable[None]]


def utcnow() -> datetime:
    return datetime.now(UTC)


def app_id_for(settings: Settings, only: Iterable[str]) -> str:
    """Consumer group of a worker: the app id, the topic prefix and the processor subset."""
    chosen = sorted(set(only))
    prefix = re.sub(r"[^A-Za-z0-9_-]+", "-", settings.topic_prefix).strip("-")
    name = f"{settings.processors_app_id}-{prefix}"
    return name if chosen == sorted(PROCESSORS) else f"{name}-{'-'.join(chosen)}"


class Processors:
    """A faust app with the chosen processors' agents; built by :func:`build_processors`."""

    def __init__(self, settings: Settings, only: Iterable[str], app_id: str | None = None) -> None:
        chosen = tuple(p for p in PROCESSORS if p in set(only))
        unknown = set(only) - set(PROCESSORS)
        if unknown or not chosen:
            raise ValueError(
                f"unknown processors {sorted(unknown)}; choose from {', '.join(PROCESSORS)}"
            )
        self.settings = settings
        self.only = chosen
        self.app_id = app_id or app_id_for(settings, chosen)
        self.ledger = Ledger(settings, f"processors-{socket.gethostname()}")
        self.store = JobStore(self.ledger, with_ticks="accounting" in chosen)
        self.thresholds = watchdog.Thresholds(
            silence_s=settings.watchdog_silence_s,
            lost_after_s=settings.watchdog_lost_after_s,
            finishing_timeout_s=settings.watchdog_finishing_timeout_s,
            producer=f"watchdog/{socket.gethostname()}",
        )
        self._dirty: set[str] = set()
        self._watches: dict[str, watchdog.Watch] = {}
        self._views: dict[tuple[str, str], tuple[float, JobView]] = {}
        """(agent, job) -> (offset, view as of that offset); one cache per agent, so agents
        at different offsets of the same job do not make each other fold from scratch."""
        self._decoded: dict[tuple[str, int, int], Event | None] = {}
        self._beaten: set[str] = set()
        self._bases: dict[str, watchdog.Watch] = {}
        if "watchdog" in chosen:
            self.store.on_job_changed.append(self._dirty.add)
            self.store.on_heartbeat.append(self._beaten.add)
        self.app = self._build_app()
        self._started = False
        self.crashed = asyncio.Event()
        """Set when a processor failed; the worker must stop without a graceful commit."""
        self.error: BaseException | None = None

    async def _fail(self, name: str, exc: Exception) -> None:
        """Crash-only: never return, so faust never acks (and commits) the failed batch.

        Leaving the loop body with an exception would close ``take_events``, which acks
        the batch in its ``finally``. The owner of the worker (the CLI) sees
        :attr:`crashed` and exits at once; the next worker re-processes the batch.
        """
        log.exception("processor %s failed; stopping this worker", name, exc_info=exc)
        self.error = exc
        self.crashed.set()
        await asyncio.Event().wait()

    # ----------------------------------------------------------------------- faust wiring

    def _build_app(self) -> faust.App:
        s = self.settings
        (s.home / "faust").mkdir(parents=True, exist_ok=True)
        app = faust.App(
            self.app_id,
            broker=f"kafka://{s.kafka_bootstrap}",
            processing_guarantee="at_least_once",
            web_enabled=False,
            autodiscover=False,
            topic_disable_leader=True,
            topic_allow_declare=False,
            topic_partitions=s.job_partitions,
            consumer_auto_offset_reset="earliest",
            broker_commit_interval=1.0,
            broker_session_timeout=s.processors_session_timeout_s,
            broker_heartbeat_interval=s.processors_heartbeat_interval_s,
            # A restarted worker rejoins quickly; do not wait a minute for the dead member.
            broker_rebalance_timeout=max(s.processors_session_timeout_s, 10.0),
            producer_acks=-1,
            stream_wait_empty=False,
            store="memory://",
            # faust keeps a data folder per app; under the home, not the working directory.
            datadir=str(s.home / "faust" / "{conf.id}-data"),
        )

        def topic(suffix: str) -> faust.TopicT:
            return app.topic(
                s.topic(suffix),
                key_type=bytes,
                value_type=bytes,
                key_serializer="raw",
                value_serializer="raw",
                partitions=s.job_partitions,
                internal=False,
            )

        job_events = topic("job-events")
        # One agent per processor, so a slow one does not hold the others back.
        owner = True
        for name in self.only:
            handler = getattr(self, f"_on_job_event_{name}", None)
            self._agent(app, job_events, f"{name}-job-events", handler, owner)
            owner = False
        if "watchdog" in self.only:
            self._agent(app, topic("heartbeats"), "watchdog-heartbeats", None, True)
            app.timer(interval=s.watchdog_tick_s, name="watchdog-timer")(self._watchdog_tick)
        if "accounting" in self.only:
            self._agent(app, topic("meter-ticks"), "accounting-meter-ticks", None, True)

        @app.on_partitions_revoked.connect  # type: ignore[misc, arg-type]
        async def _revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
            for tp in revoked:
                if tp.topic == s.topic("job-events"):
                    self.store.forget_partition(tp.partition)

        return app

    def _agent(
        self,
        app: faust.App,
        channel: faust.TopicT,
        name: str,
        handler: Handler | None,
        dead_letters: bool,
    ) -> None:
        async def process(stream: faust.StreamT) -> None:
            # faust acks a batch from take_events only after this body returns, so every
            # append and publish of the batch is on the broker before its offsets commit.
            async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):  # type: ignore[attr-defined]
                try:
                    batch = Batch()
                    for event in events:
                        await self._process(event.message, handler, name, dead_letters, batch)
                    await self._flush(batch)
                except Exception as exc:
                    await self._fail(name, exc)

        app.agent(channel, name=name, concurrency=1)(process)

    async def _decode(self, message: Any, name: str, dead_letters: bool) -> Event | None:
        """Decode once per record for all agents of this worker; one of them dead-letters."""
        where = (message.topic, message.partition, message.offset)
        if where in self._decoded:
            return self._decoded[where]
        raw = SimpleNamespace(
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            timestamp=int((message.timestamp or 0) * 1000),
        )
        value: Any
        if dead_letters:
            record = await self.ledger.decode(raw, f"processors/{name}")
            value = record.value if record is not None else None
        else:
            try:
                value = codec.decode(raw.value) if raw.value is not None else None
            except EventDecodeError:
                return None  # the owning agent dead-letters it
        event = value if isinstance(value, Event) else None
        self._decoded[where] = event
        if len(self._decoded) > DECODE_CACHE:
            for key in list(itertools.islice(self._decoded, DECODE_CACHE // 4)):
                del self._decoded[key]
        return event

    async def _process(
        self, message: Any, handler: Handler | None, name: str, dead_letters: bool, batch: Batch
    ) -> None:
        value = await self._decode(message, name, dead_letters)
        if value is None:
            return
        await self.store.ensure(message.partition, utcnow())
        if isinstance(value, AttemptHeartbeat):
            self.store.add_heartbeat(value)
        elif isinstance(value, MeterTick):
            self.store.add_tick(value)
            batch.accounts.add(value.job_id)
        else:
            self.store.add(value.job_id, message.offset, value)
            if handler is not None:
                await handler(value.job_id, message.offset, value, batch)

    async def _flush(self, batch: Batch) -> None:
        """Publish the batch's views once per job, then wait for every send of the batch."""
        from projections.accounting import account

        for job_id, offset in batch.views.items():
            batch.pending.append(
                await self._send_view("job-state", job_id, self._view(job_id, offset, "state"))
            )
        for job_id in batch.accounts:
            job = self.store.log(job_id)
            if job.events:  # ticks before the submission was read wait for the next job-event
                view = self._latest_view(job_id, "accounting")
                record = account(job.read(), list(job.ticks.values()), view=view)
                batch.pending.append(await self._send_view("accounting", job_id, record))
        for future in batch.pending:
            try:
                await future
            except KafkaError as exc:
                raise LedgerError(f"the broker did not acknowledge an append: {exc}") from exc

    async def _send_view(self, suffix: str, key: str, value: BaseModel) -> asyncio.Future[Any]:
        return await self.ledger.producer.send(
            self.settings.topic(suffix),
            value=codec.encode(value),
            key=key.encode(),
            headers=codec.headers(value),
        )

    def _view(self, job_id: str, offset: float, agent: str) -> JobView:
        """The job's view as of ``offset`` (a read offset, not LOCAL), folded on from the
        ``agent``'s last one when possible."""
        from projections.job_state import evolve, project

        job = self.store.log(job_id)
        cached = self._views.get((agent, job_id))
        if cached is None or cached[0] > offset:
            view = project(job.prefix(offset))
        else:
            view = cached[1]
            for event in job.between(cached[0], offset):
                view = evolve(view, event)
        self._views[(agent, job_id)] = (offset, view)
        return view

    def _latest_view(self, job_id: str, agent: str) -> JobView:
        """The view of every known event of the job (``project(job.read())``), including
        this process's appends not yet read back, which are folded on but not cached."""
        from projections.job_state import evolve, project

        job = self.store.log(job_id)
        read = bisect.bisect_left(job.offsets, LOCAL)
        if read == 0:
            return project(job.read())
        view = self._view(job_id, job.offsets[read - 1], agent)
        for event in job.events[read:]:
            view = evolve(view, event)
        return view

    # ----------------------------------------------------------------------- processors

    async def _on_job_event_state(
        self, job_id: str, offset: int, event: Event, batch: Batch
    ) -> None:
        batch.views[job_id] = max(offset, batch.views.get(job_id, offset))

    async def _on_job_event_accounting(
        self, job_id: str, offset: int, event: Event, batch: Batch
    ) -> None:
        batch.accounts.add(job_id)

    async def _on_job_event_classifier(
        self, job_id: str, offset: int, event: Event, batch: Batch
    ) -> None:
        from projections.decisions import react

        job = self.store.log(job_id)
        # react judges the event as of its first occurrence (a redelivered event is judged
        # as it was the first time), so the view is the one as of that offset, never later.
        at = job.ids.get(event.event_id, offset)
        view = self._view(job_id, at, "classifier") if at <= offset else None
        await self._append_new(job_id, react(job.prefix(offset), event, view=view), batch)

    async def _on_job_event_dispatch(
        self, job_id: str, offset: int, event: Event, batch: Batch
    ) -> None:
        job = self.store.log(job_id)
        for command in dispatch.commands_for(job.prefix(offset), job.read(), event, utcnow()):
            node_id = getattr(command, "node_id", "")
            future = await self.ledger.producer.send(
                self.settings.topic("node-commands"),
                value=codec.encode(command),
                key=node_id.encode(),
                headers=codec.headers(command),
            )
            batch.pending.append(future)

    async def _watchdog_tick(self) -> None:
        if self.crashed.is_set():
            return
        try:
            await self._watchdog_check(utcnow())
        except Exception as exc:
            log.exception("watchdog check failed; stopping this worker")
            self.error = exc
            self.crashed.set()

    async def _watchdog_check(self, now: datetime) -> None:
        topic = self.settings.topic("job-events")
        for tp in self.app.consumer.assignment():
            if tp.topic == topic:
                await self.store.ensure(tp.partition, now)
        partitions = self.settings.job_partitions
        # Refold a job's events only when they changed; a heartbeat only updates the watch.
        changed = self._dirty | self._beaten
        while self._dirty:
            job_id = self._dirty.pop()
            floor = self.store.loaded_at.get(partition_for(job_id, partitions))
            base = watchdog.watch_of(self.store.log(job_id).read(), None, floor)
            if base is None:
                self._bases.pop(job_id, None)
            else:
                self._bases[job_id] = base
        self._beaten.clear()
        for job_id in changed:
            base = self._bases.get(job_id)
            beats = self.store.log(job_id).heartbeats
            found = watchdog.with_heartbeat(base, beats.get(base.attempt) if base else None)
            if found is None:
                self._watches.pop(job_id, None)
            else:
                self._watches[job_id] = found
        for job_id, watch in list(self._watches.items()):
            due = watchdog.overdue(watch, now, self.thresholds)
            if due:
                await self._append_new(job_id, due)

    async def _append_new(
        self, job_id: str, events: list[Event], batch: Batch | None = None
    ) -> None:
        """Append the events this job's log does not hold yet (by id)."""
        job = self.store.log(job_id)
        new = [e for e in events if not job.has(e.event_id)]
        if not new:
            return
        if batch is None:
            await self.ledger.append_many(new)
        else:
            for event in new:
                batch.pending.append(
                    await self.ledger.producer.send(
                        self.ledger.topic_of(event),
                        value=codec.encode(event),
                        key=event.key.encode(),
                        headers=codec.headers(event),
                    )
                )
        for event in new:
            self.store.add(job_id, LOCAL, event)

    # ----------------------------------------------------------------------- lifecycle

    async def start(self) -> Processors:
        await self.ledger.start()
        await self.app.start()
        self._started = True
        return self

    async def stop(self) -> None:
        if self._started:
            await self.app.stop()
            self._started = False
        await self.ledger.stop()

    async def run_forever(self) -> None:
        """Start, wait until cancelled (SIGINT/SIGTERM in the CLI), stop."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()


def build_processors(
    settings: Settings, only: Iterable[str] | None = None, app_id: str | None = None
) -> Processors:
    """Composition root of the processors worker (all of them unless ``only`` is given)."""
    return Processors(settings, only if only is not None else PROCESSORS, app_id)
