"""The leader fence: a deposed scheduler's decision is dropped, by partition order alone."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from projections.fence import Fence
from schemas.events import (
    AttemptAccepted,
    Event,
    JobQueued,
    JobRejected,
    LeaderElected,
    NoCapacity,
    SchedulerDecision,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def marker(epoch: int) -> LeaderElected:
    return LeaderElected(occurred_at=T0, epoch=epoch, candidate=f"scheduler/h/{epoch}")


def queued(epoch: int, job: str = "j") -> JobQueued:
    return JobQueued(job_id=job, occurred_at=T0, queue_deadline=T0, leader_epoch=epoch)


def admitted(fence: Fence, log: list[Event], partition: int = 0) -> list[int]:
    """Offsets of the records the fence admits, reading ``log`` in order."""
    return [o for o, e in enumerate(log) if fence.admits(partition, o, e)]


def test_a_decision_of_an_older_epoch_after_the_marker_is_dropped_and_one_before_it_kept() -> None:
    log: list[Event] = [queued(1), marker(2), queued(1, "k"), queued(2, "k"), queued(3, "m")]
    assert admitted(Fence(), log) == [0, 3, 4]


def test_every_kind_of_scheduler_decision_is_fenced_and_nothing_else() -> None:
    rejected = JobRejected(
        job_id="j", occurred_at=T0, failure_class="does_not_fit", summary="", advice=""
    )
    late = NoCapacity(job_id="j", occurred_at=T0, queued_since=T0, queue_deadline=T0)
    fact = AttemptAccepted(job_id="j", attempt=1, occurred_at=T0, node_id="n")
    assert isinstance(rejected, SchedulerDecision) and isinstance(late, SchedulerDecision)
    assert admitted(Fence(), [marker(1), rejected, late, fact]) == [3]


def test_partitions_are_fenced_apart() -> None:
    fence = Fence()
    assert not fence.admits(0, 0, marker(5))
    assert fence.admits(1, 1, queued(1)), "partition 1 has seen no marker"
    assert not fence.admits(0, 1, queued(1))
    assert fence.latest() == 5


def test_a_record_read_again_is_judged_at_its_own_offset() -> None:
    # A rebuild read past a marker; the live consumer then redelivers an earlier record.
    fence = Fence()
    for offset, event in enumerate([queued(1), marker(2), queued(2)]):
        fence.admits(0, offset, event)
    assert fence.admits(0, 0, queued(1)), "before the marker, epoch 1 was the leader's"
    assert not fence.admits(0, 5, queued(1))


def test_a_later_marker_of_a_lower_epoch_raises_nothing_and_marks_round_trip() -> None:
    fence = Fence()
    fence.admits(0, 3, marker(6))
    fence.admits(0, 7, marker(5))  # a slower claimant's marker, after the newer one
    assert fence.epoch(0, 9) == 6 and fence.epoch(0, 3) == 0 and fence.epoch(0, 4) == 6
    assert fence.marks() == [(0, 3, 6)]
    assert Fence(fence.marks()).epoch(0, 9) == 6


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(min_value=1, max_value=5)), min_size=1, max_size=30
    ),
    st.randoms(use_true_random=False),
)
def test_the_verdicts_do_not_depend_on_the_order_records_are_read_in(steps, rnd) -> None:
    """In log order, or markers first from a stored fence and the rest shuffled: the same
    verdict per offset (what a sink resuming at its offsets, or a rebuild, relies on)."""
    log: list[Event] = [marker(n) if is_marker else queued(n) for is_marker, n in steps]
    in_order = set(admitted(Fence(), log))
    stored = Fence()
    for offset, event in enumerate(log):
        if isinstance(event, LeaderElected):
            stored.admits(0, offset, event)
    shuffled = list(enumerate(log))
    rnd.shuffle(shuffled)
    again = Fence(stored.marks())
    assert {o for o, e in shuffled if again.admits(0, o, e)} == in_order
    expected = set()
    for offset, event in enumerate(log):
        best = max((e.epoch for e in log[:offset] if isinstance(e, LeaderElected)), default=0)
        if isinstance(event, JobQueued) and event.leader_epoch >= best:
            expected.add(offset)
    assert in_order == expected
