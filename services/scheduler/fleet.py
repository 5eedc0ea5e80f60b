"""The fleet's capacity as the scheduler sees it, folded from node-events.

A node is known from its ``NodeRegistered`` (inventory, provider, region),
kept fresh by ``NodeHeartbeat`` (free GPU indices, ``occurred_at`` = last seen)
and removed from placement by ``NodeDrained``. The scheduler's own
reservations (attempts it placed whose compute is not released yet) are
subtracted from what a node reports free, so two attempts are never placed on
the same GPU between a placement and the node's next heartbeat.

Free GPUs are indexed by ``model -> free count -> nodes`` so a placement looks
at a handful of buckets instead of every node (see :mod:`.placement`). Each
node also keeps its free set, updated in place by a reservation (the hot path:
one per placement) and recomputed only when what the node reports or holds
otherwise changes (heartbeat, registration, release).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schemas.events import NodeDrained, NodeEvent, NodeHeartbeat, NodeRegistered
from schemas.types import GpuDevice

AttemptKey = tuple[str, int]
"""(job_id, attempt)."""


@dataclass
class NodeState:
    """One node: inventory, what it last reported free, and when it was last heard from."""

    node_id: str
    provider: str = ""
    region: str = ""
    gpus: dict[int, GpuDevice] = field(default_factory=dict)
    reported_free: frozenset[int] | None = None
    """Free indices from the last heartbeat; None until the first one (all free)."""
    last_seen: datetime | None = None
    """When the node was last heard from (the broker's append time of its latest event)."""
    lost_at: datetime | None = None
    """When an attempt on this node was last declared lost (the watchdog's clock)."""
    drained: bool = False
    registered: bool = False
    free: set[int] = field(default_factory=set)
    """Reported free (all GPUs before the first heartbeat) minus reservations; kept by Fleet."""

    by_model: dict[str, list[int]] = field(default_factory=dict)
    """GPU indices by model name."""
    vram_by_model: dict[str, float] = field(default_factory=dict)
    """Memory of the smallest GPU of each model on this node, in GiB."""

    def set_inventory(self, gpus: list[GpuDevice]) -> None:
        """Take a (re)registered inventory; the per-model indices and memory follow it."""
        self.gpus = {g.index: g for g in gpus}
        self.by_model, self.vram_by_model = {}, {}
        for index, gpu in sorted(self.gpus.items()):
            self.by_model.setdefault(gpu.model, []).append(index)
            vram = gpu.memory_total_mb / 1024
            self.vram_by_model[gpu.model] = min(vram, self.vram_by_model.get(gpu.model, vram))

    def vram_gb(self, model: str) -> float:
        """The memory of this node's smallest GPU of ``model`` (0 when it has none): what a job
        can count on."""
        return self.vram_by_model.get(model, 0.0)

    @property
    def suspect(self) -> bool:
        """An attempt here was declared lost and the node has not been heard from since.

        Compared by time, not by arrival, so a rebuild that reads node-events and
        job-events in another order reaches the same answer.
        """
        return self.lost_at is not None and (
            self.last_seen is None or self.last_seen <= self.lost_at
        )


class Fleet:
    """Nodes, reservations and the free-GPU index. Mutated only through its methods."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.reservations: dict[AttemptKey, tuple[str, tuple[int, ...]]] = {}
        self._reserved_on: dict[str, dict[AttemptKey, tuple[int, ...]]] = {}
        self.model_vram_gb: dict[str, float] = {}
        """Smallest memory seen for each model across the fleet, in GiB."""
        self.model_max_vram_gb: dict[str, float] = {}
        """Largest memory seen for each model: a request above it skips the model at once."""
        self._index: dict[str, dict[int, dict[str, None]]] = {}
        self._indexed: dict[str, dict[str, int]] = {}
        self._models_by_vram: list[str] | None = None
        self.inventory_version = 0
        """Bumped whenever what the fleet *could* hold changes (registration, drain)."""

    # ----------------------------------------------------------------------- node events

    def apply(self, event: NodeEvent, heard_at: datetime | None = None) -> None:
        """Fold one node event, heard at ``heard_at`` (the broker's append time; the
        event's own ``occurred_at`` when not known). Liveness is judged by when the
        platform heard the node, never by the node's clock. Idempotent."""
        node = self.nodes.get(event.node_id)
        if node is None:
            node = self.nodes[event.node_id] = NodeState(event.node_id)
        if isinstance(event, NodeRegistered | NodeDrained):
            self.inventory_version += 1
        if isinstance(event, NodeRegistered):
            node.provider, node.region = event.provider, event.region
            node.set_inventory(event.gpus)
            node.registered, node.drained = True, False
            node.reported_free = None
            for gpu in event.gpus:
                vram = gpu.memory_total_mb / 1024
                if vram > self.model_max_vram_gb.get(gpu.model, 0.0):
                    self.model_max_vram_gb[gpu.model] = vram
                if vram < self.model_vram_gb.get(gpu.model, float("inf")):
                    self.model_vram_gb[gpu.model] = vram
                    self._models_by_vram = None
        elif isinstance(event, NodeHeartbeat):
            node.reported_free = frozenset(event.free_gpu_indices)
        elif isinstance(event, NodeDrained):
            node.drained = True
        seen = heard_at or event.occurred_at
        if node.last_seen is None or seen > node.last_seen:
            node.last_seen = seen
        self._recompute_free(node)
        self._reindex(node)

    # ----------------------------------------------------------------------- reservations

    def reserve(self, key: AttemptKey, node_id: str, indices: tuple[int, ...]) -> None:
        """Hold ``indices`` on ``node_id`` for the attempt until :meth:`release`."""
        if key in self.reservations:
            return
        self.reservations[key] = (node_id, indices)
        self._reserved_on.setdefault(node_id, {})[key] = indices
        node = self.nodes.get(node_id)
        if node is not None:
            node.free.difference_update(indices)
            self._reindex(node)

    def lost(self, node_id: str, at: datetime) -> None:
        """An attempt on ``node_id`` was declared lost at ``at``: place nothing there until
        the node is heard from again (its next heartbeat), however recent its last one."""
        node = self.nodes.get(node_id)
        if node is not None and (node.lost_at is None or at > node.lost_at):
            node.lost_at = at

    def release(self, key: AttemptKey) -> None:
        """Free the GPUs reserved for an attempt, once it released them (or never took them)."""
        held = self.reservations.pop(key, None)
        if held is None:
            return
        node_id, _ = held
        self._reserved_on.get(node_id, {}).pop(key, None)
        node = self.nodes.get(node_id)
        if node is not None:
            # Recomputed rather than added back: another attempt may hold the same index.
            self._recompute_free(node)
            self._reindex(node)

    # ----------------------------------------------------------------------- queries

    def free_indices(self, node_id: str, model: str | None = None) -> list[int]:
        """Indices free on the node (reported free, not reserved), of ``model`` if given."""
        node = self.nodes[node_id]
        if model is None:
            return sorted(node.free)
        return [i for i in node.by_model.get(model, ()) if i in node.free]

    def models_by_vram(self) -> list[str]:
        """GPU models in the fleet, smallest memory first (then by name)."""
        if self._models_by_vram is None:
            self._models_by_vram = sorted(
                self.model_vram_gb, key=lambda m: (self.model_vram_gb[m], m)
            )
        return self._models_by_vram

    def buckets(self, model: str) -> dict[int, dict[str, None]]:
        """``free count -> node ids`` (insertion ordered) for one model."""
        return self._index.get(model, {})

    def usable_nodes(self) -> list[NodeState]:
        """Registered, not drained nodes: the inventory a job could ever run on."""
        return [n for n in self.nodes.values() if n.registered and not n.drained]

    # ----------------------------------------------------------------------- snapshot

    def rows(self) -> dict[str, Any]:
        """The fleet as JSON-able rows (:mod:`.snapshot`): nodes, reservations and the index
        in their order (placement breaks ties by the index's order)."""
        return {
            "nodes": [
                [
                    n.node_id,
                    n.provider,
                    n.region,
                    [g.model_dump(mode="json") for g in n.gpus.values()],
                    sorted(n.reported_free) if n.reported_free is not None else None,
                    _iso(n.last_seen),
                    _iso(n.lost_at),
                    n.drained,
                    n.registered,
                ]
                for n in self.nodes.values()
            ],
            "reservations": [[j, a, n, list(i)] for (j, a), (n, i) in self.reservations.items()],
            "model_vram_gb": self.model_vram_gb,
            "model_max_vram_gb": self.model_max_vram_gb,
            "index": {m: [[c, list(ids)] for c, ids in b.items()] for m, b in self._index.items()},
            "inventory_version": self.inventory_version,
        }

    @classmethod
    def from_rows(cls, rows: dict[str, Any]) -> Fleet:
        """The fleet :meth:`rows` wrote, exactly."""
        fleet = cls()
        for node_id, provider, region, gpus, free, seen, lost, drained, registered in rows["nodes"]:
            node = fleet.nodes[node_id] = NodeState(node_id, provider, region)
            node.set_inventory([GpuDevice.model_validate(g) for g in gpus])
            node.reported_free = frozenset(free) if free is not None else None
            node.last_seen, node.lost_at = _parsed(seen), _parsed(lost)
            node.drained, node.registered = drained, registered
        for job_id, attempt, node_id, indices in rows["reservations"]:
            key = (job_id, attempt)
            fleet.reservations[key] = (node_id, tuple(indices))
            fleet._reserved_on.setdefault(node_id, {})[key] = tuple(indices)
        for node in fleet.nodes.values():
            fleet._recompute_free(node)
        fleet.model_vram_gb = dict(rows["model_vram_gb"])
        fleet.model_max_vram_gb = dict(rows["model_max_vram_gb"])
        for model, buckets in rows["index"].items():
            fleet._index[model] = {count: dict.fromkeys(ids) for count, ids in buckets}
            for count, ids in buckets:
                for node_id in ids:
                    fleet._indexed.setdefault(node_id, {})[model] = count
        fleet.inventory_version = rows["inventory_version"]
        return fleet

    # ----------------------------------------------------------------------- index

    def _recompute_free(self, node: NodeState) -> None:
        free = set(node.gpus)
        if node.reported_free is not None:
            free.intersection_update(node.reported_free)
        for indices in self._reserved_on.get(node.node_id, {}).values():
            free.difference_update(indices)
        node.free = free

    def _reindex(self, node: NodeState) -> None:
        """Move the node to the buckets of its current free counts (end of each bucket)."""
        node_id = node.node_id
        old = self._indexed.pop(node_id, {})
        for model, count in old.items():
            bucket = self._index.get(model, {}).get(count)
            if bucket is not None:
                bucket.pop(node_id, None)
                if not bucket:
                    del self._index[model][count]
        if not node.registered or node.drained:
            return
        new: dict[str, int] = {}
        free = node.free
        for model, indices in node.by_model.items():
            count = sum(1 for i in indices if i in free)
            new[model] = count
            self._index.setdefault(model, {}).setdefault(count, {})[node_id] = None
        self._indexed[node_id] = new


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _parsed(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None
