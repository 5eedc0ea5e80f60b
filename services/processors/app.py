"""The stream processors: one faust app (faust-streaming 0.15.3) per worker.

Processors (``--only`` picks a subset; each subset is its own consumer group):

- ``dispatch``: AttemptScheduled / CancelRequested -> ``node-commands`` keyed by node.
- ``state``: job-events -> ``projections.job_state.project`` -> ``job-state``.
- ``watchdog``: heartbeats + job-events + a timer -> :func:`.watchdog.overdue`.
- ``classifier``: job-events -> ``projections.decisions.react`` -> derived job-events
  (FailureClassified, RetryScheduled, the terminal event).
- ``accounting``: job-events + meter-ticks -> ``projections.accounting.account`` -> ``accounting``.

One member of the worker's consumer group (:class:`JobEventsConsumer`, a faust/mode
``Service`` of the app, reading through the ledger's one subscription) reads every
topic the chosen processors read (job-events, plus heartbeats for the watchdog and
meter-ticks for accounting) a whole batch at a time, decoded by the subscription
(which parks an undecodable record once), and hands each batch to
:class:`.step.Step`, which offers every record to each chosen processor (parking one
a processor cannot apply) and awaits the batch's sends once. Only then are the batch's
offsets committed, so a crash re-delivers exactly what was not yet acknowledged.

faust is the worker's framework: the app and its lifecycle, the consumer as one
of its services, the watchdog's timer, its sensors (fed with the group's rebalances
and commits). Its own consumer, agents
and conductor are switched off (``BootStrategy(enable_kafka=False)``): faust
delivers records one callback at a time, about 200 us of CPU per record on a
small machine before any of ours, which capped a worker near 5,000 records/s;
a batch from ``getmany`` costs a few microseconds per record (see
bench/README.md, pipeline). Correctness across crashes comes from committing
after the acks, deterministic event ids and the :class:`.store.JobStore`
rebuild, not from faust.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import weakref
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import faust
from mode import Service

from schemas.events import Event
from services.clock import utcnow
from services.ledger import Ledger, LedgerPort, TopicPartition
from services.ledger.client import BrokerUnavailableError, broker_unavailable, partition_for
from services.ledger.subscription import Subscription
from services.ops import metrics
from services.ops.logs import event_context
from services.processors import watchdog
from services.processors.step import PROCESSORS, Batch, Step
from services.processors.store import JobStore
from services.settings import Settings
from services.transport import kafka_options

log = logging.getLogger(__name__)


def faust_credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    """The faust app's broker credentials: the same TLS and SASL as every other Kafka
    client (services.transport), in faust's terms; None for plaintext."""
    options = kafka_options(settings)
    protocol = options["security_protocol"]
    if protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=options["sasl_plain_username"],
            password=options["sasl_plain_password"],
            ssl_context=options.get("ssl_context"),
            mechanism=options["sasl_mechanism"],
        )
    context = options.get("ssl_context")
    return faust.SSLCredentials(context) if context is not None else None


BATCH_MAX = 1000
"""Records the consumer takes at once; their side effects are awaited together."""
PROBE_TIMEOUT_MS = 2000
"""How long the watchdog's probe of the heartbeat end offsets may take: a broker that
does not answer within it counts as unreachable (the watchdog is deaf)."""
POLL_TIMEOUT_MS = 200
"""How long one ``getmany`` waits when nothing is there (it returns at once when
records are: no added latency, and batches grow with the load)."""


def app_id_for(settings: Settings, only: Iterable[str]) -> str:
    """Consumer group of a worker: the app id, the topic prefix and the processor subset."""
    chosen = sorted(set(only))
    prefix = re.sub(r"[^A-Za-z0-9_-]+", "-", settings.topic_prefix).strip("-")
    name = f"{settings.processors_app_id}-{prefix}"
    return name if chosen == sorted(PROCESSORS) else f"{name}-{'-'.join(chosen)}"


