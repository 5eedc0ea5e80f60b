"""Read a whole ledger into a :class:`.invariants.LedgerSnapshot` (every topic from offset 0)."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import Event, MeterTick
from schemas.topics import HISTORY_TOPICS
from schemas.views import AccountingRecord
from services.chaos.invariants import LedgerSnapshot
from services.clock import utcnow
from services.ledger import Ledger, compose
from services.settings import Settings


async def snapshot(settings: Settings) -> LedgerSnapshot:
    """Every event and the latest accounting record per job, as of now."""
    read_at = utcnow()
    snap = LedgerSnapshot(read_at=read_at)
    async with Ledger(settings, "chaos-collect") as ledger:
        # The history's event ids are the proof that nothing was lost.
        for suffix in HISTORY_TOPICS:
            async for record in compose.read_partitions(ledger, settings.topic(suffix)):
                value = record.value
                if not isinstance(value, Event):
                    continue
                snap.event_ids.add(value.event_id)
                if suffix == "job-events":
                    snap.job_events.setdefault(record.key, []).append(value)
                    snap.appended_at.setdefault(
                        value.event_id, datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)
                    )
                elif isinstance(value, MeterTick):
                    snap.meter_ticks.append(value)
        async for record in compose.read_partitions(ledger, settings.topic("accounting")):
            if isinstance(record.value, AccountingRecord):
                snap.accounting[record.key] = record.value  # the last one per key wins
    return snap
