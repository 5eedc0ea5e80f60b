"""Accounting: lifecycle vs meter, who pays, and when a record is final."""

from __future__ import annotations

import math

from projections.accounting import AccountingPolicy, account
from schemas.events import JobFailed
from tests.projections import scenarios
from tests.projections.histories import JobHistory, job_spec


def running(gpus: int = 1, **spec: object) -> JobHistory:
    h = JobHistory(spec=job_spec(resources={"gpus": gpus}, **spec))
    h.submit()
    h.queue()
    h.start(gpus=gpus)
    return h


def test_multi_gpu_time_is_held_seconds_times_gpus() -> None:
    h = running(gpus=4)
    h.wait(100).exit(0)
    h.output()
    h.release()
    (a,) = account(h.events, h.ticks).attempts
    assert (a.held_seconds, a.gpu_count, a.gpu_seconds) == (104.0, 4, 416.0)
    assert a.metered_gpu_seconds == 416.0 and a.final_tick_seen and a.reconciled


def test_duplicate_ticks_count_once() -> None:
    h = scenarios.success()
    assert account(h.events, h.ticks * 3) == account(h.events, h.ticks)


def test_missing_ticks_are_named_and_break_reconciliation_beyond_one_tick() -> None:
    h = scenarios.success()
    one_gone = [t for t in h.ticks if t.tick_index != 3]
    (a,) = account(h.events, one_gone).attempts
    assert a.missing_ticks == [3] and a.reconciled  # within one tick
    two_gone = [t for t in one_gone if t.tick_index != 4]
    record = account(h.events, two_gone)
    assert record.attempts[0].missing_ticks == [3, 4] and not record.reconciled


def test_ticks_in_the_history_and_of_other_jobs() -> None:
    h = scenarios.success()
    other = scenarios.success()
    foreign = [
        t.model_copy(update={"job_id": "job-2", "event_id": t.event_id + "x"}) for t in other.ticks
    ]
    assert account([*h.events, *h.ticks], foreign) == account(h.events, h.ticks)


def test_ticks_of_other_jobs_never_count_even_before_the_job_events() -> None:
    # Ticks read before any job-event of their job, mixed with another job's: the record is
    # the first tick's job's, metered from its own ticks only.
    h = scenarios.success()
    foreign = [
        t.model_copy(update={"job_id": "job-2", "event_id": f"{t.event_id}x", "tick_index": i})
        for i, t in enumerate(scenarios.success().ticks, start=100)
    ]
    alone = account([], h.ticks)
    mixed = account([], [*h.ticks, *foreign])
    assert mixed == alone and mixed.job_id == h.job_id
    assert mixed.metered_gpu_seconds == math.fsum(t.gpu_seconds for t in h.ticks)


def test_a_running_attempt_is_open_and_provisionally_billable() -> None:
    h = running()
    h.wait(124)
    record = account(h.events, h.ticks)
    (a,) = record.attempts
    assert (a.release_source, a.outcome, a.released_at) == ("open", "pending", None)
    assert a.held_seconds == 120.0  # up to the latest event or tick seen: no clock is read
    latest_tick = max(t.occurred_at for t in h.ticks)
    assert record.updated_at == latest_tick
    assert not record.final and record.status == "running"


def test_lost_attempt_counts_until_the_last_heartbeat() -> None:
    h = scenarios.node_lost_then_resume()
    lost = account(h.events, h.ticks).attempts[0]
    view_lost = next(e for e in h.events if e.type == "AttemptLost")
    assert lost.released_at == view_lost.last_heartbeat_at  # type: ignore[attr-defined]
    assert lost.release_source == "lost" and not lost.final_tick_seen


def test_terminal_with_compute_still_held_is_not_final_until_released() -> None:
    h = running(retry={"max_attempts": 1})
    h.wait(60).exit(0)
    h.wait(300).finishing_timed_out()
    record = account(h.events, h.ticks)
    assert record.status == "failed" and not record.final
    assert record.attempts[0].failure_class == "finishing_timeout"
    h.wait(30).release()
    record = account(h.events, h.ticks)
    assert record.final
    assert record.attempts[0].credited_gpu_seconds == record.attempts[0].gpu_seconds


