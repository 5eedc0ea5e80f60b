"""One batch of consumed records through every chosen processor (no faust in here).

The worker's consumer hands each batch the subscription decoded to :meth:`Step.run`
(an undecodable record was parked there, once, before the batch was handed over).
Every record is added to the :class:`.store.JobStore` and offered to each chosen
processor in a fixed order; the processors only note what the record leads to. A
record a processor cannot apply (it raises: a bug that hostile input reached) is parked
on the dead-letter topic as ``unapplicable``, with the error, and the batch goes on: one
poison record never stops the worker for every job. Then the batch's sends go out:
derived events and node commands in the order they were decided, each touched job's view
once, each touched job's accounting record once; and ``run`` returns only when the
broker acknowledged all of them. The subscription commits the batch only after that,
which is what makes the worker at-least-once. Handlers are plain functions so a record
costs no awaits.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from projections.decisions import REACTS_TO, react
from projections.fold import JobState, fold
from projections.tally import Tally
from schemas import codec
from schemas.events import (
    AttemptHeartbeat,
    Event,
    MeterTick,
)
from schemas.views import TERMINAL_STATUSES, JobView
from services.backoff import retrying
from services.clock import utcnow
from services.ledger import LedgerPort, TopicPartition
from services.ledger.client import broker_unavailable, encoded
from services.ledger.port import Encoded, Keyed, LedgerRecord
from services.ops import metrics
from services.ops.logs import event_context
from services.processors import dispatch
from services.processors.snapshot import is_settled
from services.processors.store import LOCAL, JobStore
from services.settings import Settings

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Delivered(Protocol):
    """What the step reads of a batch the subscription handed over
    (:class:`services.ledger.subscription.Batch`)."""

    records: list[LedgerRecord]
    """The decoded records, in partition order (undecodable ones already parked)."""
    offsets: dict[TopicPartition, int]
    """Partition -> its next offset once the batch is handled."""

    @property
    def newest_s(self) -> float | None:
        """The broker timestamp (epoch seconds) of the batch's newest record."""
        ...

    async def park(self, record: LedgerRecord, error: Exception | str, reason: str) -> None:
        """Park one of the batch's records on the dead-letter topic."""
        ...


@dataclass
class Batch:
    """What one batch leads to, sent when the whole batch has been read."""

    sends: list[Keyed] = field(default_factory=list)
    """(topic, key, value) of derived events and node commands, in decision order."""
    views: dict[str, int] = field(default_factory=dict)
    """Job -> offset of its latest job-event in the batch (state)."""
    accounts: set[str] = field(default_factory=set)
    """Jobs whose accounting record may have changed (accounting)."""
    newest_s: float | None = None
    """Broker timestamp (epoch seconds) of the batch's newest record: decision latency."""


Handler = Callable[[str, int, Event, Batch], None]
"""What a processor does with one record of the batch: (job id, offset, event, batch)."""


