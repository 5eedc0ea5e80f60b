"""Every job ends, exactly once, within its bound: property tests over timed interleavings.

The generator plays the deadline keepers by the thresholds (the scheduler's
queue and dispatch deadlines, the watchdog's silence, lost and finishing
deadlines, the agent's runtime limit) and the processors by ``react``, and mixes
in what goes wrong: nodes that die, broker outages (silence, then the node's
facts delivered late, possibly after the job ended), cancels, finishing
timeouts. Delivery is then made unreliable: duplicates, reordering and a second,
conflicting terminal event for the same job.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.accounting import account
from projections.bounds import Thresholds, backoff_s, terminal_bound_s, terminal_deadline
from projections.decisions import react
from projections.job_state import evolve, project
from schemas.events import (
    TERMINAL_EVENTS,
    Event,
    JobCancelled,
    JobFailed,
    JobSubmitted,
    JobSucceeded,
    RetryScheduled,
)
from schemas.spec import JobSpec
from schemas.views import TERMINAL_STATUSES
from tests.projections.histories import JobHistory, job_spec
from tests.projections.test_invariants import PROPERTY, TERMINAL_STATUS, redelivered

T = Thresholds(
    dispatch_timeout_s=60,
    start_s=10,
    silence_s=30,
    lost_after_s=60,
    finishing_timeout_s=120,
    stop_grace_s=10,
    check_s=1,
)
RUN_OUTCOMES = (
    "outage",
    "success",
    "exit_1",
    "killed",
    "runtime_exceeded",
    "node_dies",
    "outage",
    "finishing_timeout",
    "cancel",
    "upload_failed",
    "outage",
    "node_dies",
)
"""Outages and dying nodes weigh more: they are where the lifecycle can go wrong."""


def _end(h: JobHistory, how: str) -> None:
    """The agent's end of the current attempt (exit, outputs, release)."""
    if how == "success":
        h.exit(0, ("saved model.pt",))
        h.output()
    elif how == "upload_failed":
        h.exit(0, ("saved model.pt",))
        h.output_failed("model.pt", "store_failed", "503")
    elif how == "killed":
        h.exit(137, ())
    else:
        h.exit(1, ("RuntimeError: boom",))
    h.wait(1).release()


class Late:
    """An attempt declared lost whose node was only unheard: its end arrives later."""

    def __init__(self, attempt: int, node: str, how: str) -> None:
        self.attempt, self.node, self.how = attempt, node, how

    def deliver(self, h: JobHistory) -> None:
        h.late(self.attempt, self.node)
        if self.how == "release_only":  # it had exited and stored; only the release was late
            h.wait(1).release()
        else:
            _end(h, self.how)
        h.current()


def _run(h: JobHistory, draw: Any, late: list[Late]) -> None:
    """One attempt from its placement on, by the thresholds."""
    spec = h.spec
    node = f"node-{h.attempt + 1}"
    if draw(st.integers(0, 9)) == 0:
        h.schedule(node=node)
        h.wait(T.dispatch_timeout_s).dispatch_timed_out()
        return
    h.schedule(node=node)
    h.wait(draw(st.integers(1, int(T.dispatch_timeout_s) - 1))).accept()
    h.hold()
    h.wait(draw(st.integers(0, int(T.start_s)))).image_ok()
    h.container_started()
    outcome = draw(st.sampled_from(RUN_OUTCOMES))
    if outcome == "runtime_exceeded":
        h.wait(spec.limits.max_runtime_s).wait(T.stop_grace_s)
        h.exit(137, (), runtime_exceeded=True)
        h.release("runtime_exceeded")
        return
    h.wait(draw(st.integers(1, spec.limits.max_runtime_s)))
    if outcome in ("node_dies", "outage"):
        if outcome == "node_dies":
            h.node_dies()
        else:
            h.heartbeats_pause()
        h.wait(T.silence_s).unresponsive(lost_after_s=T.lost_after_s)
        h.wait(T.lost_after_s).lost()
        if outcome == "outage":
            late.append(Late(h.attempt, h.node, draw(st.sampled_from(["success", "exit_1"]))))
    elif outcome == "finishing_timeout":
        h.exit(0, ("saved model.pt",))
        h.output()
        h.wait(T.finishing_timeout_s).finishing_timed_out()
        late.append(Late(h.attempt, h.node, "release_only"))
    elif outcome == "cancel":
        h.cancel()
        h.wait(1).attempt_cancelled()
        h.wait(draw(st.integers(0, int(T.stop_grace_s))))
        h.exit(143, (), signal=15)
        h.release("cancelled")
    else:
        _end(h, outcome)


