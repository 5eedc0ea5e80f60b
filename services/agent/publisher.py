"""Publishes spooled records to Kafka through the ledger's append path (acks=all, idempotent)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from services.agent.spool import SpoolEntry
from services.ledger import Ledger
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

    async def publish(self, records: list[SpoolEntry]) -> None:
        """Append the lane's records in order, through the ledger's one append path."""
        try:
            if self._ledger is None:
                self._ledger = await Ledger(self.settings, self.name).start()
            await self._ledger.append_encoded(
                [
                    (
                        self.settings.topic(record.topic),
                        record.key.encode() if record.key else None,
                        record.value,
                        record.headers,
                    )
                    for record in records
                ]
            )
        except BaseException:
            await self._reset()
            raise

    async def _reset(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await ledger.stop()

    async def close(self) -> None:
        """Close the producer; the next publish opens a new one."""
        await self._reset()
