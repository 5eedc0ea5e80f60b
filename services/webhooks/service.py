"""The webhooks service: job events to the tenants' receivers, signed (Standard Webhooks).

Two loops, one process (``gridledger webhooks serve``):

- **enqueue** is the handler of one subscription (``ledger.subscribe``) to every
  partition of ``job-events`` from the offsets it stored in Postgres
  (``consumer_offsets``, consumer ``webhooks``). Per batch, in one transaction:
  each job's tenant from its first JobSubmitted (``webhook_job_tenants``; a resubmission
  is ignored, as in the folds), one ``webhook_outbox`` row per event and enabled
  subscription of that tenant that names its type (the body made then: the event as
  CloudEvents JSON, :func:`schemas.codec.cloudevent`), and the offsets. A crash replays
  the uncommitted batch; a row already queued is not queued twice.
- **deliver** gives every subscription with due events its own task (at most
  ``webhooks_concurrency`` at once): it posts that subscription's events in order, one
  request at a time, each within ``webhooks_timeout_s``, no redirect followed, at most
  :data:`MAX_READ_BYTES` of the answer read. A 2xx deletes the row. Anything else is
  logged and the subscription waits ``webhooks_backoff()`` (capped exponential, the
  shared rule) before its next try; after ``webhooks_disable_after`` failures in a row it
  is disabled with the reason. A slow or hostile receiver holds up only its own task.

Every delivery is signed anew (``webhook-timestamp`` is the send time) with the event id
as ``webhook-id``, so a repeated delivery (a retry, a replay after a crash) carries the
same id and a receiver drops it. Where deliveries go is checked at every delivery
(services/webhooks/targets.py). Delivery is at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import signal
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg
from standardwebhooks import Webhook

from schemas.codec import cloudevent
from schemas.errors import GridledgerError
from schemas.events import Event, JobSubmitted
from services import secretstore
from services.backoff import outage_of, wait_event
from services.clock import utcnow
from services.ledger import TopicPartition
from services.ledger.client import Ledger, LedgerRecord
from services.ledger.subscription import Subscription
from services.ops import metrics
from services.ops.server import ops_server
from services.secretstore import SecretsKey
from services.settings import Settings
from services.sink import db
from services.sink.consumer import store_offsets, stored_offsets
from services.sink.migrate import migrate_pool
from services.webhooks import store, targets

log = logging.getLogger(__name__)

CONSUMER_NAME = "webhooks"
MAX_READ_BYTES = 64 * 1024
"""Of a receiver's answer, at most this much is read (and 200 characters logged)."""
POLL_S = 0.5
"""How often the deliverer looks for subscriptions whose wait is over."""
BATCH_ROWS = 50
USER_AGENT = "gridledger-webhooks/1"


class WebhooksBusyError(GridledgerError):
    """Another webhooks service already delivers for this schema."""


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt's outcome, as the log keeps it."""

    ok: bool
    status_code: int | None
    latency_ms: int
    error: str


def _shown(text: str, limit: int = 200) -> str:
    """A receiver's or an error's text as the log keeps it: printable, short."""
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def client(settings: Settings) -> aiohttp.ClientSession:
    """The deliveries' HTTP client: the guarded resolver, no proxy from the environment, no
    decompression of answers (only their first bytes are read), a bounded pool."""
    connector = aiohttp.TCPConnector(
        resolver=targets.GuardedResolver(settings.webhooks_allow_loopback),
        limit=settings.webhooks_concurrency,
    )
    return aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)