@st.composite
def timed_jobs(draw: Any) -> JobHistory:
    """A job's whole life under the thresholds T, with the live decisions appended."""
    spec = job_spec(
        retry={"max_attempts": draw(st.integers(1, 4)), "backoff_s": 5, "backoff_cap_s": 300},
        limits={
            "max_runtime_s": draw(st.integers(30, 300)),
            "queue_timeout_s": draw(st.integers(30, 600)),
        },
    )
    h = JobHistory(job_id="job-b", spec=spec, tick_s=10.0)
    h.submit()
    late: list[Late] = []
    queue = spec.limits.queue_timeout_s
    h.queue(timeout_s=queue)
    for _ in range(spec.retry.max_attempts + 1):
        view = project(h.events)
        if view.status in TERMINAL_STATUSES:
            break
        if view.status == "retrying":
            retry = [e for e in h.events if isinstance(e, RetryScheduled)][-1]
            h.wait(retry.delay_s).queue(timeout_s=queue)
        elif view.status != "queued":
            break  # nothing would place or end it: a stuck job, which the test reports
        step = draw(st.sampled_from(["run"] * 12 + ["no_capacity", "cancel_queued"]))
        if step == "no_capacity":
            h.wait(queue).no_capacity()
        elif step == "cancel_queued":
            h.wait(draw(st.integers(0, queue))).cancel()
        else:
            h.wait(draw(st.integers(0, queue - 1)))
            _run(h, draw, late)
        while late and draw(st.booleans()):  # the spool delivers while the job goes on
            late.pop(draw(st.integers(0, len(late) - 1))).deliver(h)
    for pending in late:  # ... or only after it ended
        pending.deliver(h)
    return h


def _terminal(events: list[Event]) -> Event:
    found = [e for e in events if isinstance(e, TERMINAL_EVENTS)]
    assert len(found) == 1, [e.type for e in found]
    return found[0]


@PROPERTY
@given(timed_jobs())
def test_every_job_ends_exactly_once_within_its_bound(h: JobHistory) -> None:
    terminal = _terminal(h.events)  # ended, and only once: no job is left in flight
    submitted = h.events[0]
    assert isinstance(submitted, JobSubmitted)
    deadline = terminal_deadline(submitted.occurred_at, h.spec, T)
    assert terminal.occurred_at <= deadline, (
        f"ended {terminal.occurred_at - submitted.occurred_at} after submission, "
        f"bound {timedelta(seconds=terminal_bound_s(h.spec, T))}"
    )
    assert project(h.events).status == TERMINAL_STATUS[terminal.type]


CONFLICTING = {
    "JobSucceeded": JobFailed,
    "JobSucceededWithErrors": JobSucceeded,
    "JobFailed": JobSucceeded,
    "JobCancelled": JobSucceeded,
    "JobRejected": JobCancelled,
}


def _conflicting(h: JobHistory, terminal: Event) -> Event:
    """A second, different terminal event for the same job (a racing or buggy writer)."""
    cls = CONFLICTING[terminal.type]
    extra: dict[str, Any] = {"failure_class": "unknown"} if cls is JobFailed else {}
    return cls(
        event_id="conflicting-terminal",
        job_id=h.job_id,
        attempt=terminal.attempt,
        occurred_at=terminal.occurred_at,
        producer="racer",
        **extra,
    )


