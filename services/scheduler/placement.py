"""Best-fit placement: a pure function of the fleet, the request and ``now``.

Order of preference, in line with issue 5:

1. the smallest adequate GPU model (least memory that still holds the job), so
   big GPUs stay free for the jobs that need them;
2. the job's provider, then region preferences (``spec.placement``), in order;
3. the node with the fewest free GPUs of that model that still fits (packing),
   then the order nodes entered the index (stable, so replays agree).

Nodes silent past the node timeout, drained nodes, nodes silent since an
attempt there was lost (suspect) and the job's own ``placement.avoid_nodes``
are never chosen.

What a retry decision says to avoid (``RetryScheduled.avoid_nodes`` /
``avoid_providers``) is a preference, tried in tiers: first every node of
another provider; once the request's ``fallback_at`` has come and that found
nothing, another node of an avoided provider; then an avoided node itself. A
one-node fleet therefore retries on its one node, after the fallback wait.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from projections.fit import holds
from schemas.spec import JobSpec
from services.scheduler.fleet import Fleet, NodeState


@dataclass(frozen=True)
class PlacementRequest:
    """What one attempt needs and where it would rather (not) go."""

    job_id: str
    attempt: int
    gpus: int
    vram_gb: float = 0.0
    """Memory needed on each GPU, in GiB (from the pre-flight fit report)."""
    gpu_models: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    avoid_nodes: frozenset[str] = frozenset()
    """Nodes to avoid if anything else can hold the attempt (a retry decision's)."""
    avoid_providers: frozenset[str] = frozenset()
    """Providers to avoid if anything else can hold the attempt (a retry decision's)."""
    exclude_nodes: frozenset[str] = frozenset()
    """Nodes never chosen (the job's ``placement.avoid_nodes``)."""
    fallback_at: datetime | None = None
    """From then on the avoided providers, then nodes, may be used (None: never)."""

    @classmethod
    def for_spec(
        cls,
        job_id: str,
        attempt: int,
        spec: JobSpec,
        vram_gb: float,
        avoid_nodes: frozenset[str] = frozenset(),
        avoid_providers: frozenset[str] = frozenset(),
        fallback_at: datetime | None = None,
    ) -> PlacementRequest:
        """The request of one attempt of a job: its spec's needs, plus what a retry decision
        avoids."""
        return cls(
            job_id=job_id,
            attempt=attempt,
            gpus=spec.resources.gpus,
            vram_gb=vram_gb,
            gpu_models=tuple(spec.resources.gpu_models),
            providers=tuple(spec.placement.providers),
            regions=tuple(spec.placement.regions),
            avoid_nodes=avoid_nodes,
            avoid_providers=avoid_providers,
            exclude_nodes=frozenset(spec.placement.avoid_nodes),
            fallback_at=fallback_at if avoid_nodes or avoid_providers else None,
        )

    @property
    def feasibility_key(self) -> tuple[object, ...]:
        """Requests with equal keys fit on exactly the same nodes at any time (preferences
        aside): the fallback time is part of it, since it widens the nodes allowed."""
        return (
            self.gpus,
            self.vram_gb,
            self.gpu_models,
            self.avoid_nodes,
            self.avoid_providers,
            self.exclude_nodes,
            self.fallback_at,
        )

    def tiers(self, now: datetime) -> list[tuple[str, frozenset[str], frozenset[str]]]:
        """(fell_back_to, nodes avoided, providers avoided) to try in order at ``now``."""
        hard = self.exclude_nodes
        strict = ("", hard | self.avoid_nodes, self.avoid_providers)
        if self.fallback_at is None or now < self.fallback_at:
            return [strict]
        out = [strict]
        if self.avoid_providers:
            out.append(("provider", hard | self.avoid_nodes, frozenset()))
        if self.avoid_nodes:
            out.append(("node", hard, frozenset()))
        return out


@dataclass(frozen=True)
class Placement:
    """Where an attempt goes: the node, its GPUs, and what the choice avoided or fell back to."""

    node_id: str
    provider: str
    region: str
    gpu_model: str
    gpu_indices: tuple[int, ...]
    fell_back_to: str = ""
    """"" (placed as preferred), "provider" or "node": see :meth:`PlacementRequest.tiers`."""


def _rank(prefs: tuple[str, ...], value: str) -> int:
    return prefs.index(value) if value in prefs else len(prefs)


def _eligible(
    node: NodeState, nodes: frozenset[str], providers: frozenset[str], heard_since: datetime
) -> bool:
    """Not avoided (in this tier), not drained, heard from at or after ``heard_since``
    (now - timeout) and not silent since an attempt on it was declared lost."""
    return (
        node.node_id not in nodes
        and node.provider not in providers
        and not node.drained
        and node.last_seen is not None
        and node.last_seen >= heard_since
        and not node.suspect
    )


def place(
    fleet: Fleet, request: PlacementRequest, now: datetime, node_timeout_s: float
) -> Placement | None:
    """The best node and GPU indices for ``request``, or None when nothing fits right now.

    Reads ``fleet`` without changing it; the caller reserves the result. The
    request's avoidances are tried in tiers (:meth:`PlacementRequest.tiers`).
    """
    heard_since = now - timedelta(seconds=node_timeout_s)  # live: heard from since then
    for fell_back_to, nodes, providers in request.tiers(now):
        if request.gpus == 0:
            found = _place_without_gpus(fleet, request, nodes, providers, heard_since)
        else:
            found = _place_gpus(fleet, request, nodes, providers, heard_since)
        if found is not None:
            return replace(found, fell_back_to=fell_back_to) if fell_back_to else found
    return None


def _place_gpus(
    fleet: Fleet,
    request: PlacementRequest,
    nodes: frozenset[str],
    providers: frozenset[str],
    heard_since: datetime,
) -> Placement | None:
    gpus, need, wanted = request.gpus, request.vram_gb, request.gpu_models
    for model in fleet.models_by_vram():
        buckets = fleet.buckets(model)
        # projections.fit.holds, the rule pre-flight applies, at each level: the model at
        # its largest memory, each free count at it, then each node at its own memory.
        best_vram = fleet.model_max_vram_gb[model]
        counts = sorted(c for c in buckets if holds(gpus, need, wanted, model, c, best_vram))
        best: tuple[tuple[int, int, int], NodeState] | None = None
        for count in counts:
            for node_id in buckets[count]:
                node = fleet.nodes[node_id]
                if not _eligible(node, nodes, providers, heard_since):
                    continue
                if not holds(gpus, need, wanted, model, count, node.vram_gb(model)):
                    continue
                key = (
                    _rank(request.providers, node.provider),
                    _rank(request.regions, node.region),
                    count,
                )
                if best is None or key < best[0]:
                    best = (key, node)
                if key[0] == 0 and key[1] == 0:
                    break  # buckets ascend by free count: nothing later can beat this one
            if best is not None and best[0][0] == 0 and best[0][1] == 0:
                break
        if best is not None:
            node = best[1]
            indices = tuple(fleet.free_indices(node.node_id, model)[: request.gpus])
            return Placement(node.node_id, node.provider, node.region, model, indices)
    return None


def _place_without_gpus(
    fleet: Fleet,
    request: PlacementRequest,
    nodes: frozenset[str],
    providers: frozenset[str],
    heard_since: datetime,
) -> Placement | None:
    """A CPU-only job: the preferred live node with the fewest free GPUs."""
    candidates = [
        (
            _rank(request.providers, n.provider),
            _rank(request.regions, n.region),
            len(fleet.free_indices(n.node_id)),
            n.node_id,
        )
        for n in fleet.nodes.values()
        if n.registered and _eligible(n, nodes, providers, heard_since)
    ]
    if not candidates:
        return None
    node = fleet.nodes[min(candidates)[3]]
    return Placement(node.node_id, node.provider, node.region, "", ())
