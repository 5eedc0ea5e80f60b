"""The sink's pure-step-plus-write: apply a batch of ledger records to the read models.

Called inside one transaction together with the offset update (see
:mod:`services.sink.consumer`), and by the replay tool on a scratch schema, so
the live tables and the rebuilt ones come from the same code.

Idempotence: job and node events are stored once per ``event_id`` and only a
newly stored event is folded; log chunks and meter ticks are stored once per
natural key. A record delivered twice therefore changes nothing.

The leader fence (:mod:`projections.fence`): a scheduler decision of a deposed leader
is not applied. The fence markers read are stored (``leader_fence``) with the rows, so
a sink resuming at its committed offsets judges what it reads as a sink reading from
offset 0 does.

Speed: each table gets one binary COPY and one statement per batch
(:mod:`services.sink.tables`), and each job's folded state (view, stored history,
ticks) stays in memory between batches (:mod:`services.sink.job_cache`), so a batch
folds and accounts only what it adds instead of reading and re-folding every touched
job's history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import itemgetter
from typing import TypeVar

import asyncpg

from projections import accounting, prices
from projections.accounting import AccountingPolicy
from projections.fence import Fence
from projections.fold import fold
from projections.prices import PriceBook
from schemas.events import (
    Event,
    JobSubmitted,
    LeaderElected,
    LogChunk,
    MeterTick,
    NodeEvent,
    PriceCatalogPublished,
)
from schemas.spec import JobSpec
from schemas.topics import STORED_TOPICS
from schemas.views import AccountingRecord, JobView
from services.ledger.client import LedgerRecord
from services.ops.logs import attach_context, event_context
from services.settings import Settings
from services.sink import rows
from services.sink.job_cache import DEFAULT_CAPACITY, CachedJob, JobCache, load_states
from services.sink.rows import Row
from services.sink.tables import TABLES, insert_ignore, upsert

_T = TypeVar("_T")


def default_policy() -> AccountingPolicy:
    """The accounting policy the sink applies: the current one of projections.accounting."""
    return accounting.DEFAULT_POLICY


def new_view(job_id: str) -> JobView | None:
    """The fold's starting point for a job the read models have not seen (``evolve`` takes None)."""
    return None


def account(
    history: list[Event],
    ticks: list[MeterTick],
    policy: AccountingPolicy,
    view: JobView | None = None,
) -> AccountingRecord:
    """``projections.accounting.account`` (one name for the sink and the replay tool).

    ``view`` is the job's view folded from exactly ``history``; it saves a re-fold.
    """
    return accounting.account(history, ticks, policy, view=view)


