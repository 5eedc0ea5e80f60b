"""Best-fit placement and the fleet index, as pure functions over literal node events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.events import NodeDrained, NodeHeartbeat, NodeRegistered
from schemas.types import GpuDevice
from services.scheduler.fleet import Fleet
from services.scheduler.placement import PlacementRequest, place
from services.scheduler.queue import PlacementQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def register(fleet: Fleet, node: str, model: str, gb: int, count: int, **kw: str) -> None:
    gpus = [GpuDevice(index=i, model=model, memory_total_mb=gb * 1024) for i in range(count)]
    fleet.apply(
        NodeRegistered(node_id=node, occurred_at=T0, inventory_source="declared", gpus=gpus, **kw)
    )


def request(gpus: int = 1, vram: float = 10.0, **kw: object) -> PlacementRequest:
    return PlacementRequest(job_id="j", attempt=1, gpus=gpus, vram_gb=vram, **kw)  # type: ignore[arg-type]


def test_smallest_adequate_gpu_first() -> None:
    fleet = Fleet()
    register(fleet, "big", "H100-80GB", 80, 8)
    register(fleet, "small", "L4-24GB", 24, 4)
    register(fleet, "tiny", "T4-16GB", 16, 4)
    assert place(fleet, request(vram=20), T0, 30).node_id == "small"
    assert place(fleet, request(vram=10), T0, 30).node_id == "tiny"
    assert place(fleet, request(vram=40), T0, 30).node_id == "big"
    assert place(fleet, request(vram=90), T0, 30) is None


def test_packs_onto_the_node_with_fewest_free_gpus() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 4)
    register(fleet, "b", "A10", 24, 4)
    fleet.reserve(("x", 1), "b", (0, 1))
    placement = place(fleet, request(gpus=2), T0, 30)
    assert placement is not None
    assert (placement.node_id, placement.gpu_indices) == ("b", (2, 3))
    assert place(fleet, request(gpus=3), T0, 30).node_id == "a"


def test_reservations_and_heartbeats_limit_free_gpus() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 2)
    fleet.apply(NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[1]))
    assert place(fleet, request(), T0, 30).gpu_indices == (1,)
    fleet.reserve(("x", 1), "a", (1,))
    assert place(fleet, request(), T0, 30) is None
    fleet.release(("x", 1))
    assert place(fleet, request(), T0, 30).gpu_indices == (1,)


def test_provider_and_region_preferences_after_gpu_size() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 1, provider="aws", region="eu")
    register(fleet, "b", "A10", 24, 1, provider="gcp", region="us")
    register(fleet, "c", "A10", 24, 1, provider="gcp", region="eu")
    register(fleet, "d", "H100", 80, 1, provider="azure")
    assert place(fleet, request(providers=("gcp",)), T0, 30).node_id == "b"
    assert place(fleet, request(providers=("gcp",), regions=("eu",)), T0, 30).node_id == "c"
    assert place(fleet, request(providers=("azure",)), T0, 30).node_id == "a"  # size wins


def test_avoid_nodes_providers_silent_and_drained_nodes() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 1, provider="aws")
    register(fleet, "b", "A10", 24, 1, provider="gcp")
    assert place(fleet, request(avoid_nodes=frozenset({"a"})), T0, 30).node_id == "b"
    assert place(fleet, request(avoid_providers=frozenset({"aws"})), T0, 30).node_id == "b"
    fleet.apply(NodeDrained(node_id="b", occurred_at=T0))
    assert place(fleet, request(avoid_nodes=frozenset({"a"})), T0, 30) is None
    later = T0 + timedelta(seconds=31)
    assert place(fleet, request(), later, 30) is None  # a went silent
    fleet.apply(NodeHeartbeat(node_id="a", occurred_at=later, seq=2, free_gpu_indices=[0]))
    assert place(fleet, request(), later, 30).node_id == "a"


def test_gpu_models_use_the_fit_matcher() -> None:
    fleet = Fleet()
    register(fleet, "a", "NVIDIA A100-SXM4-80GB", 80, 1)
    register(fleet, "b", "NVIDIA A10G", 24, 1)
    assert place(fleet, request(gpu_models=("A100-80GB",)), T0, 30).node_id == "a"
    assert place(fleet, request(gpu_models=("A10",)), T0, 30) is None


def test_cpu_only_job_goes_to_the_node_with_fewest_free_gpus() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 4)
    register(fleet, "b", "A10", 24, 1)
    placement = place(fleet, request(gpus=0, vram=0), T0, 30)
    assert placement is not None and placement.node_id == "b" and placement.gpu_indices == ()


def test_avoidance_is_tried_in_tiers_once_the_fallback_time_has_come() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 1, provider="aws")  # where the attempt failed
    register(fleet, "c", "A10", 24, 1, provider="aws")  # a spare of the same provider
    register(fleet, "b", "A10", 24, 1, provider="gcp")
    later = T0 + timedelta(seconds=5)
    avoid = request(
        avoid_nodes=frozenset({"a"}), avoid_providers=frozenset({"aws"}), fallback_at=later
    )
    assert place(fleet, avoid, T0, 30) == place(fleet, avoid, later, 30)
    assert place(fleet, avoid, T0, 30).node_id == "b"
    fleet.reserve(("x", 1), "b", (0,))
    assert place(fleet, avoid, T0, 30) is None  # only the avoided provider is free: wait
    spare = place(fleet, avoid, later, 30)
    assert (spare.node_id, spare.fell_back_to) == ("c", "provider")
    fleet.reserve(("y", 1), "c", (0,))
    same = place(fleet, avoid, later, 30)
    assert (same.node_id, same.fell_back_to) == ("a", "node")
    fleet.lost("a", T0)  # silent since an attempt there was lost: never, not even now
    assert place(fleet, avoid, later, 30) is None
    fleet.release(("x", 1))
    assert place(fleet, request(fallback_at=T0), later, 30).node_id == "b"
    # The job's own placement.avoid_nodes is no preference: there is no fallback to it.
    hard = request(exclude_nodes=frozenset({"b"}), avoid_nodes=frozenset({"z"}), fallback_at=T0)
    assert place(fleet, hard, later, 30) is None


def test_provider_and_region_preferences_beat_packing_onto_a_fuller_node() -> None:
    # The preferred provider's (or region's) node has more free GPUs than another one:
    # preference first, packing only among equally preferred nodes.
    fleet = Fleet()
    register(fleet, "gcp-eu-1gpu", "A10", 24, 1, provider="gcp", region="eu")
    register(fleet, "aws-us-2gpu", "A10", 24, 2, provider="aws", region="us")
    assert place(fleet, request(providers=("aws",)), T0, 30).node_id == "aws-us-2gpu"
    assert place(fleet, request(regions=("us",)), T0, 30).node_id == "aws-us-2gpu"
    assert place(fleet, request(), T0, 30).node_id == "gcp-eu-1gpu"  # no preference: packing


def test_a_node_of_two_models_gives_the_job_gpus_of_the_model_it_placed_on() -> None:
    fleet = Fleet()
    gpus = [
        GpuDevice(index=0, model="NVIDIA GeForce RTX 3090", memory_total_mb=24 * 1024),
        GpuDevice(index=1, model="NVIDIA GeForce RTX 4090", memory_total_mb=24 * 1024),
    ]
    fleet.apply(
        NodeRegistered(node_id="mixed", occurred_at=T0, inventory_source="declared", gpus=gpus)
    )
    placement = place(fleet, request(gpu_models=("RTX 4090",)), T0, 30)
    assert placement is not None
    assert (placement.gpu_model, placement.gpu_indices) == ("NVIDIA GeForce RTX 4090", (1,))


def test_a_node_heard_exactly_node_timeout_ago_is_still_live() -> None:
    fleet = Fleet()
    register(fleet, "a", "A10", 24, 1)
    fleet.apply(NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[0]))
    assert place(fleet, request(), T0 + timedelta(seconds=30), 30) is not None
    assert place(fleet, request(), T0 + timedelta(seconds=30.001), 30) is None


def test_a_job_queued_again_waits_once_with_its_latest_request() -> None:
    queue = PlacementQueue()
    first, latest = request(gpus=1), request(gpus=2)
    queue.add("j", T0 + timedelta(seconds=60), None, first)
    queue.add("j", T0 + timedelta(seconds=90), None, latest)
    assert list(queue.heads()) == ["j"]
    assert queue.request_of("j") == latest
    queue.remove("j")
    assert list(queue.heads()) == []


def test_a_cpu_only_job_follows_its_preferences_and_only_live_nodes() -> None:
    fleet = Fleet()
    register(fleet, "aws-eu", "A10", 24, 0, provider="aws", region="eu")
    register(fleet, "gcp-us", "A10", 24, 2, provider="gcp", region="us")
    register(fleet, "drained", "A10", 24, 0, provider="aws", region="eu")
    fleet.apply(NodeDrained(node_id="drained", occurred_at=T0))
    cpu = request(gpus=0, vram=0.0)
    placement = place(fleet, cpu, T0, 30)
    assert placement is not None
    assert (placement.node_id, placement.provider, placement.region) == ("aws-eu", "aws", "eu")
    assert (placement.gpu_model, placement.gpu_indices) == ("", ())
    assert place(fleet, request(gpus=0, vram=0.0, providers=("gcp",)), T0, 30).node_id == "gcp-us"
    assert place(fleet, request(gpus=0, vram=0.0, regions=("us",)), T0, 30).node_id == "gcp-us"
    assert place(fleet, cpu, T0 + timedelta(seconds=31), 30) is None  # every node silent


def test_retries_whose_backoff_ended_become_placeable_past_a_stale_entry() -> None:
    queue = PlacementQueue()
    due = T0 + timedelta(seconds=5)
    queue.add("stale", T0 + timedelta(seconds=60), due, request())
    queue.remove("stale")  # placed meanwhile: its delayed entry is stale
    queue.add("fitted", T0 + timedelta(seconds=60), due, request(gpus=2))
    queue.add("unknown-fit", T0 + timedelta(seconds=60), due, None)
    queue.release_due(T0)
    assert list(queue.heads()) == [] and queue.unfitted() == []
    queue.release_due(due)
    assert list(queue.heads()) == ["fitted"] and queue.unfitted() == ["unknown-fit"]


def test_a_kind_nothing_can_hold_is_skipped_and_the_next_kind_is_offered() -> None:
    queue = PlacementQueue()
    queue.add("big", T0 + timedelta(seconds=60), None, request(gpus=8))
    queue.add("small", T0 + timedelta(seconds=60), None, request(gpus=1))
    offered = []
    for job_id in queue.heads():
        offered.append(job_id)
        queue.skip(job_id)
    assert offered == ["big", "small"]


def test_a_kind_emptied_while_offering_does_not_end_the_offer() -> None:
    # The caller takes a job of another kind out mid-pass (cancelled, say): later kinds are
    # still offered.
    queue = PlacementQueue()
    for job_id, gpus in (("a", 1), ("b", 2), ("c", 4)):
        queue.add(job_id, T0 + timedelta(seconds=60), None, request(gpus=gpus))
    offered = []
    for job_id in queue.heads():
        offered.append(job_id)
        if job_id == "a":
            queue.remove("b")
    assert offered == ["a", "c"]
