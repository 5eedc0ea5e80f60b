"""The decision step the live processors call, and its replay.

``react(history, event)`` returns the events the classifier and the retry
decider append in response to ``event``: FailureClassified when an attempt
ended unsuccessfully, then (on that FailureClassified) RetryScheduled or the
terminal event; JobSucceeded after a clean success; JobCancelled for a cancel
while no compute is held. Derived events get deterministic ids
(``Event.derived(cause, processor)``) and the cause's ``occurred_at``, so a
processor that crashes and re-processes its input appends exact duplicates
that every fold drops, and a replay recomputes the same events.
"""

from __future__ import annotations

from collections.abc import Sequence

from projections.failures import Classification, classify, classify_refusal
from projections.history import (
    ENDING_EVENTS,
    attempt_ended,
    first,
    is_clean_success,
    is_job_event,
    late_verdict,
    of_type,
    trigger_for,
    unique,
)
from projections.job_state import evolve, project
from projections.retry import DEFAULT_POLICY, RetryDecision, RetryPolicy, decide
from schemas.events import (
    AttemptLost,
    AttemptScheduled,
    AttemptSuperseded,
    CancelRequested,
    ComputeReleased,
    DispatchTimedOut,
    Event,
    FailureClassified,
    JobCancelled,
    JobFailed,
    JobRejected,
    JobSucceeded,
    JobSucceededWithErrors,
    NoCapacity,
    RecordRefused,
    RetryScheduled,
    RetryWithdrawn,
    Role,
    with_role,
)
from schemas.views import TERMINAL_STATUSES, UNPLACED_STATUSES, JobView

CLASSIFIER = "classifier"
DECIDER = "retry-decider"
DECISION_PRODUCERS = (CLASSIFIER, DECIDER)
"""The ``producer`` of every derived event (no instance suffix: replay must reproduce it)."""


REACTS_TO = with_role(Role.TRIGGER, Role.DECIDER_INPUT)
"""The only events :func:`react` derives anything from: the classifier's triggers and
the retry decider's inputs (ComputeReleased is both). For any other event it returns
nothing without reading the history, so callers may skip folding for those."""


def _view(history: Sequence[Event], view: JobView | None = None) -> JobView | None:
    """The view folded from ``history``, or ``view`` when the caller already has it."""
    if view is not None:
        return view
    events = [e for e in history if is_job_event(e)]
    return project(events) if events else None


def classifier_step(
    history: Sequence[Event], event: Event, view: JobView | None = None
) -> list[Event]:
    """What the classifier appends for ``event`` (history up to and including it).

    ``view``, when given, must be the view folded from that same ``history``
    (``project()`` of its job-events, up to and including ``event``); it saves the
    fold and gives the same result. None folds ``history`` here.
    """
    if not isinstance(event, ENDING_EVENTS) or isinstance(event, JobRejected):
        return []
    view = _view(history, view)
    n = event.attempt
    if view is None or view.status in TERMINAL_STATUSES:
        return []  # a late release from a lost node is recorded by the fold, not acted on
    trigger = trigger_for(history, n)
    if trigger is None or trigger.event_id != event.event_id:
        return []  # once per attempt, on the event that ended it
    if first(history, FailureClassified, n) is not None:
        return []
    if isinstance(event, NoCapacity):
        if view.status not in UNPLACED_STATUSES or n < view.attempt:
            return []
    elif n != view.attempt:
        return []  # an earlier attempt's late end; its decision was made already
    if isinstance(event, ComputeReleased) and is_clean_success(history, n):
        return []
    return [_classified(event, classify(history, n))]


def in_flight(history: Sequence[Event], attempt: int) -> bool:
    """The attempt may still run on its node: it was placed, its node never released it,
    and no dispatch timeout ended it (one declared lost may still run: its node may only
    have been unheard)."""
    return (
        first(history, AttemptScheduled, attempt) is not None
        and first(history, ComputeReleased, attempt) is None
        and not attempt_ended(history, attempt, by=(DispatchTimedOut,))
    )


