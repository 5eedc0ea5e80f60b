"""The fleet as the pure fit check sees it (``projections.fit``), with a cache.

Pre-flight runs for every submission against every node; at fleet scale
(1,000 nodes, 10,000 queued jobs) that is the scheduler's hottest path, so
reports are cached per fit-relevant part of the spec and per inventory
version of the fleet (bumped on registration and drain only).
"""

from __future__ import annotations

from projections.fit import NodeCapacity, check_fit
from schemas.spec import JobSpec
from schemas.types import FitReport
from services.scheduler.fleet import Fleet


def capacities(fleet: Fleet) -> list[NodeCapacity]:
    """Every registered, not drained node, live or not: what the job could *ever* run on."""
    return [
        NodeCapacity(
            node_id=n.node_id, provider=n.provider, region=n.region, gpus=list(n.gpus.values())
        )
        for n in fleet.usable_nodes()
    ]


class FitChecker:
    """``projections.fit.check_fit`` against the fleet; None when no node is registered yet."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._version = -1
        self._nodes: list[NodeCapacity] = []
        self._reports: dict[tuple[str, str], FitReport] = {}

    def __call__(self, spec: JobSpec, fleet: Fleet) -> FitReport | None:
        """The fit report of ``spec`` against the fleet, cached until the fleet's inventory
        changes."""
        if fleet.inventory_version != self._version:
            self._version = fleet.inventory_version
            self._nodes = capacities(fleet)
            self._reports.clear()
        if not self._nodes:
            return None
        key = (
            spec.resources.model_dump_json(),
            spec.model.model_dump_json() if spec.model else "",
        )
        report = self._reports.get(key)
        if report is None:
            if len(self._reports) >= self.max_entries:
                self._reports.clear()
            report = self._reports[key] = check_fit(spec, self._nodes)
        return report


def check_fit_against(spec: JobSpec, fleet: Fleet) -> FitReport | None:
    """Uncached :class:`FitChecker` call, for tests and one-off checks."""
    return FitChecker()(spec, fleet)