class Step:
    """The chosen processors' reaction to a batch of job-events, heartbeats and meter ticks."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerPort,
        store: JobStore,
        chosen: Sequence[str],
        consumer_name: str,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.store = store
        self.consumer_name = consumer_name
        """Named in the dead-letter headers of what this worker parks."""
        self.handlers: list[Handler] = [
            partial(on, self) for name in chosen if (on := PROCESSORS[name]) is not None
        ]
        self._states: dict[str, tuple[float, JobState]] = {}
        """Job -> (read offset, its state folded up to it, in place): each job-event is
        folded once, and frozen into a JobView only when one is asked for."""
        self._tallies: dict[str, Tally] = {}
        """Job -> its accounting, folded per event (synced with the job's log when its
        record is published)."""
        store.on_dropped.append(self._forget)
        self._node_commands = settings.topic("node-commands")
        self.outage = ledger.outage
        """The broker as this process sees it: one log line when it goes, one when back."""
        self._heartbeats = settings.topic("heartbeats")
        self._job_events = settings.topic("job-events")
        self.heard_offsets: dict[int, int] = {}
        """Heartbeats partition -> next offset to process (the watchdog's receive progress)."""

    # ----------------------------------------------------------------------- the batch

    async def run(self, delivered: Delivered) -> None:
        """Apply a batch's records (in consumption order) and wait until every send is
        acked; a record a processor cannot apply is parked (``unapplicable``)."""
        batch = Batch(newest_s=delivered.newest_s)
        store = self.store
        handlers = self.handlers
        received = utcnow()
        for record in delivered.records:
            value = record.value
            if not isinstance(value, Event):
                continue
            if record.partition not in store.loaded_at:
                await self.retrying(partial(store.ensure, record.partition, utcnow()))
            if record.topic == self._job_events and not store.fence.admits(
                record.partition, record.offset, value
            ):
                continue  # a fence marker, or a deposed scheduler's decision
            if value.job_id in store.settled:
                if isinstance(value, AttemptHeartbeat):
                    continue  # nothing a settled job shows depends on a heartbeat
                await self.retrying(partial(store.unsettle, value.job_id, record.partition))
            try:
                if isinstance(value, AttemptHeartbeat):
                    store.add_heartbeat(value, record.appended_at or received)
                elif isinstance(value, MeterTick):
                    store.add_tick(value)
                    # Even a known tick: after a crash the rebuild knows it, but the record
                    # built from it may never have been published.
                    batch.accounts.add(value.job_id)
                else:
                    store.add(value.job_id, record.offset, value, record.appended_at or received)
                    for handler in handlers:
                        handler(value.job_id, record.offset, value, batch)
            except Exception as exc:  # parked with the error; the traceback is logged here
                log.warning(
                    "a processor cannot apply %s; parking it", value.type,
                    exc_info=exc, extra=event_context(value),
                )  # fmt: skip
                await delivered.park(record, exc, "unapplicable")  # through an outage
        for tp, offset in delivered.offsets.items():
            if tp.topic == self._heartbeats:
                self.heard_offsets[tp.partition] = offset
        await self.flush(batch)

    async def retrying(self, operation: Callable[[], Awaitable[_T]]) -> _T:
        """``operation`` until it succeeds, waiting out broker outages (the settings'
        reconnect backoff; one log line when the broker goes, one when it is back).

        The worker does not stop for an outage: the batch being processed is neither
        acked nor committed until its sends are acknowledged, and a retried send repeats
        events with the same deterministic ids, which every reader drops as duplicates.
        """
        return await retrying(
            operation,
            outage=self.outage,
            transient=broker_unavailable,
            backoff=self.settings.reconnect_backoff(),
        )

    async def flush(self, batch: Batch) -> None:
        """Send the batch's events, then each job's view and record once; await every ack
        (through an outage of the broker: see :meth:`retrying`)."""
        sends = batch.sends
        decisions = len(sends)
        state = self.settings.topic("job-state")
        for job_id, offset in batch.views.items():
            datum = self.state(job_id, offset).datum()
            sends.append((state, job_id, codec.Datum("JobView", job_id, datum)))
        accounting = self.settings.topic("accounting")
        settled: dict[str, bool] = {}
        for job_id in batch.accounts:
            job = self.store.log(job_id)
            if job.events:  # ticks before the submission was read wait for the next job-event
                view = self.latest_view(job_id)
                tally = self._tallies.get(job_id)
                if tally is None:
                    tally = self._tallies[job_id] = Tally(job_id)
                tally.sync(job.events)
                tally.add_new_ticks(job.ticks.values())
                record = tally.record(view)
                sends.append((accounting, job_id, record))
                settled[job_id] = is_settled(view, record)
        if sends:
            items = await self.within_limit(sends)
            # The ledger's own append path: batched per partition, acked, counted.
            await self.retrying(partial(self.ledger.append_encoded, items))
        # Only once published: a dropped job's history is reloaded from what is on the ledger.
        self.store.settled_now(settled)
        if decisions and batch.newest_s is not None:
            metrics.DECISION_LATENCY.labels(decider="processors").observe(
                max(0.0, time.time() - batch.newest_s)
            )

    async def within_limit(self, sends: list[Keyed]) -> list[Encoded]:
        """The sends encoded, none over the topic's limit (:meth:`LedgerOperations.within_limit`
        parks such a one); for a job that has not ended, a RecordRefused takes its place,
        on which the retry decider ends the job ``record_refused``."""
        kept, parked = await self.ledger.within_limit(sends, self.consumer_name)
        for item, size in parked:
            job_id = getattr(item[2], "job_id", item[1])
            job = self.store.log(job_id)
            if not job.events or self.latest_view(job_id).status in TERMINAL_STATUSES:
                continue  # nothing left to decide (or a job not known here)
            fact = self.ledger.record_refused(job.events[-1], "processors", item, size)
            if not job.has(fact.event_id):
                self.store.add(job_id, LOCAL, fact)
                kept += encoded([(self.ledger.topic_of(fact), fact.key, fact)])
        return kept

    def _forget(self, job_id: str) -> None:
        """The store dropped the job's history: drop the view and accounting derived from it."""
        self._states.pop(job_id, None)
        self._tallies.pop(job_id, None)

    # ----------------------------------------------------------------------- views

    def state(self, job_id: str, offset: float) -> JobState:
        """The job's state as of read offset ``offset``, folded on from the cached one
        (the cached one itself, changed in place; a fresh one for an earlier offset)."""
        job = self.store.log(job_id)
        cached = self._states.get(job_id)
        if cached is not None and cached[0] <= offset:
            state: JobState | None = fold(job.between(cached[0], offset), cached[1])
        else:
            state = fold(job.prefix(offset))
        if state is None:
            raise ValueError(f"job {job_id!r} has no event up to offset {offset}")
        if cached is None or cached[0] <= offset:
            self._states[job_id] = (offset, state)
        return state  # an earlier offset (a redelivery): the later state stays cached

    def view(self, job_id: str, offset: float) -> JobView:
        """The job's view as of read offset ``offset`` (``project(job.prefix(offset))``)."""
        return self.state(job_id, offset).freeze()

    def latest_view(self, job_id: str) -> JobView:
        """The view of every known event of the job (``project(job.read())``), including
        this process's appends not yet read back, which are folded on a copy."""
        job = self.store.log(job_id)
        read = bisect.bisect_left(job.offsets, LOCAL)
        if read == 0:
            state = fold(job.events)
        else:
            state = self.state(job_id, job.offsets[read - 1])
            if read < len(job.events):
                state = fold(job.events[read:], state.copy())
        if state is None:
            raise ValueError(f"job {job_id!r} has no event")
        return state.freeze()

    # ----------------------------------------------------------------------- processors

    def on_dispatch(self, job_id: str, offset: int, event: Event, batch: Batch) -> None:
        """Route what goes to a node (placements, cancels, supersessions) as node commands."""
        if not isinstance(event, dispatch.TO_NODE):
            return  # nothing else goes to a node
        job = self.store.log(job_id)
        for command in dispatch.commands_for(job.prefix(offset), job.events, event, utcnow()):
            batch.sends.append((self._node_commands, getattr(command, "node_id", ""), command))

    def on_state(self, job_id: str, offset: int, event: Event, batch: Batch) -> None:
        """Mark the job's view to be published as of its latest offset in the batch."""
        batch.views[job_id] = max(offset, batch.views.get(job_id, offset))

    def on_classifier(self, job_id: str, offset: int, event: Event, batch: Batch) -> None:
        """Append what the classifier and the retry decider derive from the event."""
        if not isinstance(event, REACTS_TO):
            return
        job = self.store.log(job_id)
        # react judges the event as of its first occurrence (a redelivered event is judged
        # as it was the first time), so the view is the one as of that offset, never later.
        at = job.ids.get(event.event_id, offset)
        view = self.view(job_id, at) if at <= offset else None
        self.append_new(job_id, react(job.prefix(offset), event, view=view), batch)

    def on_accounting(self, job_id: str, offset: int, event: Event, batch: Batch) -> None:
        """Mark the job's accounting record to be computed and published."""
        batch.accounts.add(job_id)

    def append_new(self, job_id: str, events: list[Event], batch: Batch) -> list[Event]:
        """Queue the events this job's log does not hold yet (by id); they count as known
        (at offset LOCAL) from now on. Returns them."""
        job = self.store.log(job_id)
        new = [e for e in events if not job.has(e.event_id)]
        for event in new:
            batch.sends.append((self.ledger.topic_of(event), event.key, event))
            self.store.add(job_id, LOCAL, event)
        if new and log.isEnabledFor(logging.DEBUG):  # every decision, for tracing one job
            for event in new:
                log.debug("decided %s", event.type, extra=event_context(event))
        return new


PROCESSORS: Mapping[str, Callable[[Step, str, int, Event, Batch], None] | None] = {
    "dispatch": Step.on_dispatch,
    "state": Step.on_state,
    "watchdog": None,  # its timer judges the waits (Processors); records only feed the store
    "classifier": Step.on_classifier,
    "accounting": Step.on_accounting,
}
"""The processors one worker can run (``--only``), in the order each record is offered to
them, with what each does with a record. The producers of the events they derive are
:data:`projections.decisions.DECISION_PRODUCERS`, a different list."""
