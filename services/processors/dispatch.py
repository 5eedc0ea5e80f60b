"""Which job-events go to a node, as a pure function (the dispatch processor carries it out).

``AttemptScheduled`` is sent with the job's spec filled in from its JobSubmitted (the
decision on job-events carries only the spec's digest and what its readers need; the
node needs all of it: docs/architecture.md, "The spec, stored once"), and not at all
when the job's JobSubmitted is unknown; ``CancelRequested`` is copied with the
node of the job's current attempt filled in (and a derived id);
``AttemptSuperseded`` becomes a CancelRequested for that attempt on its node. An attempt
the log already shows as accepted or ended, or whose dispatch deadline has
passed, is not sent again: after a restart the processor re-reads old
scheduling decisions and must not make a node start finished work.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from projections.history import History, attempt_ended, unique
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptAccepted,
    AttemptLost,
    AttemptScheduled,
    AttemptSuperseded,
    CancelRequested,
    ComputeReleased,
    DispatchTimedOut,
    Event,
    Role,
    with_role,
)

PROCESSOR = "dispatch"

TO_NODE = with_role(Role.TO_NODE)
"""The job-events :func:`commands_for` may send to a node; it sends nothing for any other."""


def _attempt_over(events: Sequence[Event], attempt: int) -> bool:
    """The job ended, or the attempt did (a stale DispatchTimedOut after the node
    accepted it does not end it: a cancel must still reach that node)."""
    return any(isinstance(e, TERMINAL_EVENTS) for e in events) or attempt_ended(
        events, attempt, by=(ComputeReleased, AttemptLost, DispatchTimedOut)
    )


def commands_for(
    history: Sequence[Event], known: Sequence[Event], event: Event, now: datetime
) -> list[Event]:
    """The node commands ``event`` leads to.

    Args:
        history: the job's events up to and including ``event``.
        known: every event of the job the processor knows (may run ahead of ``event``).
        event: the job-event being processed.
        now: wall-clock time; late AttemptScheduled records are not sent.
    """
    prefix = unique(history)
    if isinstance(event, AttemptScheduled):
        everything = unique(known)
        if now >= event.dispatch_deadline or _attempt_over(everything, event.attempt):
            return []
        if any(isinstance(e, AttemptAccepted) and e.attempt == event.attempt for e in everything):
            return []
        spec = event.spec or History.of(everything).spec
        if spec is None:
            return []  # no spec to run (the node would refuse it): its dispatch times out
        out: list[Event] = [event.for_node(spec)]
        cancel = next((e for e in prefix if isinstance(e, CancelRequested)), None)
        if cancel is not None:
            # The job was cancelled before it was placed: the node must not run it either.
            out.append(_routed(cancel, event))
        return out
    if isinstance(event, AttemptSuperseded):
        # Another attempt's result won: the node stops this one the way it stops a cancel.
        # Sent even after the job ended (that is when it is decided) and to a node declared
        # lost (it may only have been unheard); a node not running it ignores it.
        stop = CancelRequested.derived(
            event,
            PROCESSOR,
            str(event.attempt),
            requested_by="gridledger",
            reason=f"superseded: {event.reason}",
            node_id=event.node_id,
        )
        return [stop]
    if isinstance(event, CancelRequested) and not event.node_id:
        scheduled = [e for e in prefix if isinstance(e, AttemptScheduled)]
        if not scheduled:
            return []
        current = max(scheduled, key=lambda e: e.attempt)
        if _attempt_over(prefix, current.attempt):
            return []
        return [_routed(event, current)]
    return []


def _routed(cancel: CancelRequested, scheduled: AttemptScheduled) -> CancelRequested:
    """The cancel as sent to the node running ``scheduled``: the same request, addressed."""
    return CancelRequested.derived(
        cancel,
        PROCESSOR,
        str(scheduled.attempt),
        attempt=scheduled.attempt,
        node_id=scheduled.node_id,
        requested_by=cancel.requested_by,
        reason=cancel.reason,
    )