def topics_for(only: Iterable[str]) -> tuple[str, ...]:
    """Topic suffixes the chosen processors consume."""
    chosen = set(only)
    return (
        "job-events",
        *(("heartbeats",) if "watchdog" in chosen else ()),
        *(("meter-ticks",) if "accounting" in chosen else ()),
    )


class Processors:
    """A faust app with one agent for the chosen processors; built by :func:`build_processors`."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerPort,
        only: Iterable[str],
        app_id: str | None = None,
    ) -> None:
        chosen = tuple(p for p in PROCESSORS if p in set(only))
        unknown = set(only) - set(PROCESSORS)
        if unknown or not chosen:
            raise ValueError(
                f"unknown processors {sorted(unknown)}; choose from {', '.join(PROCESSORS)}"
            )
        self.settings = settings
        self.only = chosen
        self.app_id = app_id or app_id_for(settings, chosen)
        self.ledger = ledger
        self.store = JobStore(
            self.ledger,
            with_ticks="accounting" in chosen,
            keep_settled=settings.processors_keep_settled,
        )
        self.step = Step(
            settings, self.ledger, self.store, chosen, f"processors/{'+'.join(chosen)}"
        )
        self.hearing = watchdog.Hearing(
            # At most half the silence: a lag that long must never pass for silence.
            lag_threshold_s=min(settings.watchdog_lag_threshold_s, settings.watchdog_silence_s / 2)
        )
        """When this worker's watchdog could hear heartbeats (see :meth:`_probe`)."""
        self._probes: deque[tuple[datetime, dict[int, int]]] = deque(maxlen=1024)
        """(probe time, heartbeats partition -> end offset) not yet known to be processed."""
        self._heard_through: datetime | None = None
        self._told_deaf = False
        """Whether the log last said the watchdog cannot hear (it says so on change only)."""
        self.thresholds = watchdog.Thresholds(
            silence_s=settings.watchdog_silence_s,
            lost_after_s=settings.watchdog_lost_after_s,
            finishing_timeout_s=settings.watchdog_finishing_timeout_s,
            producer=f"watchdog/{socket.gethostname()}",
        )
        self._dirty: set[str] = set()
        self._watches: dict[str, watchdog.Watch] = {}
        self._beaten: set[str] = set()
        self._bases: dict[str, watchdog.Watch] = {}
        if "watchdog" in chosen:
            self.store.on_job_changed.append(self._dirty.add)
            self.store.on_heartbeat.append(self._beaten.add)
            self.store.on_dropped.append(self._unwatch)
        self.consumer = JobEventsConsumer(self)
        self.app = self._build_app()
        self._started = False
        self.crashed = asyncio.Event()
        """Set when a processor failed; the worker must stop without a graceful commit."""
        self.error: BaseException | None = None

    def _unwatch(self, job_id: str) -> None:
        """The store dropped a settled job's history: nothing of it is left to watch."""
        self._dirty.discard(job_id)
        self._beaten.discard(job_id)
        self._bases.pop(job_id, None)
        self._watches.pop(job_id, None)

    def fail(self, exc: BaseException) -> None:
        """Crash-only: the worker stops consuming, the batch in hand uncommitted, and its
        owner (the CLI) sees :attr:`crashed` and exits at once; the next worker
        re-processes the batch."""
        log.exception("processors %s failed; stopping this worker", self.only, exc_info=exc)
        self.error = exc
        self.crashed.set()

    # ----------------------------------------------------------------------- faust wiring

    def _build_app(self) -> faust.App:
        s = self.settings
        (s.home / "faust").mkdir(parents=True, exist_ok=True)
        app = faust.App(
            self.app_id,
            broker=f"kafka://{s.kafka_bootstrap}",
            broker_credentials=faust_credentials(s),
            web_enabled=False,
            autodiscover=False,
            store="memory://",
            # faust keeps a data folder per app; under the home, not the working directory.
            datadir=str(s.home / "faust" / "{conf.id}-data"),
        )
        # No faust consumer, producer, conductor or tables: the records come in batches
        # from JobEventsConsumer and the sends go out through the Ledger's producer.
        app.boot_strategy = faust.App.BootStrategy(app, enable_kafka=False)
        app.add_dependency(self.consumer)
        if "watchdog" in self.only:
            app.timer(interval=s.watchdog_tick_s, name="watchdog-timer")(self._watchdog_tick)
        return app

    def assignment(self) -> set[TopicPartition]:
        """The partitions this worker consumes now (empty before it joined its group)."""
        return self.consumer.assignment()

    # ----------------------------------------------------------------------- watchdog

    async def _watchdog_tick(self) -> None:
        if self.crashed.is_set():
            return
        now = utcnow()
        try:
            await self._hear(now)
            await self._watchdog_check(now)
        except Exception as exc:  # noqa: BLE001 - crash-only: fail logs it
            if broker_unavailable(exc):
                # The broker went away mid-check: this tick decides nothing, the next one
                # tries again (the probe has already made the watchdog deaf meanwhile).
                self.step.outage.down(exc)
                return
            self.fail(exc)

    async def _hear(self, now: datetime) -> None:
        """Probe what the broker holds on the watchdog's heartbeat partitions and fold the
        answer into :attr:`hearing`, logging once when it turns deaf and once when not."""
        heard_through, why = await self._probe(now)
        self.hearing = self.hearing.observe(heard_through)
        deaf = self.hearing.is_deaf(utcnow())
        if deaf == self._told_deaf or (deaf and self.hearing.heard is None and not why):
            return  # no change, or a worker still catching up after its start: no news
        self._told_deaf = deaf
        if deaf:
            log.warning(
                "watchdog cannot hear heartbeats (%s); silence is not counted and no attempt "
                "is declared unresponsive or lost until it can",
                why
                or f"processing trails the broker by more than {self.hearing.lag_threshold_s:g} s",
            )
        else:
            gap = self.hearing.deaf[-1] if self.hearing.deaf else (now, now)
            log.warning(
                "watchdog hears heartbeats again; %.1f s of deafness are not counted as silence",
                (gap[1] - gap[0]).total_seconds(),
            )

    async def _probe(self, now: datetime) -> tuple[datetime | None, str]:
        """(heard_through, why not): the latest probe time whose heartbeat end offsets
        this worker has processed, and what stopped the probe ("" when it answered).

        Receive progress, not the agents' clocks: a probe at ``t`` is heard once every
        heartbeat the broker held at ``t`` on this worker's partitions is processed.
        """
        topic = self.settings.topic("heartbeats")
        tps = sorted(
            (tp for tp in self.assignment() if tp.topic == topic),
            key=lambda tp: tp.partition,
        )
        if not tps:
            # Nothing assigned: nothing to miss (and nothing of this worker's to watch).
            self._probes.clear()
            self._heard_through = now
            return now, ""
        why = ""
        try:
            ends = await self.ledger.end_offsets(
                topic, [tp.partition for tp in tps], timeout_s=PROBE_TIMEOUT_MS / 1000
            )
            self._probes.append((now, {p: ends[p] for p in sorted(ends)}))
        except BrokerUnavailableError as exc:
            why = str(exc)
        processed = dict(self.step.heard_offsets)
        for tp in tps:
            if tp.partition not in processed:
                position = await self.consumer.position(tp)
                if position is not None:
                    processed[tp.partition] = position
        while self._probes and all(
            processed.get(p, 0) >= end for p, end in self._probes[0][1].items()
        ):
            self._heard_through = self._probes.popleft()[0]
        return self._heard_through, why

    async def _watchdog_check(self, now: datetime) -> None:
        topic = self.settings.topic("job-events")
        assigned = {tp.partition for tp in self.assignment() if tp.topic == topic}
        for partition in assigned:
            await self.store.ensure(partition, now)
        partitions = self.settings.job_partitions
        # Refold a job's events only when they changed; a heartbeat only updates the watch.
        changed = self._dirty | self._beaten
        while self._dirty:
            job_id = self._dirty.pop()
            floor = self.store.loaded_at.get(partition_for(job_id, partitions))
            job = self.store.log(job_id)
            base = watchdog.watch_of(job.events, None, floor, job.heard)
            if base is None:
                self._bases.pop(job_id, None)
            else:
                self._bases[job_id] = base
        self._beaten.clear()
        for job_id in changed:
            base = self._bases.get(job_id)
            job = self.store.log(job_id)
            beat = job.heartbeats.get(base.attempt) if base else None
            found = watchdog.with_heartbeat(
                base, beat, job.heard.get(beat.event_id) if beat else None
            )
            if found is None:
                self._watches.pop(job_id, None)
            else:
                self._watches[job_id] = found
        batch = Batch()
        hearing = self.hearing
        for job_id, watch in list(self._watches.items()):
            if partition_for(job_id, partitions) not in assigned:
                continue  # another worker watches it now
            due: list[Event] = watchdog.overdue(watch, now, self.thresholds, hearing)
            if due:
                for verdict in self.step.append_new(job_id, due, batch):
                    # Rare and what an operator looks for: every verdict gets a line.
                    log.info(
                        "watchdog: %s",
                        verdict.type,
                        extra={"node_id": watch.node_id, **event_context(verdict)},
                    )
        if batch.sends:
            await self.step.flush(batch)

    # ----------------------------------------------------------------------- lifecycle

    async def start(self) -> Processors:
        """Start the ledger (waiting for a broker that is still coming up), then the faust
        worker."""
        await self.ledger.start(wait=True)  # a broker still coming up is waited for
        await self.app.start()
        self._started = True
        return self

    async def stop(self) -> None:
        """Stop the worker, then the ledger."""
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


