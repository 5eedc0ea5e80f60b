"""Publishes spooled records to Kafka through the ledger's producer (acks=all, idempotent)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from services.agent.spool import SpoolRecord
from services.ledger import Ledger
from services.ops import metrics
from services.settings import Settings

log = logging.getLogger(__name__)


class LedgerPublisher:
    """One producer per spool lane, started on first use and rebuilt after any failure.

    Rebuilding after a failure starts a fresh idempotent producer session, so the
    lane re-sends from its first unacknowledged entry in order.
    """

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.name = name
        self._ledger: Ledger | None = None

    async def publish(self, records: list[SpoolRecord]) -> None:
        try:
            if self._ledger is None:
                self._ledger = await Ledger(self.settings, self.name).start()
            producer = self._ledger.producer
            futures: list[asyncio.Future[Any]] = []
            for record in records:
                futures.append(
                    await producer.send(
                        self.settings.topic(record.topic),
                        value=record.value,
                        key=record.key.encode() if record.key else None,
                        headers=record.headers,
                    )
                )
            await asyncio.gather(*futures)
        except BaseException:
            await self._reset()
            raise
        produced: dict[str, int] = {}
        for record in records:
            produced[record.topic] = produced.get(record.topic, 0) + 1
        metrics.count_by_topic(
            metrics.EVENTS_PRODUCED, {self.settings.topic(t): n for t, n in produced.items()}
        )

    async def _reset(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await ledger.stop()

    async def close(self) -> None:
        await self._reset()