def _stop_others(history: Sequence[Event], cause: Event, keep: int | None, why: str) -> list[Event]:
    """AttemptSuperseded for every attempt but ``keep`` that may still run when the job
    ends, so no attempt runs on silently after another one's result was taken."""
    out: list[Event] = []
    for scheduled in of_type(history, AttemptScheduled):
        n = scheduled.attempt
        if n == keep or not in_flight(history, n) or first(history, AttemptSuperseded, n):
            continue
        lost = first(history, AttemptLost, n) is not None
        state = "was declared lost" if lost else "still runs"
        out.append(
            AttemptSuperseded.derived(
                cause,
                DECIDER,
                f"supersede:{n}",
                attempt=n,
                node_id=scheduled.node_id,
                winner=keep if keep is not None else 0,
                reason=f"attempt {n} on node {scheduled.node_id} {state}; {why}, so it is "
                "stopped if it runs and its compute is credited",
            )
        )
    return out


def _ending(
    history: Sequence[Event], terminal: Event, keep: int | None, why: str = ""
) -> list[Event]:
    """The terminal event, followed by the stops of the attempts it leaves running."""
    if not why:
        why = f"the job ended ({terminal.type}" + (
            f" on attempt {keep})" if keep is not None else ")"
        )
    return [terminal, *_stop_others(history, terminal, keep, why)]


def _late_release(
    history: Sequence[Event], event: ComputeReleased, view: JobView, policy: RetryPolicy
) -> list[Event]:
    """Reconcile the late end of an attempt the watchdog already gave up on (the late
    facts themselves are recorded by the folds as they are).

    The rule (docs/lifecycle.md): the earliest clean success wins. An attempt declared
    lost (or timed out finishing) whose own facts then show a clean success (exit 0,
    every required output stored, not stopped by gridledger) ends the job ``succeeded``
    while it is not yet terminal: a retry not yet placed is withdrawn (RetryWithdrawn)
    and a retry already placed is stopped (AttemptSuperseded, routed to its node as a
    cancel). A late end that is not a clean success replaces the verdict only while the
    retry it caused is not placed and the real facts are not worth a retry either (the
    job's own exit 1, say): the retry is withdrawn, the attempt is classified on its
    real facts and the job ends on them. Otherwise the decision on the loss stands.
    """
    n = event.attempt
    if late_verdict(history, n) is None:
        return []
    if not is_clean_success(history, n):
        return _late_failure(history, event, view, policy)
    out: list[Event] = []
    scheduled = {e.attempt for e in of_type(history, AttemptScheduled)}
    retries = [r for r in of_type(history, RetryScheduled) if r.next_attempt not in scheduled]
    for retry in retries[-1:]:
        out.append(
            RetryWithdrawn.derived(
                event,
                DECIDER,
                "withdraw",
                attempt=retry.attempt,
                next_attempt=retry.next_attempt,
                reason=f"attempt {n} was given up on, but its process exited 0 and stored "
                f"its outputs after all: attempt {retry.next_attempt} is not needed",
            )
        )
    why = (
        f"attempt {n}, given up on by the watchdog, finished cleanly after all and its "
        "result wins (the earliest clean success)"
    )
    return [*out, *_ending(history, JobSucceeded.derived(event, DECIDER), n, why)]


def _late_failure(
    history: Sequence[Event], event: ComputeReleased, view: JobView, policy: RetryPolicy
) -> list[Event]:
    n = event.attempt
    retry = next((r for r in reversed(of_type(history, RetryScheduled, n))), None)
    if retry is None or any(e.attempt > n for e in of_type(history, AttemptScheduled)):
        return []  # the loss was final, or its retry already runs: that decision stands
    c = classify(history, n, at=event)
    d = decide(view, c, policy)
    if d.action == "retry":
        return []  # the real facts are worth a retry too: the one ordered stands
    withdrawn = RetryWithdrawn.derived(
        event,
        DECIDER,
        "withdraw",
        attempt=n,
        next_attempt=retry.next_attempt,
        reason=f"attempt {n} was given up on, but its own facts arrived ({c.failure_class}): "
        f"the job is decided on them and attempt {retry.next_attempt} is not needed",
    )
    classified = _classified(event, c, suffix="late")
    terminal = _terminal(event, c, d)
    return [withdrawn, classified, *_ending(history, terminal, n)]