def test_an_unclassified_attempt_of_a_finished_job_is_credited() -> None:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.start()
    h.wait(60).exit(1)
    h.release()
    h.emit(JobFailed, "retry-decider", failure_class="unknown")
    (a,) = account(h.events, h.ticks).attempts
    assert (a.outcome, a.failure_class, a.billable_gpu_seconds) == ("failed", "unknown", 0.0)


def test_policy_version_is_recorded() -> None:
    h = scenarios.success()
    record = account(h.events, h.ticks, AccountingPolicy(version="2-test"))
    assert record.policy_version == "2-test"


def test_nothing_is_owed_without_compute() -> None:
    for name in ("does_not_fit", "capacity_unavailable", "cancel_while_queued"):
        h = scenarios.SCENARIOS[name]()
        record = account(h.events, h.ticks)
        assert record.final, name
        assert record.gpu_seconds == record.billable_gpu_seconds == record.credited_gpu_seconds == 0


def _done(gpus: int, seconds: float) -> JobHistory:
    h = running(gpus=gpus)
    h.wait(seconds).exit(0)
    h.output()
    h.release()
    return h


def test_on_several_gpus_the_tolerance_is_one_tick_of_all_of_them() -> None:
    h = _done(gpus=4, seconds=100)
    one_gone = [t for t in h.ticks if t.tick_index != 1]  # 30 s on 4 GPUs: 120 GPU-seconds
    (a,) = account(h.events, one_gone).attempts
    assert a.gpu_count == 4 and a.missing_ticks == [1] and a.reconciled
    two_gone = [t for t in one_gone if t.tick_index != 2]
    record = account(h.events, two_gone)
    assert record.attempts[0].missing_ticks == [1, 2] and not record.reconciled


def test_with_no_tick_at_all_the_tolerance_is_the_default_tick_of_every_gpu() -> None:
    policy = AccountingPolicy(default_tick_s=60.0)  # 240 GPU-seconds on 4 GPUs
    short = account(_done(gpus=4, seconds=50).events, [], policy)
    assert (short.gpu_seconds, short.metered_gpu_seconds, short.reconciled) == (216.0, 0.0, True)
    longer = account(_done(gpus=4, seconds=60).events, [], policy)
    assert (longer.gpu_seconds, longer.reconciled) == (256.0, False)
    one_gpu = account(_done(gpus=1, seconds=60).events, [], policy)  # 64 > 60 GPU-seconds
    assert (one_gpu.gpu_seconds, one_gpu.reconciled) == (64.0, False)
    # The boundary, to the microsecond held time is counted in: 1 us of float slack.
    at = account(_done(gpus=1, seconds=56.000001).events, [], policy)
    past = account(_done(gpus=1, seconds=56.000002).events, [], policy)
    assert (at.gpu_seconds, at.reconciled, past.reconciled) == (60.000001, True, False)


def test_an_attempt_that_never_held_compute_shows_no_gpus_and_costs_nothing() -> None:
    h = JobHistory(spec=job_spec(resources={"gpus": 2}))
    h.submit()
    h.queue()
    h.schedule(node="node-b", provider="gcp", gpus=2, model="L4", region="europe-west4")
    h.wait(60)
    h.dispatch_timed_out()
    (a,) = account(h.events, h.ticks).attempts
    assert (a.outcome, a.gpu_count, a.held_seconds, a.gpu_seconds) == ("not_held", 0, 0.0, 0.0)
    assert (a.billable_gpu_seconds, a.credited_gpu_seconds) == (0.0, 0.0)
    # Where it was to run, from its placement: what usage groups the attempt by.
    assert (a.node_id, a.provider, a.region, a.gpu_model) == ("node-b", "gcp", "europe-west4", "L4")


def test_meter_ticks_without_any_placement_are_recorded_with_no_place() -> None:
    # Ticks of an attempt the job-events never placed (read before them): metered, nowhere.
    h = _done(gpus=1, seconds=60)
    (a,) = account([], h.ticks).attempts
    assert (a.node_id, a.provider, a.region, a.gpu_model) == ("", "", "", "")
    assert a.metered_gpu_seconds == 64.0 and a.gpu_seconds == 0.0


def test_an_unknown_failure_is_credited_whoever_the_classifier_blamed() -> None:
    policy = AccountingPolicy()
    assert policy.billable("failed", "user", "user_process_error")
    assert not policy.billable("failed", "user", "unknown")
    assert not policy.billable("failed", "platform", "node_lost")