async def post(
    http: aiohttp.ClientSession,
    settings: Settings,
    url: str,
    webhook_id: str,
    body: str,
    secrets: list[str],
) -> Attempt:
    """One signed POST of ``body`` to ``url``, as every delivery is sent; never raises for what
    the receiver or the network does."""
    started = time.monotonic()

    def failed(error: str, status: int | None = None) -> Attempt:
        return Attempt(False, status, int((time.monotonic() - started) * 1000), error)

    refused = targets.literal_problem(url, settings.webhooks_allow_loopback)
    if refused:
        return failed(f"{refused}: not delivered")
    now = utcnow()
    headers = {
        "content-type": "application/cloudevents+json",
        "user-agent": USER_AGENT,
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(Webhook(s).sign(webhook_id, now, body) for s in secrets),
    }
    timeout = settings.webhooks_timeout_s
    try:
        async with http.post(
            url,
            data=body.encode(),
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            answer = await response.content.read(MAX_READ_BYTES)
            status = response.status
    except TimeoutError:
        return failed(f"no answer within {timeout:g} s")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return failed(_shown(f"{type(exc).__name__}: {exc}"))
    if 200 <= status < 300:
        return Attempt(True, status, int((time.monotonic() - started) * 1000), "")
    why = f"HTTP {status}"
    if 300 <= status < 400:
        why += " (a redirect; redirects are not followed: subscribe the final URL)"
    text = _shown(answer.decode("utf-8", "replace").strip())
    return failed(f"{why}: {text}" if text else why, status)


class WebhookService:
    """Queues job events for the subscriptions that want them and delivers them."""

    def __init__(
        self, settings: Settings, ledger: Ledger, pool: asyncpg.Pool, key: SecretsKey
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.pool = pool
        self.key = key
        self.consumer: Subscription | None = None
        """The subscription while it reads (None: waiting for the broker or Postgres)."""
        self.positions: dict[TopicPartition, int] = {}
        self.delivered = 0
        self._stopping = asyncio.Event()
        self._queued = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self.pg_outage = outage_of(f"Postgres at {settings.dsn_redacted}")

    def stop(self) -> None:
        """Ask :meth:`run` to return (the batch in flight is committed or replayed later)."""
        self._stopping.set()

    async def run(self) -> None:
        """Enqueue and deliver until :meth:`stop`, riding out broker and Postgres outages; a
        bug in either loop ends the run with its error."""
        async with self._only_one(), client(self.settings) as http:
            stopping = asyncio.create_task(self._stopping.wait())
            loops = [
                asyncio.create_task(self._riding_out(self._enqueue)),
                asyncio.create_task(self._riding_out(lambda: self._deliver(http))),
            ]
            try:
                done, _ = await asyncio.wait([stopping, *loops], return_when=FIRST_COMPLETED)
                for task in done - {stopping}:
                    task.result()
            finally:
                tasks = [stopping, *loops, *self._running.values()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def _only_one(self) -> AsyncIterator[None]:
        """Hold the schema's webhooks lock while running: a second service on the same tables
        would deliver every event twice, so it refuses to start (waiting ``sink_lock_wait_s``
        first, for a crashed predecessor's session to go)."""
        lock = f"webhooks:{self.settings.pg_schema}"
        conn = await self.pool.acquire()
        try:
            if not await db.take_lock(conn, lock, self.settings.sink_lock_wait_s):
                raise WebhooksBusyError(
                    f"another webhooks service delivers for schema {self.settings.pg_schema!r}; "
                    "run one per schema (a second would deliver every event twice)"
                )
            yield
            with contextlib.suppress(*db.POSTGRES_UNAVAILABLE):
                await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", lock)
        finally:
            with contextlib.suppress(*db.POSTGRES_UNAVAILABLE):
                await self.pool.release(conn, timeout=5)

    async def _riding_out(self, session: Any) -> None:
        """Run ``session()`` again after an outage of Postgres or the broker, with backoff."""
        backoff = self.settings.reconnect_backoff()
        tries = 0
        while not self._stopping.is_set():
            try:
                await session()
            except Exception as exc:
                if not db.note_outage(exc, self.pg_outage, self.ledger.outage):
                    raise
            else:
                return
            await wait_event(self._stopping, backoff.delay(tries))
            tries += 1

    # ----------------------------------------------------------------------- enqueue

    async def _enqueue(self) -> None:
        """The handler of the one subscription: each batch's rows and offsets in one
        transaction, from the offsets stored with the rows (the subscription decodes,
        parks an undecodable record and rides out a broker outage)."""
        async with self.pool.acquire() as conn:
            stored = await stored_offsets(conn, CONSUMER_NAME)
        self.positions = dict(stored)
        self.pg_outage.up()
        subscription = self.ledger.subscribe(
            [self.settings.topic("job-events")], name=CONSUMER_NAME, positions=stored
        )
        async with subscription:
            self.consumer = subscription
            try:
                async for batch in subscription:
                    if self._stopping.is_set():
                        return
                    if batch:
                        await self._commit(batch.records, batch.offsets)
            finally:
                self.consumer = None

    async def _commit(
        self, records: list[LedgerRecord], offsets: dict[TopicPartition, int]
    ) -> None:
        """Queue a batch's events for their subscriptions, with the offsets."""
        events = [r.value for r in records if isinstance(r.value, Event)]
        now = utcnow()
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.executemany(
                "INSERT INTO webhook_job_tenants (job_id, tenant, event_id) VALUES ($1, $2, $3)"
                " ON CONFLICT (job_id) DO NOTHING",
                [(e.job_id, e.tenant, e.event_id) for e in events if isinstance(e, JobSubmitted)],
            )
            owners = {
                r["job_id"]: (r["tenant"], r["event_id"])
                for r in await conn.fetch(
                    "SELECT job_id, tenant, event_id FROM webhook_job_tenants"
                    " WHERE job_id = ANY($1)",
                    sorted({e.job_id for e in events}),
                )
            }
            wanted: dict[str, list[tuple[str, frozenset[str]]]] = {}
            for r in await conn.fetch(
                "SELECT id, tenant, events FROM webhook_subscriptions"
                " WHERE enabled AND tenant = ANY($1)",
                sorted({tenant for tenant, _ in owners.values()}),
            ):
                wanted.setdefault(r["tenant"], []).append((r["id"], frozenset(r["events"])))
            rows = []
            for event in events:
                owner = owners.get(event.job_id)
                if owner is None:
                    continue  # no JobSubmitted for it: no tenant's job
                tenant, submitted_id = owner
                if isinstance(event, JobSubmitted) and event.event_id != submitted_id:
                    continue  # a resubmission of the id: not this job's, maybe not its tenant's
                subscribers = [s for s, types in wanted.get(tenant, ()) if event.type in types]
                if subscribers:
                    body = json.dumps(cloudevent(event), separators=(",", ":"), sort_keys=True)
                    rows += [(s, event.event_id, event.type, body, now) for s in subscribers]
            rows, overflowing = await self._within_bound(conn, rows)
            for sid in overflowing:
                cap = self.settings.webhooks_max_pending
                await self._disable(
                    conn,
                    sid,
                    f"{cap} events were waiting for it, the most one webhook may queue (its "
                    "receiver takes them slower than they come)",
                )
            await conn.executemany(
                "INSERT INTO webhook_outbox (subscription_id, event_id, event_type, body,"
                " enqueued_at) VALUES ($1, $2, $3, $4, $5)"
                " ON CONFLICT (subscription_id, event_id) DO NOTHING",
                rows,
            )
            await store_offsets(conn, CONSUMER_NAME, offsets)
        self.positions.update(offsets)
        if rows:
            self._queued.set()

    async def _within_bound(
        self, conn: asyncpg.Connection, rows: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[Any, ...]], set[str]]:
        """The rows that keep every subscription's queue within ``webhooks_max_pending``, and
        the subscriptions that would pass it (they are disabled, nothing more is queued)."""
        if not rows:
            return rows, set()
        queued = {
            r["subscription_id"]: r["n"]
            for r in await conn.fetch(
                "SELECT subscription_id, count(*) AS n FROM webhook_outbox"
                " WHERE subscription_id = ANY($1) GROUP BY subscription_id",
                sorted({row[0] for row in rows}),
            )
        }
        kept, overflowing = [], set()
        for row in rows:
            if queued.get(row[0], 0) >= self.settings.webhooks_max_pending:
                overflowing.add(row[0])
            elif row[0] not in overflowing:
                queued[row[0]] = queued.get(row[0], 0) + 1
                kept.append(row)
        return kept, overflowing

    # ----------------------------------------------------------------------- deliver

    async def _deliver(self, http: aiohttp.ClientSession) -> None:
        while not self._stopping.is_set():
            self._queued.clear()
            due = await self.pool.fetch(
                "SELECT s.id FROM webhook_subscriptions s WHERE s.enabled AND s.retry_at <= now()"
                " AND EXISTS (SELECT 1 FROM webhook_outbox o WHERE o.subscription_id = s.id)"
                " ORDER BY s.retry_at"
            )
            for row in due:
                sid = row["id"]
                if sid in self._running or len(self._running) >= self.settings.webhooks_concurrency:
                    continue
                task = asyncio.create_task(self._deliver_subscription(http, sid))
                self._running[sid] = task
                task.add_done_callback(functools.partial(self._done, sid))
            await wait_event(self._queued, POLL_S)

    def _done(self, sid: str, task: asyncio.Task[None]) -> None:
        self._running.pop(sid, None)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:  # Postgres away (tried again at the next look) or a bug: logged
            log.error("delivering to subscription %s stopped: %r", sid, exc, exc_info=exc)
        self._queued.set()  # look again: more may be due

    async def _deliver_subscription(self, http: aiohttp.ClientSession, sid: str) -> None:
        """Deliver the subscription's queued events in order until one fails or none is left."""
        while not self._stopping.is_set():
            sub = await self.pool.fetchrow(
                "SELECT * FROM webhook_subscriptions WHERE id = $1 AND enabled", sid
            )
            if sub is None:
                return
            queued = await self.pool.fetch(
                "SELECT seq, event_id, event_type, body, attempts FROM webhook_outbox"
                " WHERE subscription_id = $1 ORDER BY seq LIMIT $2",
                sid,
                BATCH_ROWS,
            )
            if not queued:
                return
            try:
                secrets = store.signing_secrets(self.key, sub, utcnow())
            except secretstore.SecretOpenError as exc:
                await self._disable(self.pool, sid, f"its signing secret does not open ({exc})")
                return
            for item in queued:
                attempt = await post(
                    http, self.settings, sub["url"], item["event_id"], item["body"], secrets
                )
                if not await self._record(sid, item, attempt):
                    return

    async def _record(self, sid: str, item: asyncpg.Record, attempt: Attempt) -> bool:
        """Log the attempt, settle the row and the subscription; True: go on delivering."""
        metrics.WEBHOOK_DELIVERIES.labels(outcome="delivered" if attempt.ok else "failed").inc()
        try:
            return await self._settle(sid, item, attempt)
        except asyncpg.ForeignKeyViolationError:
            return False  # the tenant removed the subscription meanwhile: nothing to settle

    async def _settle(self, sid: str, item: asyncpg.Record, attempt: Attempt) -> bool:
        now = utcnow()
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO webhook_deliveries (subscription_id, event_id, event_type, attempt,"
                " at, status_code, latency_ms, ok, error) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
                sid,
                item["event_id"],
                item["event_type"],
                item["attempts"] + 1,
                now,
                attempt.status_code,
                attempt.latency_ms,
                attempt.ok,
                attempt.error,
            )
            await conn.execute(
                "DELETE FROM webhook_deliveries WHERE subscription_id = $1 AND seq <="
                " (SELECT seq FROM webhook_deliveries WHERE subscription_id = $1"
                "  ORDER BY seq DESC OFFSET $2 LIMIT 1)",
                sid,
                self.settings.webhooks_log_keep,
            )
            if attempt.ok:
                await conn.execute("DELETE FROM webhook_outbox WHERE seq = $1", item["seq"])
                await conn.execute(
                    "UPDATE webhook_subscriptions SET consecutive_failures = 0 WHERE id = $1", sid
                )
                self.delivered += 1
                return True
            await conn.execute(
                "UPDATE webhook_outbox SET attempts = attempts + 1 WHERE seq = $1", item["seq"]
            )
            failures = await conn.fetchval(
                "UPDATE webhook_subscriptions SET consecutive_failures = consecutive_failures + 1"
                " WHERE id = $1 RETURNING consecutive_failures",
                sid,
            )
            delay = self.settings.webhooks_backoff().delay(failures - 1)
            await conn.execute(
                "UPDATE webhook_subscriptions SET retry_at = $2 WHERE id = $1",
                sid,
                now + timedelta(seconds=delay),
            )
        log.info("webhook %s: %s failed (%s)", sid, item["event_id"], attempt.error)
        if failures >= self.settings.webhooks_disable_after:
            await self._disable(
                self.pool,
                sid,
                f"{failures} deliveries in a row failed, the last at {now.isoformat()}: "
                f"{attempt.error}",
            )
        return False

    async def _disable(self, where: asyncpg.Pool | asyncpg.Connection, sid: str, why: str) -> None:
        """Disable the subscription, saying why and what to do, for ``webhooks list``."""
        reason = (
            f"disabled: {why}. Events from now on are not queued for it. Fix the receiver, "
            f"then `gridledger webhooks enable {sid}`: the events queued before are delivered "
            "then (`gridledger history JOB` shows every event of a job)"
        )
        await where.execute(
            "UPDATE webhook_subscriptions SET enabled = false, disabled_at = now(),"
            " disabled_reason = $2 WHERE id = $1",
            sid,
            reason,
        )
        log.warning("webhook %s %s", sid, reason)


async def serve(settings: Settings) -> None:
    """Run the webhooks service until SIGTERM/SIGINT (``gridledger webhooks serve``)."""
    from services.webhooks.endpoints import webhooks_endpoints

    key = secretstore.load_key(settings)
    pool = await db.create_pool(settings, wait=True)
    try:
        ledger = await Ledger(settings, CONSUMER_NAME).start(wait=True)
        try:
            await db.when_reachable(settings, lambda: migrate_pool(pool, settings.pg_schema))
            service = WebhookService(settings, ledger, pool, key)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, service.stop)
            async with ops_server(settings, webhooks_endpoints(settings, service)):
                await service.run()
        finally:
            await ledger.stop()
    finally:
        await pool.close()
