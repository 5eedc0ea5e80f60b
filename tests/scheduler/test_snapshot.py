"""The scheduler's snapshot (services/scheduler/snapshot.py), pure: a state restored from one
decides exactly as the scheduler that wrote it goes on deciding, and as one that refolded
every event from the first; a damaged snapshot is refused with the reason.

tests/scheduler/test_snapshot_service.py holds the service's side on the fake ledger: a
start from a snapshot, and the refold from offset 0 when the snapshot cannot be used.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from projections.fence import Fence
from schemas.events import (
    AttemptAccepted,
    AttemptLost,
    CancelRequested,
    CheckpointStored,
    ComputeReleased,
    Event,
    FailureClassified,
    JobSucceeded,
    NodeDrained,
    NodeHeartbeat,
    RetryScheduled,
)
from schemas.types import Evidence
from services.scheduler import snapshot
from services.scheduler.core import SchedulerConfig, SchedulerState
from services.scheduler.inventory import check_fit_against
from tests.scheduler.test_core import T0, node, submit

CONFIG = SchedulerConfig(node_timeout_s=30, dispatch_timeout_s=60, done_kept=3)


def fresh() -> SchedulerState:
    return SchedulerState(CONFIG, check_fit_against)


def at(seconds: float) -> Any:
    return T0 + timedelta(seconds=seconds)


def beat(node_id: str, seconds: float, free: list[int]) -> NodeHeartbeat:
    return NodeHeartbeat(
        node_id=node_id, occurred_at=at(seconds), seq=int(seconds), free_gpu_indices=free
    )


def inputs() -> Iterator[tuple[float, list[Event]]]:
    """(time, what the other services and nodes appended meanwhile), round by round: a
    fleet of three providers, jobs that finish, fail and retry avoiding their node, a
    checkpoint resumed from, a cancellation, a job too big for what is free, a drain; and
    first a job submitted before any node registered (its fit is checked once one is)."""
    yield -1, [submit("early", at(-1))]
    yield (
        0,
        [
            node("a", 2, provider="p1", at=at(0)),
            node("b", 2, provider="p2", at=at(0)),
            node("c", 4, gb=40, provider="p3", at=at(0)),
            *(submit(f"j{i}", at(0), limits={"queue_timeout_s": 100}) for i in range(5)),
            submit("wide", at(0), resources={"gpus": 4}, limits={"queue_timeout_s": 15}),
        ],
    )
    yield (
        1,
        [
            beat("a", 1, []),
            beat("b", 1, []),
            AttemptAccepted(job_id="j0", attempt=1, node_id="a", occurred_at=at(1)),
            CheckpointStored(
                job_id="j0",
                attempt=1,
                occurred_at=at(1),
                name="c",
                uri="file:///c",
                sha256="s",
                bytes=1,
            ),
            ComputeReleased(job_id="j0", attempt=1, node_id="a", occurred_at=at(1)),
            JobSucceeded(job_id="j0", occurred_at=at(1), attempt=1),
            submit("resumes", at(1), resume_from="j0"),
        ],
    )
    yield (
        2,
        [
            AttemptLost(job_id="j1", attempt=1, node_id="a", occurred_at=at(2)),
            FailureClassified(
                job_id="j1",
                attempt=1,
                occurred_at=at(2),
                failure_class="node_lost",
                attribution="platform",
                retryable=True,
                summary="",
                advice="",
                evidence=Evidence(rule_id="r"),
                rule_id="r",
                classifier_version="1",
            ),
            RetryScheduled(
                job_id="j1",
                attempt=1,
                occurred_at=at(2),
                next_attempt=2,
                delay_s=2,
                not_before=at(4),
                avoid_nodes=["a"],
                avoid_providers=["p1"],
            ),
            CancelRequested(job_id="j4", occurred_at=at(2), requested_by="t", reason="not needed"),
            *(submit(f"k{i}", at(2)) for i in range(3)),
        ],
    )
    yield 5, [beat("c", 5, [0, 1, 2, 3]), beat("a", 5, [0, 1]), beat("b", 5, [1])]
    yield (
        8,
        [
            *(
                ComputeReleased(job_id=f"k{i}", attempt=1, node_id="c", occurred_at=at(8))
                for i in (0,)
            ),
            NodeDrained(node_id="b", occurred_at=at(8), reason="maintenance"),
            *(submit(f"m{i}", at(8)) for i in range(4)),
        ],
    )
    yield 20, [beat("c", 20, [0, 1, 2, 3]), beat("a", 20, [0, 1])]
    yield 30, [*(JobSucceeded(job_id=f"m{i}", occurred_at=at(30), attempt=1) for i in range(4))]
    yield 31, [submit("late", at(31))]


def decided(state: SchedulerState, news: list[Event], now: Any) -> list[Event]:
    for event in news:
        state.observe(event, event.occurred_at)
    return state.decide(now)


def ids(events: list[Event]) -> list[tuple[str, str, str]]:
    """What a decision is, without the instance that made it: type, id, and where."""
    return [(e.type, e.event_id, getattr(e, "node_id", "")) for e in events]


def restored(state: SchedulerState, fence: Fence, positions: snapshot.Positions) -> Any:
    blob = snapshot.encode(state, fence, positions)
    found = snapshot.assemble(dict(snapshot.records(blob, 7, part_bytes=512)))
    assert found is not None and found[0] == 7
    return snapshot.decode(found[1], found[0], CONFIG, check_fit_against)


@pytest.mark.parametrize("cut", [0, 1, 3, 5, 7])
def test_a_restored_state_decides_as_the_one_that_wrote_it_and_as_a_refold_from_0(
    cut: int,
) -> None:
    """A live scheduler decides round by round; snapshotted after round ``cut``, restored,
    the copy decides the rest exactly as the writer does, and as a state that folded the
    whole log (inputs and decisions, in log order) from the first event."""
    live, log = fresh(), []
    rounds = list(inputs())
    copy: SchedulerState | None = None
    after = 0
    fence = Fence([(0, 3, 1), (1, 5, 1)])
    for n, (seconds, news) in enumerate(rounds):
        now = at(seconds)
        out = decided(live, news, now)
        if copy is not None:
            assert ids(decided(copy, news, now)) == ids(out), f"round {n}"
            after += len(out)
        log += [*news, *out]
        if n == cut:
            back = restored(live, fence, {("job-events", 0): 41, ("node-events", 1): 9})
            copy = back.state
            assert back.fence.marks() == fence.marks()
            assert back.positions == {("job-events", 0): 41, ("node-events", 1): 9}
            assert snapshot.encode(copy, back.fence, back.positions) == snapshot.encode(
                live, fence, back.positions
            )
    assert copy is not None and after == {0: 28, 1: 16, 3: 9, 5: 2, 7: 1}[cut], after
    assert sorted(copy.jobs) == sorted(live.jobs) and copy.fleet.reservations == (
        live.fleet.reservations
    )
    refold = fresh()
    for event in log:
        refold.observe(event, event.occurred_at)
    end = at(rounds[-1][0] + 1)
    late = [submit("after", end), beat("a", rounds[-1][0] + 1, [0, 1])]
    assert ids(decided(copy, late, end)) == ids(decided(refold, late, end))


def test_finished_jobs_leave_the_state_and_its_snapshot_does_not_grow_with_them() -> None:
    """Only the latest ``done_kept`` finished jobs stay remembered (a late record for one
    changes nothing) and the owner of one that stored a checkpoint (``resume_from``)."""
    state = fresh()
    sizes = []
    decided(state, [node("a")], T0)
    for i in range(14):
        job = f"old{i:02d}"
        decided(state, [submit(job, at(i)), beat("a", i, [0])], at(i))
        if i == 0:
            state.observe(
                CheckpointStored(
                    job_id=job, attempt=1, occurred_at=at(i), name="c", uri="u", sha256="s", bytes=1
                )
            )
        decided(state, [JobSucceeded(job_id=job, occurred_at=at(i), attempt=1)], at(i))
        sizes.append(len(zlib.decompress(snapshot.encode(state, Fence(), {}))))
    assert list(state.done) == ["old11", "old12", "old13"] and state.jobs == {}
    assert set(state.owners) == {"old00", "old11", "old12", "old13"}
    assert sizes[13] == sizes[9]  # the same size however many finished before


def blob_of(body_change: Any) -> dict[bytes, bytes]:
    state = fresh()
    decided(state, [node("a"), submit("j")], T0)
    body = json.loads(zlib.decompress(snapshot.encode(state, Fence(), {})))
    body_change(body)
    return dict(snapshot.records(zlib.compress(json.dumps(body).encode()), 1, 1 << 20))


def test_a_damaged_snapshot_is_refused_with_why() -> None:
    good = blob_of(lambda body: None)
    assert snapshot.assemble({}) is None  # none written yet
    missing = {k: v for k, v in good.items() if k != snapshot.part_key(1, 0)}
    flipped = {**good, snapshot.part_key(1, 0): good[snapshot.part_key(1, 0)][:-1] + b"\x00"}
    other = {**good, snapshot.HEAD: good[snapshot.HEAD].replace(b'"format": 1', b'"format": 2')}
    for latest, why in (
        (missing, "part 0 of 1 of snapshot 1 is missing"),
        (flipped, "snapshot 1 does not match its digest"),
        (other, "it is of format 2, this scheduler reads 1"),
        ({snapshot.HEAD: b"{not json"}, "its head does not parse"),
    ):
        with pytest.raises(snapshot.SnapshotError, match=why):
            snapshot.assemble(latest)
    for change, why in (
        (lambda body: body.update(format=3), "its body is of format 3, not 1"),
        (lambda body: body.pop("fleet"), "does not parse .KeyError: 'fleet'"),
        (
            lambda body: body["jobs"]["j"].update(submitted="AAAA"),
            "an event of snapshot 1 does not decode",
        ),
    ):
        found = snapshot.assemble(blob_of(change))
        assert found is not None
        with pytest.raises(snapshot.SnapshotError, match=why):
            snapshot.decode(found[1], found[0], CONFIG, check_fit_against)
