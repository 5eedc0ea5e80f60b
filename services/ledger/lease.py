"""Leadership by the broker: a consumer group on a one-partition topic.

Every candidate (a scheduler, and its standby) joins one consumer group on the
lease topic's single partition; the group coordinator assigns that partition to
exactly one live member at a time, and a member that stops heartbeating is
evicted after the session timeout, when the partition moves to another one.
Kafka does the failure detection: nothing here compares clocks. The sticky
assignor keeps the partition where it is when a standby joins, so starting one
does not move the lead.

Holding the lease is not what makes a decision safe (a member may still believe
it holds it after it was evicted): the leader epoch and the fence on
``job-events`` are (:mod:`projections.fence`); the lease only says who should
take the lead next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaError

from services.settings import Settings
from services.transport import kafka_options

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0
"""How long leaving the group may take before the member just goes."""


class KafkaLease(ConsumerRebalanceListener):
    """:class:`services.ledger.port.Lease` on the broker's group coordinator."""

    def __init__(
        self, settings: Settings, topic: str, group: str, timeout_s: float, client_id: str
    ) -> None:
        self.topic = topic
        self.held = False
        self.changed = asyncio.Event()
        session_ms = int(timeout_s * 1000)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=group,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 3),
            # Also the rebalance timeout: a join (and a stop during one) waits at most this,
            # not aiokafka's 5 minutes; the poll below runs every second.
            max_poll_interval_ms=max(10_000, 2 * session_ms),
            partition_assignment_strategy=(StickyPartitionAssignor,),
            **kafka_options(settings),
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Join the group (the assignment follows in the background)."""
        await self._consumer.start()
        self._consumer.subscribe([self.topic], listener=self)
        self._task = asyncio.create_task(self._poll(), name=f"lease {self.topic}")

    async def _poll(self) -> None:
        # Polling keeps the membership (max_poll_interval); the claims read are not needed.
        while True:
            try:
                await self._consumer.getmany(timeout_ms=1000)
            except KafkaError as exc:  # an outage: the coordinator moves the lease meanwhile
                log.debug("lease poll: %s", exc)
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Leave the group: the lease moves to another member at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._set(False)
        try:
            # Bounded: a member that cannot say goodbye is evicted after the timeout anyway.
            await asyncio.wait_for(self._consumer.stop(), STOP_WAIT_S)
        except TimeoutError:
            log.warning("left the lease %s without a goodbye: it moves on its timeout", self.topic)

    def _set(self, held: bool) -> None:
        if held != self.held:
            self.held = held
            self.changed.set()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Kept until the assignment that follows says otherwise (the sticky assignor gives
        it back to its holder when a member joins)."""

    async def on_partitions_assigned(self, assigned: Any) -> None:
        """Held when the lease topic's partition is among those assigned."""
        self._set(any(tp.topic == self.topic for tp in assigned))