class JobEventsConsumer(Service):
    """The worker's hot path, one of the faust app's services: the ledger's subscription
    for the worker's consumer group, a whole batch at a time.

    One member of the worker's consumer group (:func:`app_id_for`) on every topic the
    chosen processors read. Each batch (records in partition order) goes through
    :meth:`.step.Step.run`, which returns once the broker acknowledged every send the
    batch led to; only then does the subscription commit the batch's offsets (a
    rebalance waits for that). A record a processor cannot apply is parked by the step
    and the batch goes on; a step that fails otherwise (its sends) crashes the worker
    without a commit (:meth:`Processors.fail`), and a batch cut short by a stop or a
    rebalance is simply re-delivered: every derived event has a deterministic id, so a repeat is a
    duplicate every reader drops. The group's rebalances and the commits feed faust's
    sensors, as faust's own consumer would.
    """

    def __init__(self, processors: Processors) -> None:
        super().__init__()
        self.processors = processors
        self.subscription: Subscription | None = None
        """The subscription while the service runs."""
        self.generations = 0
        """How many assignments this member received (0: not a member yet)."""
        self.rebalancing = False
        """Between a revoke and the next assignment."""
        self.rebalance: dict[Any, Any] | None = None
        """faust's sensors' state of the rebalance in progress."""
        self._task: asyncio.Task[None] | None = None

    async def on_start(self) -> None:
        """Join the processors' group and start consuming in batches."""
        p = self.processors
        s = p.settings
        self.subscription = p.ledger.subscribe(
            [s.topic(suffix) for suffix in topics_for(p.only)],
            name=p.step.consumer_name,
            group=p.app_id,
            max_records=BATCH_MAX,
            wait_ms=POLL_TIMEOUT_MS,
            watch=self,
            options={
                "session_timeout_ms": int(s.processors_session_timeout_s * 1000),
                "heartbeat_interval_ms": int(s.processors_heartbeat_interval_s * 1000),
                # A restarted worker rejoins quickly; do not wait a minute for the dead member.
                "rebalance_timeout_ms": int(max(s.processors_session_timeout_s, 10.0) * 1000),
                "max_poll_records": BATCH_MAX,
            },
        )
        self._task = asyncio.create_task(self._consume(self.subscription), name="processors")

    async def on_stop(self) -> None:
        """Stop consuming and leave the group."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.subscription = None

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member consumes now (empty before it joined its group)."""
        return self.subscription.assignment() if self.subscription is not None else set()

    async def position(self, tp: TopicPartition) -> int | None:
        """The next offset this member will read of ``tp`` (None: not assigned)."""
        if self.subscription is None or tp not in self.subscription.assignment():
            return None
        return await self.subscription.position(tp)

    async def _consume(self, subscription: Subscription) -> None:
        """Hand every batch to the step; anything unexpected crashes the worker (never a
        silent end of the task while the process looks alive), the batch uncommitted."""
        step = self.processors.step
        try:
            async with subscription:
                async for batch in subscription:
                    if batch:
                        await step.run(batch)
        except Exception as exc:  # noqa: BLE001 - crash-only: fail logs it
            self.processors.fail(exc)

    # ----------------------------------------------------------------------- what it hears

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """A new assignment: the rebalance has ended."""
        self.generations += 1
        self.rebalancing = False
        if self.rebalance is not None:
            app = self.processors.app
            app.sensors.on_rebalance_end(app, self.rebalance)
            self.rebalance = None

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Partitions moved away (their batch in hand committed): forget the rebuilt state
        of a job-events partition this worker no longer owns."""
        self.rebalancing = True
        app = self.processors.app
        self.rebalance = app.sensors.on_rebalance_start(app)
        topic = self.processors.settings.topic("job-events")
        for tp in partitions:
            if tp.topic == topic:
                self.processors.store.forget_partition(tp.partition)

    def committed(self, offsets: dict[TopicPartition, int], started: float) -> None:
        """A batch's offsets committed: faust's sensors (its Prometheus metrics) see it."""
        app = self.processors.app
        # Each sensor's state of the commit is when it began (the monitors' clock).
        began = {sensor: started for sensor in app.sensors}
        app.sensors.on_commit_completed(cast(Any, self.subscription), began)
        app.monitor.on_tp_commit(cast(Any, offsets))


def build_processors(
    settings: Settings,
    only: Iterable[str] | None = None,
    app_id: str | None = None,
    *,
    ledger: LedgerPort | None = None,
) -> Processors:
    """Composition root of the processors worker (all of them unless ``only`` is given).

    The Kafka ledger unless ``ledger`` is given (a test's :class:`FakeLedger`, which
    drives :attr:`Processors.step` without faust or a broker).
    """
    return Processors(
        settings,
        ledger or Ledger(settings, f"processors-{socket.gethostname()}"),
        only if only is not None else PROCESSORS,
        app_id,
    )


_SENSORED: weakref.WeakSet[Any] = weakref.WeakSet()
"""faust apps whose sensor is installed: a second install would register its metrics twice."""


def install_faust_sensor(app: Any) -> bool:
    """Install faust's Prometheus sensor, recording into gridledger's registry.

    ``setup_prometheus_sensors`` also registers a ``/metrics`` page on faust's own
    web server, which the processors leave off (``web_enabled=False``): the
    registry is served by the ops server instead. Metric names start ``faust_``.
    """
    try:
        from faust.sensors.prometheus import setup_prometheus_sensors
    except ImportError as exc:  # pragma: no cover - part of faust-streaming
        log.warning("faust's Prometheus sensor is unavailable: %s", exc)
        return False
    if app in _SENSORED:
        return True
    try:
        setup_prometheus_sensors(app, registry=metrics.REGISTRY, name_prefix="faust")
    except ValueError as exc:
        # A second worker in one process (tests) would register the same names twice.
        log.info("faust sensor already registered in this process: %s", exc)
        return False
    _SENSORED.add(app)
    return True
