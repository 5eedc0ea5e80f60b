"""The watchdog's pure core: ``watch_of`` + ``overdue`` over literal histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

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
from services.processors.watchdog import Hearing, Thresholds, overdue, watch_of

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


def check(history, now, beats=None, floor=None):
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
    from projections.history import attempt_ended
    from services.processors.watchdog import ATTEMPT_ENDS

    (stale,) = check([SCHEDULED], 5)
    assert attempt_ended([SCHEDULED, stale], 1, by=ATTEMPT_ENDS)
    assert not attempt_ended([SCHEDULED, ACCEPTED, stale], 1, by=ATTEMPT_ENDS)
    assert not attempt_ended([SCHEDULED, stale], 2, by=ATTEMPT_ENDS)
    released = ComputeReleased(job_id="j", attempt=1, occurred_at=s(4), node_id="n")
    assert attempt_ended([SCHEDULED, ACCEPTED, stale, released], 1, by=ATTEMPT_ENDS)


# --------------------------------------------------------------------------- silence rule
# Silence is judged on the receiving side: by when each sign of life was heard (the
# broker's append time), counting only time the watchdog could hear, up to the time it
# has heard through (H). See docs/watchdog.md, "Silence".


def probing(*heard_through: float, threshold: float = 1.0) -> Hearing:
    """A hearing after probes that reported these heard-through times."""
    hearing = Hearing(lag_threshold_s=threshold)
    for at in heard_through:
        hearing = hearing.observe(s(at))
    return hearing


def ticks(start: float, stop: float, step: float = 0.5) -> list[float]:
    return [start + i * step for i in range(int((stop - start) / step) + 1)]


def test_an_agent_clock_behind_does_not_make_its_heartbeats_old() -> None:
    # The agent's clock is 120 s behind: its heartbeats say they were sent two minutes
    # ago, but the broker appended them just now. Nothing is overdue.
    behind = {1: beat(4 - 120, 3)}
    heard = {ACCEPTED.event_id: s(1), behind[1].event_id: s(4)}
    watch = watch_of([SCHEDULED, ACCEPTED], behind, None, heard)
    assert overdue(watch, s(5.9), TH) == []
    assert overdue(watch_of([SCHEDULED, ACCEPTED], behind), s(5.9), TH)  # by its own clock


def test_an_agent_clock_ahead_does_not_keep_it_alive() -> None:
    # 120 s ahead: its last heartbeat claims a time two minutes in the future. Silence is
    # still counted from when it was heard, so it is unresponsive 2 s later, not 122 s.
    ahead = {1: beat(4 + 120, 3)}
    heard = {ACCEPTED.event_id: s(1), ahead[1].event_id: s(4)}
    history = [SCHEDULED, ACCEPTED]
    (unresponsive,) = overdue(watch_of(history, ahead, None, heard), s(6), TH)
    assert isinstance(unresponsive, AttemptUnresponsive)
    assert unresponsive.last_heartbeat_at == s(124)  # reported as the agent said it
    assert overdue(watch_of(history, ahead), s(6), TH) == []  # by its own clock: alive


def test_time_the_watchdog_could_not_hear_is_not_silence() -> None:
    # Heard through every half second up to 5, then the broker is unreachable (H stalls)
    # until 30, when it is back and the backlog is read.
    watch = watch_of([SCHEDULED, ACCEPTED], {1: beat(4, 3)})
    before = probing(*ticks(0, 5))
    outage = before
    for now in ticks(5.5, 29.5):
        outage = outage.observe(None)  # the probe failed
        assert outage.is_deaf(s(now)) == (now - 5 > 1)
        assert overdue(watch, s(now), TH, outage) == []  # silent for 25 s, unheard
    after = outage.observe(s(30))
    assert after.deaf == ((s(5), s(30)),)
    assert not after.is_deaf(s(30.2))
    # 1 s of silence was heard before the outage (4 to 5), so 1 s more after it.
    assert overdue(watch, s(30.5), TH, after.observe(s(30.5))) == []
    (unresponsive,) = overdue(watch, s(31), TH, after.observe(s(31)))
    assert isinstance(unresponsive, AttemptUnresponsive)


def test_the_lost_deadline_moves_back_by_the_deaf_time() -> None:
    history = [SCHEDULED, ACCEPTED]
    beats = {1: beat(4, 3)}
    (unresponsive,) = check(history, 6, beats)
    history.append(unresponsive)  # lost at 9 if the watchdog hears throughout
    hearing = probing(*ticks(0, 7)).observe(None)
    assert overdue(watch_of(history, beats), s(9), TH, hearing) == []  # deaf since 7
    hearing = hearing.observe(s(20))  # back: 13 s deaf, 1 s of the 3 were heard
    for at in ticks(20.5, 21.5):
        hearing = hearing.observe(s(at))
        assert overdue(watch_of(history, beats), s(at), TH, hearing) == []
    (lost,) = overdue(watch_of(history, beats), s(22), TH, hearing.observe(s(22)))
    assert isinstance(lost, AttemptLost) and lost.deadline == s(22)


def test_deadlines_are_judged_at_what_was_heard_through_not_at_now() -> None:
    # The probe at 6 is not processed yet (H = 5.5): a heartbeat sent at 5.8 may be
    # waiting unread, so the silence that would end at 6 is not over yet.
    watch = watch_of([SCHEDULED, ACCEPTED], {1: beat(4, 3)})
    hearing = probing(*ticks(0, 5.5))
    assert overdue(watch, s(6.2), TH, hearing) == []
    assert overdue(watch, s(6.2), TH, hearing.observe(s(6)))


def test_ordinary_lag_below_the_threshold_counts_as_heard() -> None:
    hearing = probing(0, 0.8, 1.6, 2.4, threshold=1.0)
    assert hearing.deaf == ()
    assert hearing.audible_s(s(0), s(2.4)) == 2.4
    jumped = hearing.observe(s(4))
    assert jumped.deaf == ((s(2.4), s(4)),)
    assert jumped.observe(s(6)).deaf == ((s(2.4), s(6)),)  # one outage, one interval


def test_a_watchdog_that_never_heard_gives_no_verdict() -> None:
    watch = watch_of([SCHEDULED, ACCEPTED], {1: beat(4, 3)})
    hearing = Hearing(lag_threshold_s=1.0).observe(None)
    assert hearing.is_deaf(s(100))
    assert overdue(watch, s(100), TH, hearing) == []
    assert overdue(watch_of([SCHEDULED], None), s(100), TH, hearing) == []  # nor dispatch


@given(
    gaps=st.lists(st.tuples(st.floats(0, 50), st.floats(0.01, 50)), max_size=6),
    since=st.floats(0, 100),
    seconds=st.floats(0, 100),
)
def test_due_is_where_exactly_that_much_audible_time_has_passed(gaps, since, seconds):
    deaf: list[tuple[datetime, datetime]] = []
    at = 0.0
    for gap, length in gaps:
        at += gap
        deaf.append((s(at), s(at + length)))
        at += length
    hearing = Hearing(deaf=tuple(deaf), probing=True, heard=s(1e6))
    due = hearing.due(s(since), seconds)
    assert due >= s(since)
    assert abs(hearing.audible_s(s(since), due) - seconds) < 1e-5
    assert not any(start < due < end for start, end in deaf)  # never inside a deaf gap
