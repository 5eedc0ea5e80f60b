"""Every job-event type has a handler in the job-state fold.

The fold's fallback turns an unhandled event into an anomaly and otherwise ignores it,
which keeps replay total but would hide a forgotten handler: a new event type added to
``schemas/events.py`` without one would silently change nothing. This guard makes the
omission a test failure instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import singledispatch
from typing import Any

from projections import job_state
from projections.history import STREAM_EVENTS
from schemas.events import EVENT_TYPES, Event, JobSucceeded

JOB_EVENT_TYPES = sorted(
    (cls for cls in EVENT_TYPES.values() if not issubclass(cls, STREAM_EVENTS)),
    key=lambda cls: cls.__name__,
)


def _unhandled(dispatcher: Any, types: Iterable[type[Event]]) -> list[str]:
    """Names of the types that fall through to the dispatcher's fallback."""
    fallback: Callable[..., Any] = dispatcher.registry[object]
    return [cls.__name__ for cls in types if dispatcher.dispatch(cls) is fallback]


def test_the_job_event_types_are_the_ones_on_the_job_events_topic() -> None:
    # Stream and node events are folded elsewhere (or not at all); everything else is a
    # lifecycle fact or decision and must be seen by the job fold.
    assert len(JOB_EVENT_TYPES) >= 30
    assert JobSucceeded in JOB_EVENT_TYPES
    assert not any(issubclass(cls, STREAM_EVENTS) for cls in JOB_EVENT_TYPES)


def test_every_job_event_type_has_a_fold_handler() -> None:
    missing = _unhandled(job_state._apply, JOB_EVENT_TYPES)
    assert missing == [], (
        f"{missing} have no handler in projections/job_state.py: register one with "
        "@_apply.register, or the fold records an anomaly and ignores them"
    )


def test_the_guard_fails_when_a_handler_is_removed() -> None:
    # A copy of the fold's dispatcher without JobSucceeded's handler, to show the guard
    # above would catch exactly that omission.
    original = job_state._apply
    crippled = singledispatch(original.registry[object])
    for cls, handler in original.registry.items():
        if cls not in (object, JobSucceeded):
            crippled.register(cls, handler)
    assert _unhandled(crippled, JOB_EVENT_TYPES) == ["JobSucceeded"]