@PROPERTY
@given(timed_jobs(), st.data())
def test_the_first_terminal_event_delivered_wins_over_a_conflicting_one(
    h: JobHistory, data: st.DataObject
) -> None:
    terminal = _terminal(h.events)
    other = _conflicting(h, terminal)
    events = data.draw(redelivered(h.events))
    events.insert(data.draw(st.integers(0, len(events))), other)
    if data.draw(st.booleans()):
        events = data.draw(st.permutations(events))
    view = None
    first = None
    for event in events:
        view = evolve(view, event)
        if first is None and isinstance(event, TERMINAL_EVENTS):
            first = event
        if first is not None:  # from the first terminal event on, the status never moves
            assert view.status == TERMINAL_STATUS[first.type]
            assert view.terminal_event == first.type and view.terminal_at == first.occurred_at
    assert first is not None and view is not None
    second = [e for e in events if isinstance(e, TERMINAL_EVENTS) and e.type != first.type]
    assert second and any("second terminal event ignored" in a for a in view.anomalies)
    assert account(events, h.ticks).status == view.status


@PROPERTY
@given(timed_jobs(), st.data())
def test_nothing_is_decided_for_a_job_that_ended(h: JobHistory, data: st.DataObject) -> None:
    """The classifier and the decider stay silent after the terminal event, whatever
    arrives: late facts, redeliveries or a conflicting terminal event."""
    terminal = _terminal(h.events)
    at = h.events.index(terminal)
    after = h.events[at + 1 :]
    assert all(e.producer not in ("classifier",) for e in after)
    assert all(not isinstance(e, RetryScheduled) for e in after)
    noisy = [*h.events, _conflicting(h, terminal), *data.draw(redelivered(h.events))]
    for i in range(at + 1, len(noisy)):
        assert react(noisy[: i + 1], noisy[i]) == []


def test_the_bound_adds_the_waits_of_every_attempt() -> None:
    spec = JobSpec.model_validate(
        {
            "image": "x",
            "limits": {"max_runtime_s": 100, "queue_timeout_s": 50},
            "retry": {"max_attempts": 3, "backoff_s": 5, "backoff_cap_s": 8},
        }
    )
    per_attempt = 50 + 60 + 10 + 100 + 10 + max(120, 30 + 60) + 1
    assert terminal_bound_s(spec, T) == 3 * per_attempt + 5 + 8
    assert [backoff_s(spec.retry, k) for k in (1, 2, 3)] == [5, 8, 8]
    single = spec.model_copy(update={"retry": spec.retry.model_copy(update={"max_attempts": 1})})
    assert terminal_bound_s(single, T) == per_attempt


def test_thresholds_read_the_service_settings_by_name() -> None:
    class Settings:
        scheduler_dispatch_timeout_s = 7.0
        watchdog_silence_s = 8.0
        watchdog_lost_after_s = 9.0
        watchdog_finishing_timeout_s = 10.0

    t = Thresholds.of(Settings(), stop_grace_s=3)
    assert (t.dispatch_timeout_s, t.silence_s, t.lost_after_s, t.finishing_timeout_s) == (
        7.0,
        8.0,
        9.0,
        10.0,
    )
    assert t.stop_grace_s == 3


def test_the_bound_waits_out_a_silence_longer_than_the_finishing_deadline() -> None:
    # A node silent for silence_s + lost_after_s (300 s) before its attempt is declared lost
    # outlasts the finishing deadline (120 s): the job's deadline waits for the loss.
    spec = JobSpec.model_validate(
        {"image": "x", "limits": {"max_runtime_s": 100, "queue_timeout_s": 50},
         "retry": {"max_attempts": 2, "backoff_s": 5}}
    )  # fmt: skip
    slow = T.model_copy(update={"silence_s": 200.0, "lost_after_s": 100.0})
    assert slow.finishing_timeout_s == 120
    per_attempt = 50 + 60 + 10 + 100 + 10 + (200 + 100) + 1
    submitted = datetime(2026, 1, 1, tzinfo=UTC)
    deadline = terminal_deadline(submitted, spec, slow)
    assert deadline == submitted + timedelta(seconds=2 * per_attempt + 5)
