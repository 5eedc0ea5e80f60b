"""The watchdog's pure core: ``watch_of`` + ``overdue`` over literal histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.events import (
    AttemptAccepted,
    AttemptHeartbeat,
    AttemptLost,
    AttemptResponsive,
    AttemptScheduled,
    AttemptUnresponsive,
    ComputeReleased,
    DispatchTimedOut,
    FinishingTimedOut,
    JobSucceeded,
    ProcessExited,
)
from schemas.spec import JobSpec
from services.processors.watchdog import Thresholds, overdue, watch_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TH = Thresholds(silence_s=2, lost_after_s=3, finishing_timeout_s=10)


def s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


SCHEDULED = AttemptScheduled(
    job_id="j",
    attempt=1,
    occurred_at=T0,
    node_id="n",
    gpu_count=1,
    dispatch_deadline=s(5),
    spec=JobSpec(image="x"),
)
ACCEPTED = AttemptAccepted(job_id="j", attempt=1, occurred_at=s(1), node_id="n")


def beat(at: float, seq: int) -> AttemptHeartbeat:
    return AttemptHeartbeat(job_id="j", attempt=1, occurred_at=s(at), node_id="n", seq=seq)


def check(history, now, beats=None, floor=None):  # type: ignore[no-untyped-def]
    return overdue(watch_of(history, beats, floor), s(now), TH)


def test_dispatch_deadline() -> None:
    assert check([SCHEDULED], 4.9) == []
    (timed_out,) = check([SCHEDULED], 5)
    assert isinstance(timed_out, DispatchTimedOut) and timed_out.deadline == s(5)
    assert check([SCHEDULED, ACCEPTED], 2.5) == []  # accepted: no dispatch deadline any more
    assert check([SCHEDULED, timed_out], 9) == []


def test_silence_unresponsive_then_lost_with_the_thresholds_recorded() -> None:
    history = [SCHEDULED, ACCEPTED]
    beats = {1: beat(4, 3)}
    assert check(history, 5.9, beats) == []
    (unresponsive,) = check(history, 6, beats)
    assert isinstance(unresponsive, AttemptUnresponsive)
    assert unresponsive.silence_s == 2 and unresponsive.lost_deadline == s(9)
    assert unresponsive.last_heartbeat_at == s(4)
    assert check(history, 6.5, beats)[0].event_id == unresponsive.event_id  # deterministic
    history.append(unresponsive)
    assert check(history, 8.9, beats) == []
    (lost,) = check(history, 9, beats)
    assert isinstance(lost, AttemptLost) and lost.deadline == s(9)
    assert lost.causation_id == unresponsive.event_id
    assert check([*history, lost], 20, beats) == []


def test_heartbeats_resuming_before_the_deadline_clear_the_uncertainty() -> None:
    (unresponsive,) = check([SCHEDULED, ACCEPTED], 6, {1: beat(4, 3)})
    history = [SCHEDULED, ACCEPTED, unresponsive]
    (responsive,) = check(history, 7, {1: beat(6.5, 4)})
    assert isinstance(responsive, AttemptResponsive) and responsive.silence_s == 2.5
    history.append(responsive)
    assert check(history, 7, {1: beat(6.5, 4)}) == []
    (again,) = check(history, 8.5, {1: beat(6.5, 4)})  # a new silence, a new id
    assert isinstance(again, AttemptUnresponsive) and again.event_id != unresponsive.event_id


def test_finishing_deadline_and_the_end_of_the_watch() -> None:
    exited = ProcessExited(job_id="j", attempt=1, occurred_at=s(3), exit_code=0)
    history = [SCHEDULED, ACCEPTED, exited]
    assert check(history, 12.9) == []
    (timed_out,) = check(history, 13)
    assert isinstance(timed_out, FinishingTimedOut) and timed_out.deadline == s(13)
    released = ComputeReleased(job_id="j", attempt=1, occurred_at=s(4), node_id="n")
    assert check([*history, released], 100) == []
    assert check([SCHEDULED, ACCEPTED, JobSucceeded(job_id="j", occurred_at=s(2))], 100) == []


def test_a_restarted_watchdog_counts_silence_from_its_rebuild() -> None:
    assert check([SCHEDULED, ACCEPTED], 50, floor=s(49)) == []
    assert check([SCHEDULED, ACCEPTED], 51, floor=s(49))


def test_folding_heartbeats_incrementally_equals_the_full_fold() -> None:
    from services.processors.watchdog import with_heartbeat

    history = [SCHEDULED, ACCEPTED]
    for floor in (None, s(3), s(10)):
        for at in (0.5, 2, 5, 12):
            b = beat(at, 7)
            assert with_heartbeat(watch_of(history, None, floor), b) == watch_of(
                history, {1: b}, floor
            )


def test_a_dispatch_timeout_after_the_acceptance_ends_nothing_and_silence_still_counts() -> None:
    # A watchdog behind its input timed the dispatch out after the node had accepted
    # (2,000-node simulation); the node then went silent. The attempt must still be lost.
    (stale,) = check([SCHEDULED], 5)
    history = [SCHEDULED, ACCEPTED, stale]
    (unresponsive,) = check(history, 6, {1: beat(3, 2)})
    assert isinstance(unresponsive, AttemptUnresponsive)
    (lost,) = check([*history, unresponsive], 9, {1: beat(3, 2)})
    assert isinstance(lost, AttemptLost)
    assert check([SCHEDULED, stale, ACCEPTED], 100) == []  # timed out first: that counts


def test_attempt_ended_follows_the_log_order_of_acceptance_and_timeout() -> None:
    from projections.evidence import attempt_ended
    from services.processors.watchdog import ATTEMPT_ENDS

    (stale,) = check([SCHEDULED], 5)
    assert attempt_ended([SCHEDULED, stale], 1, by=ATTEMPT_ENDS)
    assert not attempt_ended([SCHEDULED, ACCEPTED, stale], 1, by=ATTEMPT_ENDS)
    assert not attempt_ended([SCHEDULED, stale], 2, by=ATTEMPT_ENDS)
    released = ComputeReleased(job_id="j", attempt=1, occurred_at=s(4), node_id="n")
    assert attempt_ended([SCHEDULED, ACCEPTED, stale, released], 1, by=ATTEMPT_ENDS)