class ReadModelWriter:
    """Applies decoded ledger records to the read-model tables of the connection's schema.

    One writer serves one schema at a time and must be its only writer (the sink's
    advisory lock): it keeps each job's folded state in memory between batches
    (:mod:`services.sink.job_cache`), trusted only once its transaction committed.
    ``cache_jobs=0`` keeps nothing, so every batch reads the states it needs back.
    """

    def __init__(
        self,
        settings: Settings,
        policy: AccountingPolicy | None = None,
        *,
        cache_jobs: int = DEFAULT_CAPACITY,
    ) -> None:
        self.settings = settings
        self.policy = policy if policy is not None else default_policy()
        self.cache = JobCache(cache_jobs)
        self._suffix = {settings.topic(s): s for s in STORED_TOPICS}

    def forget(self) -> None:
        """Drop the in-memory job states (after an outage: the tables are the truth)."""
        self.cache.clear()

    def consumed_topics(self) -> list[str]:
        """The topics whose records this writer applies."""
        return list(self._suffix)

    async def apply(self, conn: asyncpg.Connection, records: Iterable[LedgerRecord]) -> None:
        """Apply ``records`` (in their Kafka order) inside the caller's transaction."""
        job_events: list[Event] = []
        chunks: list[LogChunk] = []
        ticks: list[MeterTick] = []
        node_events: list[NodeEvent] = []
        catalogs: list[PriceCatalogPublished] = []
        marks: list[Row] = []
        # Read in the batch's transaction: what the previous batches stored, whatever
        # became of this writer's memory (a rollback, another schema).
        stored = await conn.fetch("SELECT partition, from_offset, epoch FROM leader_fence")
        fence = Fence((r["partition"], r["from_offset"], r["epoch"]) for r in stored)
        for record in records:
            suffix = self._suffix.get(record.topic)
            value = record.value
            if suffix == "job-events" and isinstance(value, Event):
                if isinstance(value, LeaderElected):
                    marks.append(
                        {
                            "partition": record.partition,
                            "from_offset": record.offset,
                            "epoch": value.epoch,
                        }
                    )
                if fence.admits(record.partition, record.offset, value):
                    job_events.append(value)
            elif suffix == "log-chunks" and isinstance(value, LogChunk):
                chunks.append(value)
            elif suffix == "meter-ticks" and isinstance(value, MeterTick):
                ticks.append(value)
            elif suffix == "node-events" and isinstance(value, NodeEvent):
                node_events.append(value)
            elif suffix == "prices" and isinstance(value, PriceCatalogPublished):
                catalogs.append(value)
        if marks:
            await insert_ignore(conn, "leader_fence", marks, returning=None)
        await self.cache.begin(conn)
        batch = _Batch(conn, self.cache)
        book = await batch.prices(catalogs)
        await batch.jobs(job_events, ticks)
        await batch.log_chunks(chunks)
        await batch.node_events(node_events)
        await batch.flush(self.policy, book)
        self.cache.stage(batch.states)


def _first_per_key(items: Iterable[_T], key: Callable[[_T], Hashable]) -> list[_T]:
    """``items`` in order without the ones whose key an earlier item had."""
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def _tick_key(tick: MeterTick) -> tuple[str, int, int]:
    return (tick.job_id, tick.attempt, tick.tick_index)


