"""Which scheduler leads, and the fence that makes a deposed one harmless.

Any number of schedulers may run; each holds a member of one lease
(:meth:`LedgerPort.lease`: a consumer group on the one-partition
``scheduler-lease`` topic, so the broker's group coordinator decides who holds it
and evicts a member that stopped heartbeating after ``scheduler_lease_timeout_s``).
All of them fold the topics; only the leader decides. Taking the lead:

1. **claim**: append a :class:`LeaderElected` to ``scheduler-lease``; one more than
   the offset the broker gives it is the epoch (unique and growing, whoever claims),
   or one more than the highest epoch already announced if that is higher;
2. **fence**: append a LeaderElected with that epoch to every partition of
   ``job-events``; from each marker on, readers of that partition drop a decision of
   an older epoch (:mod:`projections.fence`), whoever still sends one;
3. **catch up**: fold on until every marker has been read back, so everything the
   previous leader got onto the log before the fence is in the state;
4. decide, stamping the epoch on every decision.

A scheduler that sees a higher epoch than its own on any partition, or loses the
lease, was deposed: its state assumed decisions that are now dropped, so the
service rebuilds it from the topics and stands by (:class:`DeposedError`).
"""

from __future__ import annotations

import logging
import os
import socket
from functools import cache, partial

from projections.fence import Fence
from schemas.events import Event, LeaderElected
from services.backoff import retrying
from services.clock import utcnow
from services.ledger import LedgerPort, broker_unavailable, partition_for
from services.settings import Settings

log = logging.getLogger(__name__)

PROCESSOR = "scheduler"


class DeposedError(Exception):
    """Another scheduler took the lead: rebuild the state and stand by."""


@cache
def route_key(partition: int, partitions: int) -> str:
    """A key the default partitioner places on ``partition`` of ``partitions``: where the
    fence marker for that partition goes (the same for every scheduler)."""
    n = 0
    while partition_for(f"scheduler-fence/{n}", partitions) != partition:
        n += 1
    return f"scheduler-fence/{n}"


def candidate_name() -> str:
    """This scheduler instance, as its claims name it."""
    return f"{PROCESSOR}/{socket.gethostname()}/{os.getpid()}"


class Leadership:
    """One scheduler's lease, claim and fence (see the module docstring)."""

    def __init__(self, settings: Settings, ledger: LedgerPort) -> None:
        self.settings = settings
        self.ledger = ledger
        self.candidate = candidate_name()
        self.job_events = settings.topic("job-events")
        self.lease = ledger.lease(
            settings.topic("scheduler-lease"),
            f"{settings.topic_prefix}scheduler",
            settings.scheduler_lease_timeout_s,
        )
        self.fence = Fence()
        self.epoch = 0
        """The epoch claimed (0: standing by)."""
        self._unread: dict[int, int] = {}
        """Partition -> offset of this leader's marker, until it is read back."""
        self.elections = 0
        """Times this scheduler took the lead."""

    async def start(self) -> None:
        """Join the lease (:attr:`leading` follows once it comes here and is claimed)."""
        await self.lease.start()

    async def stop(self) -> None:
        """Leave the lease: a standby takes the lead at once."""
        await self.lease.stop()

    def reset(self) -> None:
        """Forget the fence and the claim: the topics are read again from the start."""
        self.fence = Fence()
        self.epoch = 0
        self._unread = {}

    @property
    def leading(self) -> bool:
        """Claimed, fenced, caught up with the fence, and not deposed since."""
        return self.epoch > 0 and not self._unread and self.lease.held

    def admits(self, partition: int, offset: int, event: Event) -> bool:
        """Fold ``event`` (read at ``offset`` of a ``job-events`` partition) into the fence;
        whether the scheduler's state takes it. Raises :class:`DeposedError` at a higher epoch
        than this leader's."""
        if not self.fence.admits(partition, offset, event):
            if isinstance(event, LeaderElected):
                if self.epoch and event.epoch == self.epoch:
                    self._unread.pop(partition, None)
                elif self.epoch and event.epoch > self.epoch:
                    raise DeposedError(f"{event.candidate} leads with epoch {event.epoch}")
            return False
        return True

    def check(self) -> None:
        """Raise :class:`DeposedError` when this leader lost the lease."""
        if self.epoch and not self.lease.held:
            raise DeposedError(f"the lease moved (epoch {self.epoch} lost it)")

    async def claim(self) -> None:
        """Claim the lead and fence every partition (steps 1 and 2); deciding waits until
        the markers are read back (:attr:`leading`)."""
        now = utcnow()
        claim = LeaderElected(occurred_at=now, producer=self.candidate, candidate=self.candidate)
        lease_topic = self.settings.topic("scheduler-lease")
        claimed = await retrying(
            partial(self.ledger.append, claim, lease_topic),
            outage=self.ledger.outage,
            transient=broker_unavailable,
            backoff=self.settings.reconnect_backoff(),
        )
        # Above any epoch announced already, too: a marker no claim stands behind (a
        # forged or restored record) cannot fence the leader out for good.
        epoch = max(claimed.offset + 1, self.fence.latest() + 1)
        count = await self.ledger.partitions(self.job_events)
        markers = [
            LeaderElected(
                occurred_at=now,
                producer=self.candidate,
                candidate=self.candidate,
                epoch=epoch,
                partition=p,
                route=route_key(p, count),
            )
            for p in range(count)
        ]
        appended = await retrying(
            partial(self.ledger.append_many, markers),
            outage=self.ledger.outage,
            transient=broker_unavailable,
            backoff=self.settings.reconnect_backoff(),
        )
        self.epoch = epoch
        self._unread = {a.partition: a.offset for a in appended}
        self.elections += 1
        log.info("%s claimed the lead: epoch %d", self.candidate, epoch)