def _classified(cause: Event, c: Classification, suffix: str = "") -> FailureClassified:
    return FailureClassified.derived(
        cause,
        CLASSIFIER,
        suffix,
        failure_class=c.failure_class,
        attribution=c.attribution,
        retryable=c.retryable,
        summary=c.summary,
        advice=c.advice,
        evidence=c.evidence,
        rule_id=c.rule_id,
        classifier_version=c.classifier_version,
    )


def _terminal(cause: Event, c: Classification, d: RetryDecision) -> Event:
    """The terminal event of a ``final`` decision on ``cause``."""
    if d.terminal == "JobCancelled":
        return JobCancelled.derived(cause, DECIDER, summary=c.summary)
    if d.terminal == "JobSucceededWithErrors":
        summary = f"{c.summary} {d.reason[:1].upper()}{d.reason[1:]}."
        return JobSucceededWithErrors.derived(cause, DECIDER, summary=summary)
    return JobFailed.derived(
        cause,
        DECIDER,
        failure_class=c.failure_class,
        attribution=c.attribution,
        summary=c.summary,
        advice=c.advice,
        reason=d.reason,
    )


def _decided(history: Sequence[Event], attempt: int) -> bool:
    return any(isinstance(e, RetryScheduled) and e.attempt == attempt for e in history)


def decider_step(
    history: Sequence[Event],
    event: Event,
    policy: RetryPolicy = DEFAULT_POLICY,
    view: JobView | None = None,
) -> list[Event]:
    """What the retry decider appends for ``event`` (history up to and including it).

    ``view``, when given, must be the view folded from that same ``history``
    (``project()`` of its job-events, up to and including ``event``); it saves the
    fold and gives the same result. None folds ``history`` here.
    """
    view = _view(history, view)
    if view is None or view.status in TERMINAL_STATUSES:
        return []
    if isinstance(event, CancelRequested):
        if view.status not in UNPLACED_STATUSES:
            return []  # compute may be held: the agent stops it, the classifier follows
        who = f" by {event.requested_by}" if event.requested_by else ""
        summary = f"Cancelled{who} while {view.status}; no compute was held, nothing is owed."
        return _ending(history, JobCancelled.derived(event, DECIDER, summary=summary), None)
    if isinstance(event, ComputeReleased):
        n, trigger = event.attempt, trigger_for(history, event.attempt)
        released = first(history, ComputeReleased, n)
        if released is None or released.event_id != event.event_id:
            return []  # a repeated release of the same attempt (another event id)
        if trigger is not None and trigger.event_id != event.event_id:
            return _late_release(history, event, view, policy)
        if (
            n == view.attempt
            and trigger is not None
            and first(history, FailureClassified, n) is None
            and is_clean_success(history, n)
        ):
            return _ending(history, JobSucceeded.derived(event, DECIDER), n)
        return []
    if isinstance(event, RecordRefused):
        # The job cannot be shown or accounted as it is: end it now rather than let it wait
        # on records that are never published (platform side: its compute is credited).
        c = classify_refusal(event, view.attempt)
        return _ending(history, _terminal(event, c, decide(view, c, policy)), None)
    if not isinstance(event, FailureClassified):
        return []
    if of_type(history, FailureClassified, event.attempt)[0].event_id != event.event_id:
        return []  # the attempt's first classification decides
    if _decided(history, event.attempt):
        return []
    c = Classification.model_validate(event.model_dump(include=set(Classification.model_fields)))
    d = decide(view, c, policy)
    if d.action == "retry":
        return [
            RetryScheduled.derived(
                event,
                DECIDER,
                next_attempt=d.next_attempt or event.attempt + 1,
                delay_s=d.delay_s,
                not_before=d.not_before or event.occurred_at,
                resume_from=d.resume_from,
                avoid_nodes=d.avoid_nodes,
                avoid_providers=d.avoid_providers,
                reason=d.reason,
                avoid_reason=d.avoid_reason,
            )
        ]
    return _ending(history, _terminal(event, c, d), event.attempt)


