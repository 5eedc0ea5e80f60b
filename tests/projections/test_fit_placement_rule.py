"""Pre-flight fit and placement are one rule (``projections.fit.holds``).

A job that passes pre-flight must be placeable once the fleet is free, and one
that no free fleet can place must be rejected at submit: checked at the
boundaries (per-node VRAM, per-model counts, the gpu_models filter) and as a
property over generated fleets.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.fit import NodeCapacity, check_fit, estimate_vram_gb
from schemas.events import NodeRegistered
from schemas.spec import JobSpec
from schemas.types import GpuDevice
from services.scheduler.fleet import Fleet
from services.scheduler.placement import PlacementRequest, place
from tests.projections.histories import job_spec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MODELS = ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB")


def node(node_id: str, *gpus: tuple[str, int]) -> NodeCapacity:
    """A node with GPUs given as (model, GiB), indexed in order."""
    devices = [
        GpuDevice(index=i, model=m, memory_total_mb=gib * 1024) for i, (m, gib) in enumerate(gpus)
    ]
    return NodeCapacity(node_id=node_id, gpus=devices)


def placeable(spec: JobSpec, nodes: list[NodeCapacity]) -> bool:
    """Would the scheduler place the job on this fleet with every GPU free and every node live?"""
    fleet = Fleet()
    for n in nodes:
        fleet.apply(
            NodeRegistered(
                node_id=n.node_id, occurred_at=T0, inventory_source="declared", gpus=n.gpus
            )
        )
    request = PlacementRequest.for_spec("j", 1, spec, estimate_vram_gb(spec))
    return place(fleet, request, T0, node_timeout_s=30) is not None


def spec(gpus: int, vram: float | None = None, models: list[str] | None = None) -> JobSpec:
    resources: dict[str, object] = {"gpus": gpus, "gpu_models": models or []}
    if vram is not None:
        resources["min_vram_gb"] = vram
    return job_spec(resources=resources)


def test_two_gpus_of_different_models_on_one_node_do_not_fit_two_gpus() -> None:
    nodes = [node("mixed", (MODELS[0], 24), (MODELS[1], 24))]
    report = check_fit(spec(2), nodes)
    assert not report.fits and not placeable(spec(2), nodes)
    assert report.max_gpus_per_node == 1
    assert "the most any node has is 1 suitable GPU(s) of one model" in report.explanation
    assert check_fit(spec(1), nodes).fits and placeable(spec(1), nodes)


def test_per_model_count_boundary() -> None:
    nodes = [node("a", (MODELS[0], 24), (MODELS[0], 24), (MODELS[1], 24))]
    for gpus, fits in ((2, True), (3, False)):
        assert check_fit(spec(gpus), nodes).fits is fits
        assert placeable(spec(gpus), nodes) is fits


def test_per_node_vram_boundary_counts_the_smallest_gpu_of_the_model() -> None:
    nodes = [node("a", (MODELS[2], 80), (MODELS[2], 40))]
    for total, fits in ((80.0, True), (80.02, False)):  # 2 GPUs: 40 GiB each fits, 40.01 not
        assert check_fit(spec(2, total), nodes).fits is fits
        assert placeable(spec(2, total), nodes) is fits
    # A node counts a model at its smallest GPU (placement may hand out any of them).
    assert not check_fit(spec(1, 80), nodes).fits and not placeable(spec(1, 80), nodes)
    assert check_fit(spec(1, 40), nodes).fits and placeable(spec(1, 40), nodes)


def test_gpu_models_filter_boundary() -> None:
    nodes = [node("a", (MODELS[0], 24), (MODELS[0], 24)), node("b", (MODELS[1], 24))]
    assert not check_fit(spec(2, models=["RTX 3090"]), nodes).fits
    assert not placeable(spec(2, models=["RTX 3090"]), nodes)
    assert check_fit(spec(2, models=["RTX 3090", "RTX 4090"]), nodes).fits
    assert placeable(spec(2, models=["RTX 3090", "RTX 4090"]), nodes)
    assert not check_fit(spec(1, models=["A100"]), nodes).fits


fleets = st.lists(
    st.lists(st.tuples(st.sampled_from(MODELS), st.sampled_from((16, 24, 40, 80))), max_size=4),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    fleets,
    st.integers(0, 5),
    st.one_of(st.none(), st.sampled_from((10.0, 24.0, 48.0, 80.0, 160.0))),
    st.lists(st.sampled_from(("RTX 4090", "RTX 3090", "A100", "A100-80GB")), max_size=2),
)
def test_fit_is_exactly_what_a_free_fleet_can_place(
    inventory: list[list[tuple[str, int]]], gpus: int, vram: float | None, models: list[str]
) -> None:
    nodes = [node(f"n{i}", *gs) for i, gs in enumerate(inventory)]
    job = spec(gpus, vram, models)
    assert check_fit(job, nodes).fits is placeable(job, nodes)
