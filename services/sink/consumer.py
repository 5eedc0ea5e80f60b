"""The sink's consumer loop: decode -> pure step -> rows + offsets in one transaction.

Offsets live in Postgres (``consumer_offsets``), not in Kafka: on start the sink
seeks every partition to the offset stored with the rows, so a crash between
two batches (or in the middle of one) replays exactly what was not committed,
and the idempotent writer makes a replayed record a no-op anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

import asyncpg

from services.backoff import outage_of, wait_event
from services.gc_tuning import tuned_gc
from services.ledger import TopicPartition
from services.ledger.client import Ledger, LedgerRecord, broker_unavailable
from services.ledger.port import LedgerPort
from services.ledger.subscription import Subscription
from services.ops.server import ops_server
from services.settings import Settings
from services.sink import db
from services.sink.endpoints import sink_endpoints
from services.sink.migrate import migrate_pool
from services.sink.tables import upsert
from services.sink.writer import ReadModelWriter

log = logging.getLogger(__name__)

CONSUMER_NAME = "sink"


async def stored_offsets(conn: asyncpg.Connection, consumer: str) -> dict[TopicPartition, int]:
    """Next offset to read per partition, as committed with the rows."""
    return {
        TopicPartition(r["topic"], r["partition"]): r["next_offset"]
        for r in await conn.fetch(
            "SELECT topic, partition, next_offset FROM consumer_offsets WHERE consumer = $1",
            consumer,
        )
    }


async def store_offsets(
    conn: asyncpg.Connection, consumer: str, offsets: dict[TopicPartition, int]
) -> None:
    """Record the consumed positions in the batch's transaction: the tables and the offsets
    commit together."""
    await upsert(
        conn,
        "consumer_offsets",
        [
            {"consumer": consumer, "topic": tp.topic, "partition": tp.partition, "next_offset": off}
            for tp, off in sorted(offsets.items())
        ],
    )


class _LockHeld(db.ReadModelError):
    """The schema's sink lock is held by another session."""


