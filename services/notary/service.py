"""The notary: reads each partition of the sealed topics in order and seals what it read.

Per partition, once ``notary_seal_records`` records are waiting or the oldest has waited
``notary_seal_interval_s``, it signs a seal (services/notary/chain.py) over them,
appends it to ``ledger-seals`` (keyed ``<topic>/<partition>``, acknowledged) and then
stores it in the object store (services/notary/store.py).

**Resuming.** The notary keeps no state of its own: at start it reads ``ledger-seals``
from offset 0 and keeps, per partition, the last seal that is signed by an accepted key
and continues the chain; it reads that partition on from the seal's end, through one
subscription (``ledger.subscribe``: raw records, no group), which rides out a later
outage and resumes after what it handed over. A crash before the append leaves nothing
to undo (those records are read again and sealed once); a crash after it is resumed from
the appended seal, so there is no gap and no double seal. The store's copy of each
partition's last seal is written again at start (the same key and bytes), in case the
crash came between the two.

**Poison records.** Hashing takes any bytes, so a record of a sealed topic cannot stop
it. A record on ``ledger-seals`` that is not an accepted seal (it does not parse, is
signed by another key, or does not continue the chain) is not chained onto: it is
parked on ``dead-letter`` once (reason ``undecodable`` or ``unapplicable``, as
:meth:`~services.ledger.client.LedgerOperations.dead_letter` does for every consumer)
and ``audit verify`` reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from schemas.topics import SEALED_TOPICS
from services.backoff import retrying
from services.clock import utcnow
from services.ledger import Ledger, broker_unavailable
from services.ledger.client import (
    CONSUMER_OUTAGE_ERRORS,
    DLQ_CONSUMER,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_TOPIC,
)
from services.ledger.subscription import Subscription
from services.notary import keys
from services.notary.chain import Seal, SealError, follows, leaf_of, next_seal
from services.notary.store import SealStore
from services.objectstore import ObjectStoreError
from services.ops import metrics
from services.settings import Settings

log = logging.getLogger(__name__)

CONSUMER = "notary"
STOP_GRACE_S = 5.0
"""How long a stop waits for the sealing loop to finish its batch (seconds)."""
Partition = tuple[str, int]
"""(topic suffix, partition)."""


class Notary:
    """The notary service: :meth:`start`, then :meth:`serve_until` a stop event."""

    def __init__(
        self, settings: Settings, ledger: Ledger | None = None, store: SealStore | None = None
    ) -> None:
        self.settings = settings
        self.ledger = ledger or Ledger(settings, CONSUMER)
        self.store = store or SealStore(settings)
        self.key: Ed25519PrivateKey | None = None
        self.last: dict[Partition, Seal] = {}
        """Each partition's last seal on ``ledger-seals``: where the chain goes on."""
        self.pending: dict[Partition, list[tuple[int, str]]] = {}
        self.waiting_since: dict[Partition, float] = {}
        self.unstored: list[Seal] = []
        """Seals on the topic the store has not taken yet (an outage): retried with the
        reconnect backoff, in order."""
        self._store_attempt = 0
        self._store_retry_at = 0.0
        self.consumer: Subscription | None = None
        """The subscription while sealing (None: resuming, or stopped)."""
        self.ready = asyncio.Event()
        self.seals = 0

    @property
    def seals_topic(self) -> str:
        """The full name of ``ledger-seals``."""
        return self.settings.topic("ledger-seals")

    async def start(self) -> Notary:
        """Load the signing key (an error saying to run keygen when there is none) and
        start the ledger, waiting out a broker that is not up yet."""
        self.key = keys.load_signing_key(self.settings)
        await self.ledger.start(wait=True)
        return self

    async def stop(self) -> None:
        """Close the ledger."""
        await self.ledger.stop()

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Seal until ``stop`` is set: resume from ``ledger-seals`` (waiting out a broker
        that is away meanwhile), then read on through one subscription, which rides out
        later outages itself and resumes after what it handed over (the leaves waiting for
        their seal are of those records, so nothing needs resuming again)."""
        backoff = self.settings.reconnect_backoff()
        attempt = 0
        while True:
            try:
                starts = await self.resume()
                break
            except CONSUMER_OUTAGE_ERRORS as exc:
                self.ledger.outage.down(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff.delay(attempt))
                if stop.is_set():
                    return
                attempt += 1
        sealing = asyncio.create_task(self._seal_until(starts, stop))
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({sealing, stopping}, return_when=asyncio.FIRST_COMPLETED)
            # Stopped: the loop returns at its next batch; one that does not within the
            # grace is waiting for a broker that is away (what it read is read again).
            done, _ = await asyncio.wait({sealing}, timeout=STOP_GRACE_S)
        finally:
            for task in (sealing, stopping):
                task.cancel()
            await asyncio.gather(sealing, stopping, return_exceptions=True)
        if sealing in done:
            sealing.result()  # a bug ends the run with its error
            await self._flush_pending()

    async def resume(self) -> dict[tuple[str, int], int]:
        """Read ``ledger-seals``: each sealed partition's last accepted seal; returns the
        offset each partition is read on from (after its last seal; absent: its start)."""
        assert self.key is not None
        accepted = keys.accepted_keys(self.settings, self.key.public_key())
        parked = await self._parked()
        self.last = {}
        self.pending = {}
        self.waiting_since = {}
        async for raw in self.ledger.read_raw(self.seals_topic):
            why, reason = "", "unapplicable"
            try:
                seal = Seal.decode(raw.value)
            except SealError as exc:
                why, reason = f"not a seal: {exc}", "undecodable"
            else:
                if seal.prefix != self.settings.topic_prefix or seal.topic not in SEALED_TOPICS:
                    why = f"seals {seal.prefix}{seal.topic}, which this notary does not seal"
                elif not seal.signed_by(accepted):
                    why = f"signed by key {seal.key_id or '(none)'}, not an accepted one"
                else:
                    why = follows(seal, self.last.get((seal.topic, seal.partition)))
            if not why:
                self.last[(seal.topic, seal.partition)] = seal
            elif raw.offset not in parked:
                await self.ledger.dead_letter(raw, why, CONSUMER, reason)
        for seal in self.last.values():
            await self._store(seal)  # the crash may have come between the topic and here
        starts = {
            (self.settings.topic(suffix), partition): seal.end_offset
            for (suffix, partition), seal in self.last.items()
        }
        log.info(
            "notary resumed: %d partition(s) sealed before, the others read from their start",
            len(starts),
        )
        return starts

    async def _parked(self) -> set[int]:
        """Offsets of ``ledger-seals`` records this notary already parked (parked once)."""
        offsets: set[int] = set()
        async for raw in self.ledger.read_raw(self.settings.topic("dead-letter")):
            headers = {name: bytes(value or b"").decode() for name, value in raw.headers or ()}
            if (
                headers.get(DLQ_SOURCE_TOPIC) == self.seals_topic
                and headers.get(DLQ_CONSUMER) == CONSUMER
            ):
                with contextlib.suppress(ValueError):
                    offsets.add(int(headers.get(DLQ_SOURCE_OFFSET, "")))
        return offsets

    async def _seal_until(self, starts: dict[tuple[str, int], int], stop: asyncio.Event) -> None:
        """The handler of the one subscription to the sealed topics: raw records (never
        decoded), sealed per partition by count or by interval."""
        limit = self.settings.notary_seal_records
        prefix_len = len(self.settings.topic_prefix)
        subscription = self.ledger.subscribe(
            [self.settings.topic(suffix) for suffix in SEALED_TOPICS],
            name=CONSUMER,
            positions=starts,
            decode=False,
            max_records=limit * 4,
            options={"max_partition_fetch_bytes": 4 * 1024 * 1024},
        )
        async with subscription:
            self.consumer = subscription
            self.ready.set()
            try:
                async for batch in subscription:
                    if stop.is_set():
                        return
                    for raw in batch.raws:
                        where = (raw.topic[prefix_len:], raw.partition)
                        pending = self.pending.setdefault(where, [])
                        if not pending:
                            self.waiting_since[where] = time.monotonic()
                        pending.append((raw.offset, leaf_of(raw)))
                        if len(pending) >= limit:
                            await self._seal(where)
                    interval = self.settings.notary_seal_interval_s
                    for where, pending in list(self.pending.items()):
                        if pending and time.monotonic() - self.waiting_since[where] >= interval:
                            await self._seal(where)
                    await self._store_unstored()
            finally:
                self.consumer = None
                self.ready.clear()

    async def _flush_pending(self) -> None:
        """At a clean stop, seal what was read: nothing waits for the next start."""
        with contextlib.suppress(*CONSUMER_OUTAGE_ERRORS):
            for where, pending in list(self.pending.items()):
                if pending:
                    await self._seal(where)
            await self._store_unstored()

    async def _seal(self, where: Partition) -> Seal:
        """Sign the seal over a partition's waiting records, append it, then store it."""
        assert self.key is not None
        leaves = self.pending.pop(where)
        seal = next_seal(
            self.last.get(where),
            self.settings.topic_prefix,
            where[0],
            where[1],
            leaves,
            utcnow().isoformat(),
            self.key,
        )
        await retrying(
            lambda: self.ledger.send_raw(
                self.seals_topic, f"{where[0]}/{where[1]}".encode(), seal.encode(), []
            ),
            outage=self.ledger.outage,
            transient=broker_unavailable,
            backoff=self.settings.reconnect_backoff(),
        )
        self.last[where] = seal
        self.seals += 1
        metrics.SEALS.labels(topic=where[0]).inc()
        await self._store(seal)
        return seal

    async def _store(self, seal: Seal) -> None:
        """Store a seal, or keep it for later while the store fails (sealing goes on)."""
        if self.unstored:
            if seal not in self.unstored:
                self.unstored.append(seal)  # behind the ones waiting already
            return
        try:
            await asyncio.to_thread(self.store.put, seal)
        except ObjectStoreError as exc:
            log.warning("seal of %s not stored yet, will retry: %s", seal.where, exc)
            self.unstored.append(seal)
            self._store_retry_at = time.monotonic()

    async def _store_unstored(self) -> None:
        """Store the waiting seals once the backoff allows another try."""
        if not self.unstored or time.monotonic() < self._store_retry_at:
            return
        while self.unstored:
            try:
                await asyncio.to_thread(self.store.put, self.unstored[0])
            except ObjectStoreError as exc:
                delay = self.settings.reconnect_backoff().delay(self._store_attempt)
                self._store_attempt += 1
                self._store_retry_at = time.monotonic() + delay
                log.warning(
                    "%d seal(s) not stored yet, next try in %.1f s: %s",
                    len(self.unstored),
                    delay,
                    exc,
                )
                return
            self.unstored.pop(0)
        self._store_attempt = 0
