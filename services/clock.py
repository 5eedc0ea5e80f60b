"""The services' one wall clock: the current time as an aware UTC datetime.

Only adapters read it (to stamp the facts they observe, to pass ``now`` to a pure
decider); ``projections/`` and the pure deciders never do, their time comes from
events or a ``now`` argument. One definition, so every producer stamps time the
same way (aware, UTC) and a test can swap one name.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware in UTC (what :class:`schemas.events.Event` requires)."""
    return datetime.now(UTC)
