"""Agent facts: what the agent on a node reports, keyed within its attempt and built one
way, so the agent, the fleet simulator and the test node give a fact the same id.

The wire types are :mod:`schemas.events`; here is how the agent makes them: the producer
it writes as, the key of each fact within its attempt (:data:`FACT_KEYS`), and the two
builders, :func:`agent_fact` (about an attempt, derived from its AttemptScheduled) and
:func:`node_fact` (about the node itself). Pure: no clock, the caller says when.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from schemas.events import (
    AttemptHeartbeat,
    AttemptScheduled,
    CheckpointStored,
    Event,
    LogChunk,
    MeterTick,
    NodeEvent,
    OutputFailed,
    OutputStored,
)


def agent_producer(node_id: str) -> str:
    """The ``producer`` of everything the agent on ``node_id`` writes; its facts' ids
    derive from it."""
    return f"agent/{node_id}"


class FactKey(NamedTuple):
    """How an attempt's fact of one type is told apart from the others of the attempt.

    The key names the fact within the attempt: its id derives from it, and the agent's
    journal lists the keys already emitted, so a restarted agent re-emits a fact with
    the id it had (a duplicate the folds drop) instead of a second fact.
    """

    label: str
    fields: tuple[str, ...] = ()
    """The event's fields whose values follow the label, in this order."""
    revised: bool = False
    """The key ends with a revision the event does not carry (a checkpoint file
    rewritten under the same name is a new fact)."""


FACT_KEYS: dict[type[Event], FactKey] = {
    AttemptHeartbeat: FactKey("AttemptHeartbeat", ("seq",)),
    MeterTick: FactKey("MeterTick", ("tick_index",)),
    LogChunk: FactKey("LogChunk", ("stream", "seq")),
    CheckpointStored: FactKey("CheckpointStored", ("name",), revised=True),
    # One outcome per declared output, stored or failed: the two share the key.
    OutputStored: FactKey("Output", ("path",)),
    OutputFailed: FactKey("Output", ("path",)),
}
"""Facts of which an attempt has several; any other fact type occurs once per attempt
and its key is its type's name."""


def fact_key(cls: type[Event], fields: dict[str, Any], revision: object = None) -> str:
    """The key of the fact ``cls(**fields)`` within its attempt (see :class:`FactKey`)."""
    rule = FACT_KEYS.get(cls, FactKey(cls.__name__))
    if rule.revised and revision is None:
        raise TypeError(
            f"a {cls.__name__} fact needs a revision: the same {', '.join(rule.fields)} "
            "may be stored again with other content"
        )
    if revision is not None and not rule.revised:
        raise TypeError(f"a {cls.__name__} fact takes no revision (see FACT_KEYS)")
    missing = [f for f in rule.fields if f not in fields]
    if missing:
        raise TypeError(f"a {cls.__name__} fact is keyed by {', '.join(missing)}: pass it")
    parts = [rule.label, *(str(fields[f]) for f in rule.fields)]
    if revision is not None:
        parts.append(str(revision))
    return ":".join(parts)


AnyEvent = TypeVar("AnyEvent", bound=Event)
AnyNodeEvent = TypeVar("AnyNodeEvent", bound=NodeEvent)


def node_fact(
    cls: type[AnyNodeEvent], node_id: str, at: datetime, /, **fields: Any
) -> AnyNodeEvent:
    """A fact the agent on ``node_id`` reports about the node itself (registration,
    heartbeat, drain), occurring ``at``: the agent, the fleet simulator and the test
    node build them here alike. Caused by nothing, so its id is new."""
    return cls(node_id=node_id, occurred_at=at, producer=agent_producer(node_id), **fields)


def agent_fact(
    cls: type[AnyEvent],
    scheduled: AttemptScheduled,
    node_id: str,
    at: datetime,
    /,
    revision: object = None,
    **fields: Any,
) -> AnyEvent:
    """A fact the agent on ``node_id`` reports about the attempt ``scheduled`` placed,
    occurring ``at``: the one builder the agent and the fleet simulator share, so a
    simulated attempt carries exactly the ids the real agent would give it.

    Derived from the AttemptScheduled by the agent (:meth:`Event.derived`, suffix
    :func:`fact_key`), so a restarted agent re-emits the same ids.
    """
    key = fact_key(cls, fields, revision)
    return cls.derived(scheduled, agent_producer(node_id), key, occurred_at=at, **fields)
