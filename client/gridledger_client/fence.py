"""The leader fence: which scheduler decisions on ``job-events`` a reader applies.

The one copy of the rule. The server's readers apply it through
``projections.fence`` (its events as models); a subscriber's code can apply it to the
records it reads (their fields as dicts), which :class:`~gridledger_client.Subscriber`
does not yet do itself. It lives here because the server depends on this distribution
and this one on nothing of the server.

Two schedulers may run; one leads. A new leader appends a ``LeaderElected`` marker with
its ``epoch`` to every partition of ``job-events`` before it decides anything, and stamps
its epoch on every decision (the records with a ``leader_epoch`` field: JobRejected,
JobQueued, AttemptScheduled, NoCapacity). A reader judges a decision at ``offset`` of a
partition against the highest epoch announced *before* that offset in the same
partition: an older epoch means its leader was deposed before the decision reached the
log, and the decision is dropped, by every reader alike, since the answer depends only
on the partition's order, never on when it is read.

The fence remembers each marker's offset, so a record read again (a redelivery, a
rebuild that read past it) is judged as of its own offset, not as of what was read
since. Markers themselves are no job's events: :meth:`Fence.judge` folds them and
returns False.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

MARKER = "LeaderElected"
"""The record type of a fence marker; its ``epoch`` field is the epoch it announces."""
EPOCH_FIELD = "leader_epoch"
"""The field every scheduler decision carries, and only they: the deciding leader's epoch."""


@dataclass
class _Partition:
    offsets: list[int] = field(default_factory=list)
    """Offsets of the markers that raised the epoch, ascending."""
    epochs: list[int] = field(default_factory=list)
    """The epoch in force from the marker at the same index on (ascending too)."""

    def epoch_before(self, offset: int) -> int:
        at = bisect.bisect_left(self.offsets, offset)
        return self.epochs[at - 1] if at else 0

    def mark(self, offset: int, epoch: int) -> bool:
        if epoch <= self.epoch_before(offset) or offset in self.offsets:
            return False
        at = bisect.bisect_left(self.offsets, offset)
        self.offsets.insert(at, offset)
        self.epochs.insert(at, epoch)
        # A later marker of a lower epoch no longer raises anything.
        keep = [i for i in range(len(self.offsets)) if i <= at or self.epochs[i] > epoch]
        self.offsets = [self.offsets[i] for i in keep]
        self.epochs = [self.epochs[i] for i in keep]
        return True


class Fence:
    """Per partition of ``job-events``: the leader epochs announced, by offset."""

    def __init__(self, marks: Iterable[tuple[int, int, int]] = ()) -> None:
        self._partitions: dict[int, _Partition] = {}
        for partition, offset, epoch in marks:
            self.mark(partition, offset, epoch)

    def mark(self, partition: int, offset: int, epoch: int) -> bool:
        """Note a marker; True when it raised the epoch in force from ``offset`` on."""
        return self._partitions.setdefault(partition, _Partition()).mark(offset, epoch)

    def epoch(self, partition: int, offset: int) -> int:
        """The epoch in force at ``offset`` (0 before any marker)."""
        found = self._partitions.get(partition)
        return found.epoch_before(offset) if found is not None else 0

    def latest(self) -> int:
        """The highest epoch announced on any partition."""
        return max((p.epochs[-1] for p in self._partitions.values() if p.epochs), default=0)

    def judge(self, partition: int, offset: int, marks: int | None, decided: int | None) -> bool:
        """Whether a reader applies the record read at ``offset`` of ``partition``.

        ``marks``: the epoch the record announces when it is a marker (it is folded, never
        applied); ``decided``: the leader epoch of a scheduler decision, dropped when older
        than the epoch in force there; a record that is neither is applied.
        """
        if marks is not None:
            self.mark(partition, offset, marks)
            return False
        if decided is not None:
            return decided >= self.epoch(partition, offset)
        return True

    def marks(self) -> list[tuple[int, int, int]]:
        """(partition, offset, epoch) of every marker that raised the epoch, to store."""
        return [
            (partition, offset, epoch)
            for partition, p in sorted(self._partitions.items())
            for offset, epoch in zip(p.offsets, p.epochs, strict=True)
        ]