class _Batch:
    """One batch's writes: each table's rows in one statement, folds only of new events.

    Events of one job (node) are numbered and folded in their Kafka order, exactly as if
    they were applied one by one; an event already stored (or earlier in the batch) is
    skipped before it gets a ``seq``.
    """

    def __init__(self, conn: asyncpg.Connection, cache: JobCache) -> None:
        self.conn = conn
        self.cache = cache
        self.states: dict[str, CachedJob] = {}
        """The touched jobs' states as this batch leaves them."""
        self.changed_views: set[str] = set()
        self.failures: list[Row] = []
        self.nodes: dict[str, Row] = {}
        self.accounting_due: set[str] = set()
        self.specs: dict[str, JobSpec] = {}
        """The spec of each job whose JobSubmitted this batch applied: stored once, in its
        jobs row."""

    async def _new_only(self, table: str, ids: list[str]) -> set[str]:
        stored = await self.conn.fetch(
            f"SELECT event_id FROM {table} WHERE event_id = ANY($1::text[])", ids
        )
        return set(ids) - {r["event_id"] for r in stored}

    async def _max_seq(self, table: str, key: str, ids: Iterable[str]) -> dict[str, int]:
        wanted = sorted(set(ids))
        found = {
            r[0]: r[1]
            for r in await self.conn.fetch(
                f"SELECT {key}, max(seq) FROM {table} WHERE {key} = ANY($1::text[]) GROUP BY {key}",
                wanted,
            )
        }
        return {k: found.get(k, 0) for k in wanted}

    async def _states(self, job_ids: Iterable[str], held_ticks: Sequence[str] = ()) -> None:
        """Put the state of every job in ``job_ids`` in ``self.states`` (cache, else tables).

        ``held_ticks``: event ids of the ticks this batch inserted, which the caller adds
        to the states itself (see :func:`load_states`).
        """
        missing = []
        for job_id in dict.fromkeys(job_ids):
            if job_id in self.states:
                continue
            state = self.cache.get(job_id)
            if state is None:
                missing.append(job_id)
            else:
                self.states[job_id] = state
        if missing:
            self.states.update(await load_states(self.conn, sorted(missing), held_ticks))

    async def jobs(self, events: list[Event], ticks: list[MeterTick]) -> None:
        """Store the new job-events and meter ticks and fold them into their jobs' states."""
        events = _first_per_key(events, lambda e: e.event_id)
        if events:
            fresh = await self._new_only("job_events", [e.event_id for e in events])
            events = [e for e in events if e.event_id in fresh]
        # Postgres decides which ticks are new (a tick index counts once) ...
        ticks = _first_per_key(ticks, _tick_key)
        inserted = await insert_ignore(
            self.conn,
            "meter_ticks",
            [rows.meter_tick_row(t) for t in ticks],
            returning="job_id, attempt, tick_index",
        )
        new_ticks = {(r[0], r[1], r[2]) for r in inserted}
        added = [t for t in ticks if _tick_key(t) in new_ticks]
        # ... and only the jobs that gained an event or a tick need their state (read
        # back without the ticks just inserted: they are added from memory here).
        await self._states(
            [*(e.job_id for e in events), *(t.job_id for t in added)],
            [t.event_id for t in added],
        )
        for tick in added:
            self.states[tick.job_id].ticks[_tick_key(tick)[1:]] = tick
            self.accounting_due.add(tick.job_id)
        if not events:
            return
        event_rows: list[Row] = []
        for event in events:
            try:
                self._fold(event, event_rows)
            except Exception as exc:
                # The sink's crash line names the event that caused it.
                attach_context(exc, **event_context(event))
                raise
        await _insert_new(self.conn, "job_events", event_rows)

    def _fold(self, event: Event, event_rows: list[Row]) -> None:
        """One new job-event into its row, its job's view and, when it decides one, a
        failure row."""
        job_id = event.job_id
        state = self.states[job_id]
        folded = state.fold
        if folded is not None and folded.resubmission(event):
            # Not the job's history: the first job stays as it was, with an anomaly.
            folded.apply(event)
            self.changed_views.add(job_id)
            return
        state.seq += 1
        event_rows.append(rows.job_event_row(event, state.seq))
        state.history.append(event)
        if isinstance(event, JobSubmitted) and (folded is None or folded.submitted_at is None):
            self.specs[job_id] = event.spec
        before = folded.failure if folded is not None else None
        state.fold = folded = fold([event], folded)
        assert folded is not None  # one event folded
        if folded.failure is not None and folded.failure != before:
            failure = rows.failure_row(folded.freeze(), event)
            if failure is not None:
                self.failures.append(failure)
        self.changed_views.add(job_id)
        self.accounting_due.add(job_id)

    async def log_chunks(self, chunks: list[LogChunk]) -> None:
        key = itemgetter(*TABLES["log_chunks"].key)
        chunk_rows = _first_per_key((rows.log_chunk_row(c) for c in chunks), key)
        await insert_ignore(self.conn, "log_chunks", chunk_rows, returning=None)

    async def node_events(self, events: list[NodeEvent]) -> None:
        events = _first_per_key(events, lambda e: e.event_id)
        if not events:
            return
        fresh = await self._new_only("node_events", [e.event_id for e in events])
        events = [e for e in events if e.event_id in fresh]
        if not events:
            return
        seq = await self._max_seq("node_events", "node_id", (e.node_id for e in events))
        event_rows = []
        for event in events:
            seq[event.node_id] += 1
            event_rows.append(rows.node_event_row(event, seq[event.node_id]))
        await _insert_new(self.conn, "node_events", event_rows)
        for stored in await self.conn.fetch(
            "SELECT * FROM nodes WHERE node_id = ANY($1::text[])", sorted(seq)
        ):
            row = dict(stored)
            for col in ("gpus", "gpu_usage"):
                # Normalise jsonb text so an unchanged node compares equal after the fold.
                row[col] = json.dumps(json.loads(row[col]), sort_keys=True)
            self.nodes[row["node_id"]] = row
        for event in events:
            node_id = event.node_id
            row = self.nodes.get(node_id) or rows.new_node_row(node_id)
            self.nodes[node_id] = rows.evolve_node(row, event)

    async def prices(self, catalogs: list[PriceCatalogPublished]) -> PriceBook | None:
        """Store the new catalog events, each with the book's verdict, and have every job
        with usage from the earliest new row's hour on priced again (a catalog never
        reaches back before its publication, so only those can change). The book, read
        back from the table, or None when nothing in the batch needs it."""
        catalogs = _first_per_key(catalogs, lambda e: e.event_id)
        if catalogs:
            fresh = await self._new_only("price_catalogs", [e.event_id for e in catalogs])
            catalogs = [e for e in catalogs if e.event_id in fresh]
        book = await load_book(self.conn)
        if not catalogs:
            return book
        seq = await self.conn.fetchval("SELECT coalesce(max(seq), 0) FROM price_catalogs")
        catalog_rows = []
        starts = []
        for event in catalogs:
            seq += 1
            problems = book.apply(event)
            catalog_rows.append(rows.price_catalog_row(event, seq, problems))
            if not problems:
                starts += [entry.effective_from for entry in event.entries]
        await _insert_new(self.conn, "price_catalogs", catalog_rows)
        if starts:
            repriced = await self.conn.fetch(
                "SELECT DISTINCT job_id FROM usage_lines WHERE period_start >= $1", min(starts)
            )
            await self._states(r["job_id"] for r in repriced)
            self.accounting_due.update(r["job_id"] for r in repriced)
        return book

    async def flush(self, policy: AccountingPolicy, book: PriceBook | None = None) -> None:
        await insert_ignore(self.conn, "failures", self.failures, returning=None)
        views = [v for j in sorted(self.changed_views) if (v := self.states[j].view) is not None]
        await upsert(self.conn, "jobs", [rows.job_row(v, self.specs.get(v.job_id)) for v in views])
        await upsert(
            self.conn,
            "attempts",
            [rows.attempt_row(v.job_id, a) for v in views for a in v.attempts],
        )
        await upsert(self.conn, "nodes", list(self.nodes.values()))
        # Ticks before the job's first event are accounted once JobSubmitted arrives.
        due = [self.states[j] for j in sorted(self.accounting_due) if self.states[j].history]
        book = book if book is not None else PriceBook()
        accounted = [
            # The view is the fold of exactly the history: it saves account() a re-fold.
            (record, prices.priced(book, record, ticks))
            for state in due
            for ticks in (state.sorted_ticks(),)
            for record in (account(state.history, ticks, policy, view=state.view),)
        ]
        records = [r for r, _ in accounted]
        await upsert(
            self.conn, "accounting_records", [rows.accounting_row(r, p) for r, p in accounted]
        )
        await upsert(
            self.conn,
            "accounting_attempts",
            [line for r in records for line in rows.accounting_attempt_rows(r)],
        )
        # A record's hours can shrink (a lost attempt ends at its last heartbeat): its
        # usage lines are replaced, not merged.
        await self.conn.execute(
            "DELETE FROM usage_lines WHERE job_id = ANY($1::text[])", [r.job_id for r in records]
        )
        await insert_ignore(
            self.conn,
            "usage_lines",
            [line for _, pieces in accounted for line in rows.usage_rows(pieces)],
            returning=None,
        )


async def load_book(conn: asyncpg.Connection) -> PriceBook:
    """The price book folded from the stored catalog events, in their topic order."""
    stored = await conn.fetch("SELECT payload FROM price_catalogs ORDER BY seq")
    return PriceBook(PriceCatalogPublished.model_validate_json(r["payload"]) for r in stored)


async def _insert_new(conn: asyncpg.Connection, table: str, event_rows: list[Row]) -> None:
    """Insert events the batch found new; any of them already there means a second writer."""
    inserted = await insert_ignore(conn, table, event_rows)
    if len(inserted) != len(event_rows):
        raise RuntimeError(f"{table} changed under the sink (is a second writer running?)")
