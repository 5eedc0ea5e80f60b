"""Accounting: what each attempt held, what the meter saw, what is owed.

See docs/architecture.md, "Accounting".

Two independent measures per attempt: the lifecycle (ComputeHeld to
ComputeReleased, times the GPU count) and the meter (the agent's MeterTicks,
each tick index counted once). The lifecycle is what is billed or credited; the
meter checks it (``reconciled``).

Durations are computed in whole microseconds (the events' resolution) and each
attempt's GPU time goes entirely to one side, so ``billable + credited ==
gpu_seconds`` holds exactly for every attempt.

An attempt declared lost (AttemptLost) is counted until its last heartbeat, the
last moment the node showed it still held the GPUs; it falls back to the
AttemptLost time when no heartbeat was ever seen. The attempt is platform
attributed, so this only sizes the credit; a late ComputeReleased from the lost
node changes nothing here (the view records it) -- unless the late facts showed
a clean success and the job ended on that attempt (docs/lifecycle.md, late
facts): then the real facts apply, it is billed up to its real release like
any success, and the retry it made unnecessary (``superseded``) is credited.
A late clean success the job did not keep is never billed: another attempt
redid the work.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from projections.classes import row
from projections.history import (
    E,
    History,
    first,
    is_clean_success,
    is_job_event,
    late_verdict,
    unique,
)
from projections.job_state import project
from schemas.events import (
    TERMINAL_EVENTS,
    AttemptLost,
    AttemptScheduled,
    AttemptSuperseded,
    ComputeHeld,
    ComputeReleased,
    Event,
    FailureClassified,
    JobSubmitted,
    JobSucceeded,
    MeterTick,
    RetryWithdrawn,
)
from schemas.views import TERMINAL_STATUSES, AccountingRecord, AttemptAccounting, JobView

POLICY_VERSION = "3"
"""2: late facts (a kept late success billed to its real release, superseded and
after-end attempts credited, a late success not kept never billed). 3: the meter is
reconciled over the counted window; ticks after it are reported as ``uncounted``."""
_US = timedelta(microseconds=1)


class AccountingPolicy(BaseModel):
    """Who pays for an attempt's GPU time. Version recorded in every record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = POLICY_VERSION
    default_tick_s: float = 60.0
    """Reconciliation tolerance per GPU for an attempt with no meter tick at all."""

    def billable(self, outcome: str, attribution: str, failure_class: str) -> bool:
        """Successful and user-attributed attempts are billable; platform and capacity
        failures, and those of a class the table credits (``unknown``: its ``billing``),
        are credited. An attempt still running (or ended but not yet classified) counts
        as billable until its decision."""
        if outcome in ("succeeded", "pending"):
            return True
        if outcome in ("lost", "superseded", "after_end"):
            return False
        if row(failure_class).billing == "credited":
            return False
        return attribution == "user"


DEFAULT_POLICY = AccountingPolicy()


def _first(scope: Sequence[Event], cls: type[E], n: int) -> E | None:
    """``history.first`` over an attempt's scope, which :func:`account` already de-duplicated."""
    for e in scope:
        if isinstance(e, cls) and e.attempt == n:
            return e
    return None


def _as_of(events: Sequence[Event]) -> datetime | None:
    return max((e.occurred_at for e in events), default=None)


def _won_late(history: Sequence[Event], n: int) -> bool:
    """Attempt ``n`` was given up on by the watchdog, then its own late facts showed a
    clean success and the job ended on it (the late-facts rule of the decider)."""
    return late_verdict(history, n) is not None and _first(history, JobSucceeded, n) is not None


def _reverdicted(history: Sequence[Event], n: int) -> bool:
    """Attempt ``n`` was given up on, then classified again on its late facts (its retry
    withdrawn): the job was decided on its real end."""
    return (
        late_verdict(history, n) is not None
        and _first(history, RetryWithdrawn, n) is not None
        and sum(isinstance(e, FailureClassified) and e.attempt == n for e in history) > 1
    )