def react(
    history: Sequence[Event],
    event: Event,
    policy: RetryPolicy = DEFAULT_POLICY,
    view: JobView | None = None,
) -> list[Event]:
    """The events the classifier and the retry decider append now, in response to ``event``.

    Args:
        history: the job's history including ``event`` (duplicates allowed). Only
            the history up to ``event``'s first occurrence is read, so a redelivered
            event is judged as it was the first time.
        event: the event just consumed.
        policy: the retry policy.
        view: the job's view as of ``event``, when the caller already folded it:
            ``project()`` of the job-events of ``history`` up to and including the
            first occurrence of ``event`` (duplicates dropped), never a later view.
            The result is then identical to the one computed without it; None (the
            default) folds that prefix here.

    Returns:
        The derived events not already in ``history``: on a redelivery whose
        results were appended before, nothing; otherwise the same events (same
        ids) as the first time.
    """
    if not isinstance(event, REACTS_TO):
        return []
    events = list(history)
    ids = [e.event_id for e in events]
    if event.event_id not in ids:
        events.append(event)
        ids.append(event.event_id)
    prefix = unique(events[: ids.index(event.event_id) + 1])
    derived = classifier_step(prefix, event, view) + decider_step(prefix, event, policy, view)
    known = set(ids)
    return [d for d in derived if d.event_id not in known]


def react_all(events: Sequence[Event], policy: RetryPolicy = DEFAULT_POLICY) -> list[Event]:
    """Replay a recorded history through :func:`react`, event by event.

    Returns every derived event recomputed from the history as it stood when each
    event was consumed. For a history the processors wrote correctly this equals
    the derived events it holds (see :func:`verify`).
    """
    out: list[Event] = []
    view: JobView | None = None
    seen: set[str] = set()
    for i, event in enumerate(events):
        # Fold on as we go instead of letting react() re-fold every prefix (quadratic).
        # A redelivered event is judged as of its first occurrence: react() folds that.
        first = event.event_id not in seen
        if first:
            seen.add(event.event_id)
            if is_job_event(event):
                view = evolve(view, event)
        out += react(events[: i + 1], event, policy, view=view if first else None)
    return out


def settle(facts: Sequence[Event], policy: RetryPolicy = DEFAULT_POLICY) -> list[Event]:
    """The history the processors would write for these facts: each derived event is
    appended right after its cause, and decisions on decisions follow at once."""
    history: list[Event] = []
    for fact in facts:
        if fact.producer in DECISION_PRODUCERS:
            continue
        pending = [fact]
        history.append(fact)
        while pending:
            new = react(history, pending.pop(0), policy)
            history += new
            pending += new
    return history


def verify(events: Sequence[Event], policy: RetryPolicy = DEFAULT_POLICY) -> list[str]:
    """Differences between the derived events in a history and the recomputed ones
    (empty when the live decisions equal the replayed ones)."""
    recorded = {e.event_id: e for e in unique(events) if e.producer in DECISION_PRODUCERS}
    recomputed = {e.event_id: e for e in react_all(events, policy)}
    problems = [
        f"missing {e.type} {i} (caused by {e.causation_id})"
        for i, e in recomputed.items()
        if i not in recorded
    ]
    problems += [
        f"unexpected {e.type} {i} (caused by {e.causation_id})"
        for i, e in recorded.items()
        if i not in recomputed
    ]
    problems += [
        f"{e.type} {i} differs from the recomputed one"
        for i, e in recorded.items()
        if i in recomputed and e != recomputed[i]
    ]
    return problems
