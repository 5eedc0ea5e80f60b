"""Two schedulers on one ledger: one leads, the standby takes over, a stale decision is fenced.

On the FakeLedger (its lease: the first member started holds it). The same behaviour
on the real broker, with the leader SIGKILLed under load, is
tests/system/test_scheduler_failover.py.
"""

from __future__ import annotations

from datetime import timedelta

from projections.fence import Fence
from schemas import codec
from schemas.events import AttemptScheduled, Event, JobQueued, LeaderElected
from services.clock import utcnow
from services.ledger import partition_for
from services.scheduler import build_scheduler
from services.scheduler.leader import route_key
from services.settings import Settings
from tests.fakes.ledger import FakeLedger
from tests.fakes.scripted_node import ScriptedNode
from tests.processors.harness import fast, submitted, wait_history
from tests.waiting import eventually


def placements(history: list[Event]) -> list[AttemptScheduled]:
    return [e for e in history if isinstance(e, AttemptScheduled)]


def test_each_fence_marker_lands_on_its_own_partition() -> None:
    for count in (1, 4, 12):
        assert [partition_for(route_key(p, count), count) for p in range(count)] == list(
            range(count)
        )


async def test_the_standby_takes_over_fences_the_old_epoch_and_places_what_is_left(
    settings: Settings,
) -> None:
    ledger = await FakeLedger(fast(settings.model_copy(update={"topic_prefix": "fake."}))).start()
    node = await ScriptedNode(ledger, "node-a", gpus=2).start(heartbeats=False)
    await node.node_heartbeat()
    first = await build_scheduler(ledger.settings, ledger=ledger).start()
    second = await build_scheduler(ledger.settings, ledger=ledger).start()
    try:
        await eventually(lambda: first.leading, what="the first scheduler leading")
        await second.wait_ready()
        assert not second.leading, "one leader at a time"
        early = submitted("job-early")
        await ledger.append(early)
        (placed,) = placements(
            await wait_history(ledger, early.job_id, lambda h: bool(placements(h)))
        )
        old_epoch = placed.leader_epoch
        assert old_epoch == first.leadership.epoch > 0
        await eventually(
            lambda: (early.job_id, 1) in second.state.fleet.reservations,
            what="the standby folding the leader's placement",
        )

        await first.leadership.lease.stop()  # the lease moves, as when the leader dies
        await eventually(lambda: second.leading, what="the standby leading")
        assert second.leadership.epoch > old_epoch
        await eventually(lambda: not first.leading, what="the old leader standing by")

        # A deposed leader that had not heard yet queues and places a new job, on GPU 0
        # of job-early's, with the ids any scheduler derives: after the fence, nobody
        # applies them, and the leader derives the same ids with its own epoch.
        late = submitted("job-late")
        zombie = {"producer": "scheduler/zombie", "leader_epoch": old_epoch}
        stale_queued = JobQueued.derived(
            late, "scheduler", attempt=0, queue_deadline=utcnow() + timedelta(hours=1), **zombie
        )
        stale = AttemptScheduled.derived(
            stale_queued,
            "scheduler",
            attempt=1,
            node_id="node-a",
            gpu_count=1,
            gpu_indices=list(placed.gpu_indices),
            dispatch_deadline=utcnow() + timedelta(seconds=60),
            spec=late.spec,
            **zombie,
        )
        await ledger.append_many([late, stale_queued, stale])
        new_epoch = second.leadership.epoch
        history = await wait_history(
            ledger,
            late.job_id,
            lambda h: any(p.leader_epoch == new_epoch for p in placements(h)),
        )
        (fresh,) = [p for p in placements(history) if p.leader_epoch == new_epoch]
        assert fresh.event_id == stale.event_id, "the same decision, by the new leader"
        assert fresh.gpu_indices != placed.gpu_indices, "the fenced placement booked nothing"
        assert second.state.fleet.reservations[(late.job_id, 1)] == (
            "node-a",
            tuple(fresh.gpu_indices),
        )

        # Every reader drops the zombie's records by partition order alone.
        topic = ledger.settings.topic("job-events")
        partition = partition_for(late.job_id, await ledger.partitions(topic))
        log = [
            (raw.offset, codec.decode(raw.value or b""))
            async for raw in ledger.read_raw(topic, [partition])
        ]
        fence = Fence()
        kept = [e for o, e in log if isinstance(e, Event) and fence.admits(partition, o, e)]
        mine = [e for e in kept if e.job_id == late.job_id]
        assert [type(e) for e in mine] == [type(late), JobQueued, AttemptScheduled]
        assert all(e.leader_epoch == new_epoch for e in mine[1:])  # type: ignore[attr-defined]
        assert {e.epoch for _, e in log if isinstance(e, LeaderElected)} == {old_epoch, new_epoch}
    finally:
        await second.stop()
        await first.stop()
        await node.stop()
