"""The fleet's incremental free sets and buckets equal a recomputation from scratch."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.events import NodeDrained, NodeHeartbeat, NodeRegistered
from schemas.types import GpuDevice
from services.scheduler.fleet import Fleet

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NODES = ["a", "b", "c"]
MODELS = ["T4", "L4"]

node_ids = st.sampled_from(NODES)
indices = st.lists(st.integers(0, 5), max_size=4, unique=True)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), node_ids, st.integers(1, 6), st.booleans()),
        st.tuples(st.just("heartbeat"), node_ids, indices),
        st.tuples(st.just("drain"), node_ids),
        st.tuples(st.just("reserve"), st.integers(0, 5), node_ids, indices),
        st.tuples(st.just("release"), st.integers(0, 5)),
    ),
    max_size=40,
)


def apply(fleet: Fleet, op: tuple) -> None:
    kind = op[0]
    if kind == "register":
        _, node, count, mixed = op
        gpus = [
            GpuDevice(index=i, model=MODELS[i % 2 if mixed else 0], memory_total_mb=16 * 1024)
            for i in range(count)
        ]
        fleet.apply(
            NodeRegistered(node_id=node, occurred_at=T0, inventory_source="declared", gpus=gpus)
        )
    elif kind == "heartbeat":
        fleet.apply(NodeHeartbeat(node_id=op[1], occurred_at=T0, seq=1, free_gpu_indices=op[2]))
    elif kind == "drain":
        fleet.apply(NodeDrained(node_id=op[1], occurred_at=T0))
    elif kind == "reserve":
        fleet.reserve((f"j{op[1]}", 1), op[2], tuple(op[3]))
    else:
        fleet.release((f"j{op[1]}", 1))


def expected_free(fleet: Fleet, node_id: str) -> set[int]:
    """What the node has free by definition: reported (all before a heartbeat) minus held."""
    node = fleet.nodes[node_id]
    free = set(node.gpus) if node.reported_free is None else set(node.reported_free)
    free &= set(node.gpus)
    for held_on, held in fleet.reservations.values():
        if held_on == node_id:
            free -= set(held)
    return free


@settings(max_examples=300, deadline=None)
@given(operations)
def test_free_indices_and_buckets_match_a_recomputation(ops: list[tuple]) -> None:
    fleet = Fleet()
    for op in ops:
        apply(fleet, op)
    for node_id, node in fleet.nodes.items():
        free = expected_free(fleet, node_id)
        assert fleet.free_indices(node_id) == sorted(free)
        for model, on_model in node.by_model.items():
            assert fleet.free_indices(node_id, model) == sorted(free & set(on_model))
            indexed = {count for count, nodes in fleet.buckets(model).items() if node_id in nodes}
            usable = node.registered and not node.drained
            assert indexed == ({len(free & set(on_model))} if usable else set())
    for model in MODELS:
        assert all(fleet.buckets(model).values()), "no empty bucket is left behind"


def test_a_release_keeps_an_index_another_attempt_still_holds() -> None:
    fleet = Fleet()
    apply(fleet, ("register", "a", 2, False))
    fleet.reserve(("j1", 1), "a", (0,))
    fleet.reserve(("j2", 1), "a", (0, 1))  # e.g. rebuilt from a log where both hold GPU 0
    fleet.release(("j1", 1))
    assert fleet.free_indices("a") == []
    fleet.release(("j2", 1))
    assert fleet.free_indices("a") == [0, 1]