class Sink:
    """Consumes the ledger's topics into the read models of one Postgres schema."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerPort,
        pool: asyncpg.Pool,
        *,
        consumer_name: str = CONSUMER_NAME,
        writer: ReadModelWriter | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.pool = pool
        self.consumer_name = consumer_name
        self.writer = writer or ReadModelWriter(settings)
        self.applied_batches = 0
        self.positions: dict[TopicPartition, int] = {}
        self.consumer: Subscription | None = None
        """The subscription while :meth:`run` consumes (its lag is the ops server's)."""
        self._stopping = asyncio.Event()
        self._conn: asyncpg.Connection | None = None
        """The connection of the running session: it holds the schema lock."""
        self.pg_outage = outage_of(f"Postgres at {settings.dsn_redacted}")

    async def partitions(self) -> list[TopicPartition]:
        """Every partition of every topic the sink consumes."""
        tps = []
        for topic in self.writer.consumed_topics():
            count = await self.ledger.partitions(topic)
            tps += [TopicPartition(topic, p) for p in range(count)]
        return tps

    def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in flight."""
        self._stopping.set()

    async def run(self) -> None:
        """Consume until :meth:`stop` (or cancellation, which rolls back the open batch).

        Holds a session advisory lock on its schema while it runs: a second sink on
        the same tables (whatever its consumer name) refuses to start instead of
        interleaving its folds with this one's. The writer's in-memory job states
        rely on it: they are only right while this sink is the tables' one writer.

        Outages are ridden out, not fatal: when Postgres goes away (a restart, a
        kill) or the broker does, the session ends, the writer forgets its in-memory
        states (whether the last commit landed is unknown; the tables will say), and
        a new session starts after a backoff: it re-takes the lock, reads the
        committed offsets and goes on from there, so nothing is lost or applied
        twice. A lock still held after a reconnect (the server has not yet noticed the
        lost session) is waited for the same way. Anything else (a bug, another sink on
        the schema at start) ends the run.
        """
        backoff = self.settings.reconnect_backoff()
        tries = 0
        sessions = 0
        while not self._stopping.is_set():
            batches = self.applied_batches
            try:
                sessions += 1
                await self._session()
            except _LockHeld as exc:
                if sessions == 1:
                    raise  # at start: another sink runs on this schema
                # After a lost connection the server may keep the dead session (and its
                # lock) until it notices the client is gone: wait for it, as for an outage.
                self.pg_outage.down(exc)
            except Exception as exc:
                if not db.note_outage(exc, self.pg_outage, self.ledger.outage):
                    raise
            else:
                return
            self.writer.forget()
            tries = 0 if self.applied_batches > batches else tries
            await wait_event(self._stopping, backoff.delay(tries))
            tries += 1

    async def _session(self) -> None:
        """One connection's worth of consuming: lock, seek to the committed offsets, apply."""
        conn = await self.pool.acquire()
        try:
            lock = f"sink:{self.settings.pg_schema}"
            if not await db.take_lock(conn, lock, self.settings.sink_lock_wait_s):
                raise _LockHeld(
                    f"another sink is already writing schema {self.settings.pg_schema!r} "
                    f"(this one is consumer {self.consumer_name!r}); run one sink per schema"
                )
            self.pg_outage.up()
            # Every batch commits on the connection that holds the lock: if that session
            # dies, so does the lock, and no write can happen without it.
            self._conn = conn
            try:
                await self._consume(conn)
            except Exception as exc:
                if db.postgres_unavailable(exc) or broker_unavailable(exc):
                    raise
                if await db.connection_lost(conn):
                    raise db.ConnectionLostError(
                        f"the connection to Postgres at {self.settings.dsn_redacted} was lost "
                        f"({type(exc).__name__}: {exc})"
                    ) from exc
                raise  # the connection is fine: a bug, which ends the run
            finally:
                self._conn = None
            await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", lock)
        finally:
            # After an outage the connection is dead and its lock gone with it; the pool
            # replaces a closed connection on the next acquire.
            with contextlib.suppress(*db.POSTGRES_UNAVAILABLE):
                await self.pool.release(conn, timeout=5)

    async def _consume(self, conn: asyncpg.Connection) -> None:
        """The handler: each batch's rows and offsets in one transaction, from the offsets
        stored with the rows. The next batch is read and decoded while this one is written
        (Postgres runs our statements on another core meanwhile); one read ahead but not
        applied when the sink stops is simply read again."""
        stored = await stored_offsets(conn, self.consumer_name)
        self.positions = dict(stored)
        subscription = self.ledger.subscribe(
            self.writer.consumed_topics(),
            name=self.dead_letter_name,
            positions=stored,
            ahead=True,
            max_records=self.settings.sink_batch_max,
        )
        async with subscription:
            self.consumer = subscription
            log.info("sink %s started from the offsets stored with its rows", self.consumer_name)
            try:
                async for batch in subscription:
                    if self._stopping.is_set():
                        return
                    if batch:
                        pairs = [(batch.raw(record), record) for record in batch.records]
                        await self._commit(pairs, batch.offsets)
            finally:
                self.consumer = None

    async def _commit(
        self, decoded: list[tuple[Any, LedgerRecord]], offsets: dict[TopicPartition, int]
    ) -> None:
        if self._conn is not None:
            await self._apply_in_transaction(self._conn, decoded, offsets)
        else:  # applied from outside run() (tests, tools): no lock to write under
            async with self.pool.acquire() as conn:
                await self._apply_in_transaction(conn, decoded, offsets)
        self.positions.update(offsets)
        self.applied_batches += 1

    @property
    def dead_letter_name(self) -> str:
        """Who the dead-letter headers and the metric name for what this sink parks."""
        return f"sink/{self.consumer_name}"

    async def _apply_in_transaction(
        self,
        conn: asyncpg.Connection,
        decoded: list[tuple[Any, LedgerRecord]],
        offsets: dict[TopicPartition, int],
    ) -> None:
        async with conn.transaction():
            for raw, exc in await self._apply_isolating(conn, decoded):
                # Parked before the offsets commit: a crash now parks it again, never loses it.
                await self.ledger.dead_letter(raw, exc, self.dead_letter_name, "unstorable")
            await store_offsets(conn, self.consumer_name, offsets)

    async def _apply_isolating(
        self, conn: asyncpg.Connection, decoded: list[tuple[Any, LedgerRecord]]
    ) -> list[tuple[Any, Exception]]:
        """Apply the records in a savepoint; when Postgres refuses a row (:func:`db.row_refused`),
        apply each half again, down to the one record refused. Returns the refused records
        (raw, why), in order; everything else is applied, in order."""
        try:
            async with conn.transaction():
                await self.apply_records(conn, [record for _, record in decoded])
        except Exception as exc:
            if not db.row_refused(exc):
                raise
            if len(decoded) == 1:
                return [(decoded[0][0], exc)]
        else:
            return []
        half = len(decoded) // 2
        return [
            *await self._apply_isolating(conn, decoded[:half]),
            *await self._apply_isolating(conn, decoded[half:]),
        ]

    async def apply_records(self, conn: asyncpg.Connection, records: list[LedgerRecord]) -> None:
        """The pure step and its writes (a seam for tests that crash mid-batch)."""
        await self.writer.apply(conn, records)

    async def end_offsets(self) -> dict[TopicPartition, int]:
        """The current end offset of every consumed partition."""
        ends: dict[TopicPartition, int] = {}
        for topic in self.writer.consumed_topics():
            count = await self.ledger.partitions(topic)
            asked = await self.ledger.end_offsets(topic, range(count), timeout_s=30)
            ends.update((TopicPartition(topic, p), end) for p, end in asked.items())
        return ends

    async def wait_until(self, ends: dict[TopicPartition, int], timeout: float = 30.0) -> None:
        """Wait until the offsets committed in Postgres reach ``ends`` (TimeoutError if not)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            async with self.pool.acquire() as conn:
                stored = await stored_offsets(conn, self.consumer_name)
            behind = {tp: end for tp, end in ends.items() if stored.get(tp, 0) < end}
            if not behind:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"sink {self.consumer_name} still behind on {behind}")
            await asyncio.sleep(0.05)

    async def catch_up(self, timeout: float = 30.0) -> None:
        """Wait until the sink has committed everything appended before the call."""
        await self.wait_until(await self.end_offsets(), timeout)


async def build_sink(
    settings: Settings, ledger: LedgerPort, pool: asyncpg.Pool, **kwargs: Any
) -> Sink:
    """Composition root: migrate the schema, then return the sink (not yet running)."""
    await migrate_pool(pool, settings.pg_schema)
    return Sink(settings, ledger, pool, **kwargs)


async def serve(settings: Settings) -> None:
    """Run the sink until cancelled (``gridledger sink``).

    It waits for Postgres and the broker when either is not up yet, and rides out
    their outages while it runs (:meth:`Sink.run`).
    """
    pool = await db.create_pool(settings, wait=True)
    try:
        ledger = await Ledger(settings, "sink").start(wait=True)
        try:
            await db.when_reachable(settings, lambda: migrate_pool(pool, settings.pg_schema))
            sink = Sink(settings, ledger, pool)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                # Finish the batch in flight, then stop: nothing is left half-applied.
                loop.add_signal_handler(sig, sink.stop)
            async with ops_server(settings, sink_endpoints(settings, sink)):
                with tuned_gc():  # it holds many jobs' decoded histories (job_cache)
                    await sink.run()
        finally:
            await ledger.stop()
    finally:
        await pool.close()
