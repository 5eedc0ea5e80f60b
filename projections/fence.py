"""The leader fence for the server's readers: which scheduler decisions on ``job-events``
they apply, judged on the events as models.

The rule itself is :mod:`gridledger_client.fence` (in the client distribution, so that a
subscriber can apply the one copy); this module gives it the events. The processors
(live and at rebuild), the sink (and so ``GET /v1/events``, which reads the sink's
table), replay and the schedulers themselves drop the same records. The webhooks
service and the client's ``Subscriber`` do not apply it yet (docs/architecture.md, "The
scheduler's leader").
"""

from __future__ import annotations

from gridledger_client.fence import Fence as _Rule

from schemas.events import Event, LeaderElected, SchedulerDecision


class Fence(_Rule):
    """Per partition of ``job-events``: the leader epochs announced, by offset."""

    def admits(self, partition: int, offset: int, event: Event) -> bool:
        """Whether readers apply the event read at ``offset`` of ``partition``: a marker is
        folded (never applied), a scheduler decision of an epoch older than the one in
        force there is dropped, everything else is applied."""
        return self.judge(
            partition,
            offset,
            event.epoch if isinstance(event, LeaderElected) else None,
            event.leader_epoch if isinstance(event, SchedulerDecision) else None,
        )
