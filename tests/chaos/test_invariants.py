"""The chaos invariant checker passes a sound ledger and fails each doctored one.

The sound ledger is made of the golden histories with their accounting records
computed by the real projection; each test breaks one thing the way a faulty
run would and expects exactly that invariant to fire.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from projections.accounting import account
from projections.bounds import Thresholds
from schemas.events import JobFailed, JobSubmitted, MeterTick
from services.chaos.invariants import (
    INVARIANTS,
    Acks,
    LedgerSnapshot,
    Timings,
    check,
    terminal_bound_s,
)
from tests.golden.golden import HERE, load

TIMINGS = Timings(
    Thresholds(dispatch_timeout_s=30, silence_s=3, lost_after_s=4, finishing_timeout_s=60),
    slack_s=30,
)
FIXTURES = ("success", "node_lost_then_resume", "cuda_oom", "cancel_while_running")


def _ledger() -> tuple[LedgerSnapshot, Acks]:
    snapshot = LedgerSnapshot(read_at=None)  # type: ignore[arg-type]
    acks = Acks()
    latest = None
    for name in FIXTURES:
        events, ticks, _ = load(HERE / f"{name}.json")
        job_id = f"job-{name}"  # the fixtures share one job id; here each is its own job
        events = [e.model_copy(update={"job_id": job_id}) for e in events]
        ticks = [t.model_copy(update={"job_id": job_id}) for t in ticks]
        snapshot.job_events[job_id] = list(events)
        snapshot.meter_ticks += ticks
        snapshot.accounting[job_id] = account(events, ticks)
        snapshot.event_ids |= {e.event_id for e in [*events, *ticks]}
        acks.event_ids |= {e.event_id for e in [*events, *ticks]}
        acks.jobs[job_id] = events[0].occurred_at
        last = max(e.occurred_at for e in events)
        latest = last if latest is None or last > latest else latest
    assert latest is not None
    snapshot.read_at = latest + timedelta(seconds=5)
    return snapshot, acks


def _fired(snapshot: LedgerSnapshot, acks: Acks) -> dict[str, int]:
    verdict = check(snapshot, acks, TIMINGS)
    return {name: verdict.count(name) for name in INVARIANTS if verdict.count(name)}


def test_the_sound_ledger_passes_every_invariant():
    snapshot, acks = _ledger()
    verdict = check(snapshot, acks, TIMINGS)
    assert verdict.ok, [f.line() for f in verdict.findings]
    assert verdict.jobs == verdict.terminal == len(FIXTURES)
    assert verdict.lost == verdict.stuck == verdict.double_billed == 0
    assert verdict.longest_time_to_terminal_s > 0


def test_an_acknowledged_event_missing_from_the_ledger_is_lost():
    snapshot, acks = _ledger()
    acks.event_ids.add("never-written")
    gone = next(iter(snapshot.job_events))
    acks.jobs["job-acked-but-absent"] = snapshot.read_at
    assert _fired(snapshot, acks) == {"lost": 2}
    assert gone  # the fixtures' own jobs are all still there


def test_two_different_terminal_events_for_one_job_fire_but_a_repeated_one_does_not():
    snapshot, acks = _ledger()
    job_id, events = next(iter(snapshot.job_events.items()))
    snapshot.job_events[job_id] = [*events, events[-1]]  # the same fact appended twice
    assert _fired(snapshot, acks) == {}
    conflicting = JobFailed(
        job_id=job_id, attempt=1, occurred_at=events[-1].occurred_at,
        failure_class="unknown", attribution="platform", reason="doctored",
    )  # fmt: skip
    snapshot.job_events[job_id].append(conflicting)
    assert _fired(snapshot, acks) == {"multiple_terminal": 1}


def test_a_job_without_a_terminal_event_is_stuck_only_once_its_bound_passed():
    snapshot, acks = _ledger()
    job_id, events = next(iter(snapshot.job_events.items()))
    snapshot.job_events[job_id] = [e for e in events if e.type != "JobSucceeded"]
    snapshot.accounting.pop(job_id)
    assert _fired(snapshot, acks) == {}  # still within its bound
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    snapshot.read_at = events[0].occurred_at + timedelta(
        seconds=terminal_bound_s(spec, TIMINGS) + 1
    )
    assert _fired(snapshot, acks) == {"stuck": 1}


def test_a_terminal_event_after_the_bound_is_late():
    snapshot, acks = _ledger()
    job_id, events = next(iter(snapshot.job_events.items()))
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    late = events[-1].model_copy(
        update={
            "occurred_at": events[0].occurred_at
            + timedelta(seconds=terminal_bound_s(spec, TIMINGS) + 5)
        }
    )
    snapshot.job_events[job_id] = [*events[:-1], late]
    snapshot.read_at = late.occurred_at + timedelta(seconds=1)
    assert _fired(snapshot, acks) == {"late": 1}


def test_a_meter_tick_counted_twice_is_double_billing():
    snapshot, acks = _ledger()
    job_id = next(j for j, r in snapshot.accounting.items() if r.attempts and r.metered_gpu_seconds)
    record = snapshot.accounting[job_id]
    first = record.attempts[0]
    tick = next(t for t in snapshot.meter_ticks if t.job_id == job_id)
    doubled = first.model_copy(
        update={"metered_gpu_seconds": first.metered_gpu_seconds + tick.gpu_seconds}
    )
    snapshot.accounting[job_id] = record.model_copy(
        update={"attempts": [doubled, *record.attempts[1:]]}
    )
    fired = _fired(snapshot, acks)
    assert fired == {"tick_counted_twice": 1}
    assert check(snapshot, acks, TIMINGS).double_billed == 1


def test_a_re_emitted_tick_with_a_new_id_is_one_tick():
    snapshot, acks = _ledger()
    tick = next(t for t in snapshot.meter_ticks if isinstance(t, MeterTick))
    again = tick.model_copy(update={"event_id": "re-emitted"})
    snapshot.meter_ticks.append(again)
    assert _fired(snapshot, acks) == {}


@pytest.mark.parametrize("field", ["billable_gpu_seconds", "credited_gpu_seconds"])
def test_billable_plus_credited_must_equal_held_per_attempt(field):
    snapshot, acks = _ledger()
    job_id = next(j for j, r in snapshot.accounting.items() if r.gpu_seconds > 0)
    record = snapshot.accounting[job_id]
    first = record.attempts[0]
    more = first.model_copy(update={field: getattr(first, field) + 0.5})
    snapshot.accounting[job_id] = record.model_copy(
        update={"attempts": [more, *record.attempts[1:]]}
    )
    assert _fired(snapshot, acks) == {"unbalanced": 1}
    assert check(snapshot, acks, TIMINGS).double_billed == 1


def test_a_terminal_jobs_accounting_must_exist_be_final_and_reconciled():
    snapshot, acks = _ledger()
    ids = list(snapshot.accounting)
    snapshot.accounting.pop(ids[0])
    snapshot.accounting[ids[1]] = snapshot.accounting[ids[1]].model_copy(update={"final": False})
    snapshot.accounting[ids[2]] = snapshot.accounting[ids[2]].model_copy(
        update={"reconciled": False}
    )
    assert _fired(snapshot, acks) == {"no_accounting": 1, "not_final": 1, "unreconciled": 1}
    # While the run goes on, a job that only just ended is given time to settle.
    assert check(snapshot, acks, TIMINGS, settle_s=3600).ok


def test_time_to_terminal_is_judged_on_append_times_not_a_skewed_clock():
    snapshot, acks = _ledger()
    job_id, events = next(iter(snapshot.job_events.items()))
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    bound = terminal_bound_s(spec, TIMINGS)
    # The terminal event inherits the occurred_at of an agent whose clock runs far ahead...
    skewed = events[-1].model_copy(
        update={"occurred_at": events[0].occurred_at + timedelta(seconds=bound + 120)}
    )
    snapshot.job_events[job_id] = [*events[:-1], skewed]
    snapshot.read_at = skewed.occurred_at
    assert _fired(snapshot, acks) == {"late": 1}
    # ...but the processors appended it well within the bound.
    snapshot.appended_at[events[0].event_id] = events[0].occurred_at
    snapshot.appended_at[skewed.event_id] = events[0].occurred_at + timedelta(seconds=10)
    assert _fired(snapshot, acks) == {}
