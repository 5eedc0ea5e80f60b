"""Batches of a FakeLedger's records through the one subscription, as a worker reads them.

A test drives a worker's handler (the processors' :meth:`Step.run`) with :class:`Feed`:
the records are decoded, undecodable ones parked and batches cut by the same
:class:`services.ledger.subscription.Subscription` the worker runs on a broker, over the
fake's consumer. :meth:`Feed.drain` hands over batches until a read finds nothing new, so
what the handler appended meanwhile (derived events) is read back too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from services.ledger.subscription import Batch, Subscription


class Feed:
    """A subscription of ``topics`` (full names) from their beginning, ``most`` records a
    batch, named ``name`` in what it parks."""

    def __init__(self, ledger: Any, topics: Sequence[str], name: str, most: int = 1000) -> None:
        self.subscription: Subscription = ledger.subscribe(
            list(topics), name=name, positions={}, max_records=most, wait_ms=0
        )
        self._batches = aiter(self.subscription)
        self._live = False

    async def drain(self, handle: Callable[[Batch], Awaitable[Any]]) -> None:
        """``handle`` every batch with records until a read finds nothing new."""
        while True:
            batch = await anext(self._batches)
            if batch:
                await handle(batch)
            elif self._live:
                return
            # The one empty batch that ends the catch-up: what was appended meanwhile
            # is read next.
            self._live = self._live or batch.live

    async def close(self) -> None:
        """Stop reading."""
        await self.subscription.close()