def _real_facts(history: Sequence[Event], n: int) -> bool:
    """The late facts of attempt ``n`` decided the job: they, not the verdict, count."""
    return _won_late(history, n) or _reverdicted(history, n)


def _held(
    history: Sequence[Event], n: int, as_of: datetime | None
) -> tuple[datetime | None, datetime | None, str, int]:
    """(held_from, released_at, release_source, held microseconds) of attempt ``n``."""
    held = _first(history, ComputeHeld, n)
    if held is None:
        return None, None, "", 0
    end: datetime | None = None
    source = "open"
    # The real release counts for an attempt whose late success the job kept: it held the
    # GPUs until then and the user gets its result. Otherwise a lost attempt ends at its
    # last heartbeat, the last moment the platform saw it: a late release changes nothing.
    real = _real_facts(history, n)
    for e in history:  # whichever came first: the release or the declaration of loss
        if e.attempt != n:
            continue
        if isinstance(e, ComputeReleased):
            end, source = e.occurred_at, "released"
            break
        if isinstance(e, AttemptLost) and not real:
            end, source = e.last_heartbeat_at or e.occurred_at, "lost"
            break
    until = end if end is not None else as_of
    held_us = max(0, (until - held.occurred_at) // _US) if until else 0
    if end is not None:
        end = max(end, held.occurred_at)
    return held.occurred_at, end, source, held_us


def _in_window(tick: MeterTick, counted_end: datetime | None) -> bool:
    """Tick ``tick`` falls in the window the lifecycle counted: it started by the counted
    end (``released_at``; no end while the attempt is open)."""
    return counted_end is None or tick.interval_start <= counted_end


def _classified_outcome(classified: FailureClassified, lost: bool) -> tuple[str, str, str]:
    if classified.failure_class == "cancelled":
        outcome = "cancelled"
    else:
        outcome = "lost" if lost and classified.failure_class == "node_lost" else "failed"
    return outcome, classified.attribution, classified.failure_class


def _outcome(
    history: Sequence[Event], n: int, terminal: bool, after_end: bool = False
) -> tuple[str, str, str]:
    """(outcome, attribution, failure_class) of attempt ``n``."""
    if after_end:
        # Placed after the job had ended (a cancel while queued raced the placement): the
        # user asked for nothing more, so whatever it did is the platform's.
        return "after_end", "platform", ""
    # A late clean success of an attempt given up on is a success only if the job kept it;
    # otherwise another attempt redid the work and only that one is billed.
    if is_clean_success(history, n) and (late_verdict(history, n) is None or _won_late(history, n)):
        return "succeeded", "", ""
    classified = _first(history, FailureClassified, n)
    if _reverdicted(history, n):  # decided on its real end: that classification counts
        classified = [e for e in history if isinstance(e, FailureClassified) and e.attempt == n][-1]
        return _classified_outcome(classified, lost=False)
    lost = _first(history, AttemptLost, n) is not None
    if not lost and _first(history, AttemptSuperseded, n) is not None:
        return "superseded", "platform", ""  # stopped because another attempt won
    if classified is not None:
        return _classified_outcome(classified, lost)
    if lost:
        return "lost", "platform", "node_lost"
    if terminal:  # ended with the job but never classified: nothing shows it was the user
        return "failed", "platform", "unknown"
    return "pending", "", ""


def _attempt(
    history: Sequence[Event],
    ticks: list[MeterTick],
    n: int,
    terminal: bool,
    as_of: datetime | None,
    policy: AccountingPolicy,
    after_end: bool = False,
) -> tuple[AttemptAccounting, int, int, int]:
    held = _first(history, ComputeHeld, n)
    scheduled = _first(history, AttemptScheduled, n)
    held_from, released_at, source, held_us = _held(history, n, as_of)
    gpu_count = held.gpu_count if held else 0
    gpu_us = held_us * gpu_count
    outcome, attribution, failure_class = (
        _outcome(history, n, terminal, after_end) if held else ("not_held", "", "")
    )
    billable = policy.billable(outcome, attribution, failure_class)
    by_index: dict[int, MeterTick] = {}
    for tick in ticks:
        if tick.attempt == n:
            by_index.setdefault(tick.tick_index, tick)
    # The meter is reconciled over the window the lifecycle counted. A tick whose period
    # starts after the counted end (a lost attempt's ticks past its last heartbeat, which
    # its spool delivers late) is time nobody bills or credits: it is reported apart
    # (``uncounted_*``), so the record shows the meter saw the attempt run on without
    # calling the lifecycle wrong. A tick straddling the end counts whole: ticks are facts,
    # never split, and the tolerance is one tick.
    counted = {i: t for i, t in by_index.items() if _in_window(t, released_at)}
    uncounted = sorted(set(by_index) - set(counted))
    metered = math.fsum(t.gpu_seconds for t in counted.values())
    top = max(by_index, default=-1)
    tolerance = max(
        (t.interval_s * t.gpu_count for t in counted.values()),
        default=policy.default_tick_s * max(gpu_count, 1),
    )
    gpu_seconds = gpu_us / 1e6
    record = AttemptAccounting(
        attempt=n,
        node_id=held.node_id if held else (scheduled.node_id if scheduled else ""),
        provider=scheduled.provider if scheduled else "",
        region=scheduled.region if scheduled else "",
        held_from=held_from,
        released_at=released_at,
        held_seconds=held_us / 1e6,
        gpu_count=gpu_count,
        gpu_model=(held.gpu_model if held else "") or (scheduled.gpu_model if scheduled else ""),
        gpu_seconds=gpu_seconds,
        metered_gpu_seconds=metered,
        uncounted_gpu_seconds=math.fsum(by_index[i].gpu_seconds for i in uncounted),
        uncounted_ticks=uncounted,
        tick_count=len(by_index),
        missing_ticks=[i for i in range(top + 1) if i not in by_index],
        final_tick_seen=any(t.final for t in by_index.values()),
        release_source=source,
        outcome=outcome,
        attribution=attribution,
        failure_class=failure_class,
        billable_gpu_seconds=gpu_seconds if billable else 0.0,
        credited_gpu_seconds=0.0 if billable else gpu_seconds,
        reconciled=abs(gpu_seconds - metered) <= tolerance + 1e-6,
    )
    return record, held_us, gpu_us if billable else 0, 0 if billable else gpu_us


def _job_ticks(
    events: Sequence[Event], deduplicated: Sequence[Event], ticks: Iterable[MeterTick]
) -> tuple[str, list[MeterTick]]:
    """The job's id and its meter ticks, each once (those passed and those in the history).

    The job is the job-events' (before any, the first tick's): other jobs' ticks never count.
    """
    candidates = [
        t
        for t in unique([*ticks, *(e for e in deduplicated if isinstance(e, MeterTick))])
        if isinstance(t, MeterTick)
    ]
    job_id = events[0].job_id if events else next((t.job_id for t in candidates), "")
    return job_id, [t for t in candidates if t.job_id == job_id]


def _placed_after_end(events: Sequence[Event]) -> set[int]:
    """The attempts placed after the job's terminal event (a cancel raced the placement)."""
    ended = next((i for i, e in enumerate(events) if isinstance(e, TERMINAL_EVENTS)), None)
    if ended is None:
        return set()
    return {e.attempt for e in events[ended + 1 :] if isinstance(e, AttemptScheduled)}


def _attempts(
    events: Sequence[Event],
    all_ticks: Sequence[MeterTick],
    terminal: bool,
    as_of: datetime | None,
    policy: AccountingPolicy,
) -> tuple[list[AttemptAccounting], int, int, int]:
    """Every attempt's accounting, with the held, billable and credited microseconds of all
    of them (see :func:`account`)."""
    numbers = sorted(
        {e.attempt for e in events if isinstance(e, AttemptScheduled | ComputeHeld)}
        | {t.attempt for t in all_ticks}
    )
    # Every query of _attempt looks at one attempt's events (and the spec of the first
    # JobSubmitted), so each attempt gets only those: one pass over the history instead
    # of a dozen per attempt, and the same answers.
    by_attempt: dict[int, list[Event]] = {}
    for e in events:
        by_attempt.setdefault(e.attempt, []).append(e)
    ticks_of: dict[int, list[MeterTick]] = {}
    for t in all_ticks:
        ticks_of.setdefault(t.attempt, []).append(t)
    submitted = first(events, JobSubmitted)
    placed_after_end = _placed_after_end(events)
    attempts: list[AttemptAccounting] = []
    held_us = billable_us = credited_us = 0
    for n in numbers:
        own = by_attempt.get(n, [])
        scope = History(own if submitted is None or submitted.attempt == n else [submitted, *own])
        after_end = n in placed_after_end
        own_ticks = ticks_of.get(n, [])
        record, h, b, c = _attempt(scope, own_ticks, n, terminal, as_of, policy, after_end)
        attempts.append(record)
        held_us, billable_us, credited_us = held_us + h, billable_us + b, credited_us + c
    return attempts, held_us, billable_us, credited_us


def account(
    history: Iterable[Event],
    ticks: Iterable[MeterTick] = (),
    policy: AccountingPolicy = DEFAULT_POLICY,
    view: JobView | None = None,
) -> AccountingRecord:
    """The job's accounting record as of its latest event.

    Args:
        history: the job's job-events (duplicates allowed; MeterTicks in it are used too).
        ticks: the job's meter ticks (duplicates allowed; other jobs' ticks are ignored).
        policy: who pays for what; its version is written into the record.
        view: the job's view when the caller already folded it, so it is not folded
            again. It must equal ``project()`` of the job-events of ``history``
            (duplicates dropped), i.e. the view as of the latest job-event in
            ``history``; the record is then identical to the one computed without it.
            None (the default) folds ``history`` here. Ignored when ``history`` holds
            no job-event.

    Returns:
        One AttemptAccounting per attempt that was scheduled or held compute, and the
        totals. ``final`` is True once the job is terminal and every attempt that held
        compute released it or was declared lost. A job that never held compute owes
        nothing.
    """
    deduplicated = unique(history)
    events = [e for e in deduplicated if is_job_event(e)]
    job_id, all_ticks = _job_ticks(events, deduplicated, ticks)
    if not events:
        view = None
    elif view is None:
        view = project(events)
    terminal = view is not None and view.status in TERMINAL_STATUSES
    as_of = _as_of([*events, *all_ticks])
    attempts, held_us, billable_us, credited_us = _attempts(
        events, all_ticks, terminal, as_of, policy
    )
    return summarize(job_id, view, policy, attempts, held_us, billable_us, credited_us, as_of)


def summarize(
    job_id: str,
    view: JobView | None,
    policy: AccountingPolicy,
    attempts: list[AttemptAccounting],
    held_us: int,
    billable_us: int,
    credited_us: int,
    as_of: datetime | None,
) -> AccountingRecord:
    """The job's record from its attempts' accounting and their microsecond totals (what
    :func:`account` and the incremental ``projections.tally`` both end with)."""
    status = view.status if view else "submitted"
    terminal = status in TERMINAL_STATUSES
    gpu_us = billable_us + credited_us
    return AccountingRecord(
        job_id=job_id,
        tenant=view.tenant if view else "",
        labels=dict(view.labels) if view else {},
        status=status,
        final=terminal and all(a.release_source != "open" for a in attempts),
        policy_version=policy.version,
        attempts=attempts,
        held_seconds=held_us / 1e6,
        gpu_seconds=gpu_us / 1e6,
        metered_gpu_seconds=math.fsum(a.metered_gpu_seconds for a in attempts),
        uncounted_gpu_seconds=math.fsum(a.uncounted_gpu_seconds for a in attempts),
        billable_gpu_seconds=billable_us / 1e6,
        credited_gpu_seconds=credited_us / 1e6,
        reconciled=all(a.reconciled for a in attempts),
        updated_at=as_of,
    )
