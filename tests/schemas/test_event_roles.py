"""Every event class declares its roles, and each tuple derived from them is what its
consumer handles.

The tuples the folds and services match on (``TERMINAL_EVENTS``, ``STREAM_EVENTS``,
``ENDING_EVENTS``, ``REACTS_TO``, ``FOLDED``, ``ATTEMPT_ENDS``) are derived from the
``ROLES`` of the event classes (and, for the streams, their ``TOPIC``). These tests
hold each one against the code that acts on it: a role given to a type its consumer
does not handle, or a branch added for a type without the role, fails here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from datetime import timedelta
from typing import Any, get_args

import pytest

from projections import classes, decisions, job_state
from projections.decisions import REACTS_TO, classifier_step, decider_step
from projections.history import ENDING_EVENTS, STREAM_EVENTS, E
from projections.job_state import project
from schemas import events as ev
from schemas.events import EVENT_TYPES, TERMINAL_EVENTS, Event, Role, with_role
from schemas.views import TERMINAL_STATUSES
from services.processors.dispatch import TO_NODE, commands_for
from services.processors.watchdog import ATTEMPT_ENDS, watch_of
from services.scheduler import core
from services.scheduler.core import FOLDED, SchedulerState
from tests.schemas.samples import sample

JOB_EVENTS = [cls for cls in EVENT_TYPES.values() if not issubclass(cls, STREAM_EVENTS)]


def _event(cls: type[E], attempt: int = 1, **fields: object) -> E:
    """A filled-in ``cls`` of job ``j``, attempt ``attempt``, with an id of its own."""
    own = {"job_id": "j", "attempt": attempt, "event_id": f"{cls.__name__}-{attempt}"}
    made: E = sample(cls).model_copy(update=own | fields)
    return made


SUBMITTED = _event(ev.JobSubmitted, attempt=0)
SCHEDULED = _event(ev.AttemptScheduled)


def _names(types: tuple[type[Event], ...] | set[type[Event]]) -> set[str]:
    return {cls.__name__ for cls in types}


def _matched(func: Callable[..., Any], module: Any, skip: str = "") -> set[str]:
    """The event types ``func`` tells apart with ``isinstance`` (tuples of the module, such
    as TERMINAL_EVENTS, and base classes, such as NodeEvent, spelled out), but for the
    tuple named ``skip`` (the one under test, which its guard clause names)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    found: set[str] = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "isinstance"):
            continue
        for name in ast.walk(call.args[1]):
            if not isinstance(name, ast.Name) or name.id == skip:
                continue
            value = getattr(module, name.id)
            types = value if isinstance(value, tuple) else (value,)
            found |= {c.__name__ for c in EVENT_TYPES.values() if issubclass(c, types)}
    return found


def test_every_event_class_declares_its_roles() -> None:
    undeclared = [name for name, cls in EVENT_TYPES.items() if "ROLES" not in vars(cls)]
    assert undeclared == [], f"{undeclared}: give each a ROLES of its own (schemas/events.py)"
    for cls in EVENT_TYPES.values():
        assert all(isinstance(role, Role) for role in cls.ROLES), cls.__name__


def test_every_role_is_given_to_some_event() -> None:
    given = set().union(*(cls.ROLES for cls in EVENT_TYPES.values()))
    assert given == set(Role)


def test_the_streams_are_the_types_the_job_fold_does_not_handle() -> None:
    handled = {cls.__name__ for cls in job_state._apply.registry if cls is not object}
    assert handled == _names(set(JOB_EVENTS))
    assert _names(STREAM_EVENTS) == {
        name
        for name, cls in EVENT_TYPES.items()
        if cls.TOPIC != "job-events" or Role.FENCE in cls.ROLES  # the fence: no job's
    }


@pytest.mark.parametrize("cls", JOB_EVENTS[1:], ids=lambda cls: cls.__name__)
def test_terminal_events_are_the_ones_that_end_the_job_view(cls: type[Event]) -> None:
    view = project([SUBMITTED, SCHEDULED, _event(cls)])
    assert (view.status in TERMINAL_STATUSES) == (cls in TERMINAL_EVENTS)


def test_terminal_events_are_the_class_tables_terminals_and_success() -> None:
    assert _names(TERMINAL_EVENTS) == {*get_args(classes.Terminal), "JobSucceeded"}


def test_attempt_ends_are_what_leaves_the_watchdog_nothing_to_watch() -> None:
    unwatched = {
        cls
        for cls in JOB_EVENTS[1:]
        if watch_of([SUBMITTED, SCHEDULED, _event(cls)]) is None
        and cls not in TERMINAL_EVENTS
        and cls is not ev.AttemptCancelled  # a stopped attempt: watch_of's own branch
    }
    assert _names(unwatched) == _names(ATTEMPT_ENDS)


def test_attempt_ends_are_the_triggers_that_name_the_node() -> None:
    # The other triggers end a job that was never placed (a rejection, no capacity).
    named = {cls for cls in ENDING_EVENTS if "node_id" in cls.model_fields}
    assert _names(ATTEMPT_ENDS) == _names(named)


def test_ending_events_are_what_the_classifier_classifies_on() -> None:
    classified = {
        cls for cls in JOB_EVENTS[1:] if classifier_step([SUBMITTED, e := _event(cls, 0)], e)
    }
    # A JobRejected is a trigger too (its facts are gathered, phase "submit"), but it is
    # already the verdict: the classifier appends nothing on it.
    assert _names(classified) == _names(ENDING_EVENTS) - {"JobRejected"}


def test_reacts_to_is_the_triggers_and_what_the_decider_decides_on() -> None:
    assert _names(REACTS_TO) == _names(ENDING_EVENTS) | _matched(decider_step, decisions)


def test_folded_is_what_the_scheduler_state_observes() -> None:
    assert _names(FOLDED) == _matched(SchedulerState.observe, core, skip="FOLDED")


def test_decisions_are_what_the_classifier_and_decider_derive() -> None:
    tree = ast.parse(inspect.getsource(decisions))
    derived = {
        call.func.value.id
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "derived"
        and isinstance(call.func.value, ast.Name)
    }
    assert derived == _names(with_role(Role.DECISION))


def test_to_node_is_what_dispatch_sends_to_a_node() -> None:
    now = SCHEDULED.dispatch_deadline - timedelta(days=1)  # not too late to place
    sent = set()
    for cls in JOB_EVENTS[1:]:
        # A cancel as the user asks for it: the node is dispatch's to fill in.
        event = _event(cls, node_id="") if cls is ev.CancelRequested else _event(cls)
        before = [SUBMITTED] if cls is ev.AttemptScheduled else [SUBMITTED, SCHEDULED]
        if commands_for([*before, event], [*before, event], event, now):
            sent.add(cls)
    assert _names(sent) == _names(TO_NODE)
