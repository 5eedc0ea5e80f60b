"""The placement queue, organised so a pass costs per *kind* of request, not per job.

Queued jobs are grouped by :attr:`PlacementRequest.feasibility_key`: jobs with
equal keys fit on exactly the same nodes, so when the head of a group cannot be
placed, nobody behind it can be either. A placement pass walks the groups in
the order of their heads (global FIFO between kinds), places heads while they
fit and drops a group for the rest of the pass at its first miss. With 10,000
queued jobs of a few dozen kinds and a full fleet, a pass is a few dozen
``place`` calls.

Queue deadlines and ``not_before`` times are heaps, cleaned lazily: an entry
is valid while the job is still queued under the same sequence number.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.scheduler.placement import PlacementRequest

Key = tuple[object, ...]


@dataclass
class _Member:
    seq: int
    deadline: datetime
    not_before: datetime | None
    request: PlacementRequest | None = None
    group: Key | None = None
    """Set while the job is placeable (fit known, not_before passed)."""


class PlacementQueue:
    """Jobs waiting for placement; see the module docstring."""

    def __init__(self) -> None:
        self._members: dict[str, _Member] = {}
        self._groups: dict[Key, dict[str, None]] = {}
        self._deadlines: list[tuple[datetime, int, str]] = []
        self._delayed: list[tuple[datetime, int, str]] = []
        self._unfitted: dict[str, None] = {}
        self._counter = 0

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[str]:
        """Job ids in queue order."""
        return iter(sorted(self._members, key=lambda j: self._members[j].seq))

    def add(
        self,
        job_id: str,
        deadline: datetime,
        not_before: datetime | None,
        request: PlacementRequest | None,
    ) -> None:
        """Queue a job; ``request`` None means its fit is not known yet (see :meth:`unfitted`)."""
        self.remove(job_id)
        self._counter += 1
        member = _Member(self._counter, deadline, not_before, request)
        self._members[job_id] = member
        heapq.heappush(self._deadlines, (deadline, member.seq, job_id))
        if not_before is not None:
            heapq.heappush(self._delayed, (not_before, member.seq, job_id))
        elif request is None:
            self._unfitted[job_id] = None
        else:
            self._group(job_id, member)

    def remove(self, job_id: str) -> None:
        """Take the job out of the queue (placed, or no longer waiting)."""
        member = self._members.pop(job_id, None)
        if member is None:
            return
        self._unfitted.pop(job_id, None)
        if member.group is not None:
            group = self._groups[member.group]
            group.pop(job_id, None)
            if not group:
                del self._groups[member.group]

    def _group(self, job_id: str, member: _Member) -> None:
        assert member.request is not None
        member.group = member.request.feasibility_key
        self._groups.setdefault(member.group, {})[job_id] = None

    def _valid(self, seq: int, job_id: str) -> _Member | None:
        member = self._members.get(job_id)
        return member if member is not None and member.seq == seq else None

    def expired(self, now: datetime) -> list[str]:
        """Jobs whose queue deadline is at or before ``now`` (still queued), earliest first."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq, job_id = heapq.heappop(self._deadlines)
            if self._valid(seq, job_id):
                out.append(job_id)
        return out

    def release_due(self, now: datetime) -> None:
        """Make jobs whose ``not_before`` has come placeable."""
        while self._delayed and self._delayed[0][0] <= now:
            _, seq, job_id = heapq.heappop(self._delayed)
            member = self._valid(seq, job_id)
            if member is None:
                continue
            member.not_before = None
            if member.request is None:
                self._unfitted[job_id] = None
            else:
                self._group(job_id, member)

    def unfitted(self) -> list[str]:
        """Placeable jobs still waiting for a fit check (queued while the fleet was empty)."""
        return list(self._unfitted)

    def fitted(self, job_id: str, request: PlacementRequest) -> None:
        """Record the job's placement request, now that its fit is known; it joins its group's
        queue."""
        member = self._members[job_id]
        member.request = request
        self._unfitted.pop(job_id, None)
        self._group(job_id, member)

    def request_of(self, job_id: str) -> PlacementRequest | None:
        """The job's placement request, or None before its fit is known."""
        member = self._members.get(job_id)
        return member.request if member else None

    def heads(self) -> Iterator[str]:
        """Placeable jobs, head of each kind first in queue order.

        The caller must :meth:`remove` a yielded job it placed, and call
        :meth:`skip` with the job when it could not be placed: the rest of its
        kind is then skipped for this pass.
        """
        heap = [(self._members[next(iter(g))].seq, key) for key, g in self._groups.items() if g]
        heapq.heapify(heap)
        self._skipped: set[Key] = set()
        while heap:
            _, key = heapq.heappop(heap)
            group = self._groups.get(key)
            if not group:
                continue
            job_id = next(iter(group))
            yield job_id
            if key in self._skipped:
                continue
            group = self._groups.get(key)
            if group:
                head = next(iter(group))
                if head != job_id:
                    heapq.heappush(heap, (self._members[head].seq, key))

    def skip(self, job_id: str) -> None:
        """Nothing can hold the job now: the rest of its kind is skipped for this pass."""
        member = self._members.get(job_id)
        if member is not None and member.group is not None:
            self._skipped.add(member.group)

    # ----------------------------------------------------------------------- snapshot

    def rows(self) -> dict[str, Any]:
        """The queue as JSON-able rows (:mod:`.snapshot`): members, groups and unfitted jobs
        in their order; a member's request is rebuilt from its job on restore."""
        return {
            "members": [
                [
                    j,
                    m.seq,
                    m.deadline.isoformat(),
                    m.not_before.isoformat() if m.not_before is not None else None,
                    m.request is not None,
                ]
                for j, m in self._members.items()
            ],
            "groups": [list(g) for g in self._groups.values()],
            "unfitted": list(self._unfitted),
            "counter": self._counter,
        }

    @classmethod
    def from_rows(
        cls, rows: dict[str, Any], request_of: Callable[[str], PlacementRequest]
    ) -> PlacementQueue:
        """The queue :meth:`rows` wrote. Its heaps hold the valid entries only (a live
        queue's also hold stale ones, which every pop skips): it pops the same jobs."""
        queue = cls()
        for job_id, seq, deadline, not_before, has_request in rows["members"]:
            due = datetime.fromisoformat(deadline)
            delay = datetime.fromisoformat(not_before) if not_before is not None else None
            request = request_of(job_id) if has_request else None
            queue._members[job_id] = _Member(seq, due, delay, request)
            queue._deadlines.append((due, seq, job_id))
            if delay is not None:
                queue._delayed.append((delay, seq, job_id))
        for group in rows["groups"]:
            for job_id in group:
                queue._group(job_id, queue._members[job_id])
        queue._unfitted = dict.fromkeys(rows["unfitted"])
        queue._counter = rows["counter"]
        heapq.heapify(queue._deadlines)
        heapq.heapify(queue._delayed)
        return queue
