"""Which records differ from what the seals recorded: the verifier's pure core.

Pure (listed in tests/test_import_rule.py). The input is, for one partition, the
(offset, leaf) pairs the chained seals recorded and the (offset, leaf) pairs the topic
holds now; the output names each record that was altered, deleted, reordered or
inserted after sealing, at the offset the seal gave it and the offset where it is now,
and the records no seal covers yet.

Leaves carry no offset (services/notary/chain.py), so a topic rewritten without one
record still lines up with its seals: the two sequences of leaves are aligned
(difflib's longest matching blocks), a sealed leaf found elsewhere is a moved record,
an unmatched sealed record facing an unmatched record is an altered one, an unmatched
sealed one alone is deleted.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

Kind = Literal["altered", "deleted", "reordered", "inserted"]

ADVICE: dict[Kind, str] = {
    "altered": "its bytes differ from the sealed record",
    "deleted": "the sealed record is no longer in the topic",
    "reordered": "the sealed record is there, in another place",
    "inserted": "a record no seal covers, between sealed ones",
}
"""What each kind of finding means, in the words of the report."""


@dataclass(frozen=True)
class Finding:
    """One record that is not as sealed."""

    kind: Kind
    topic: str
    partition: int
    sealed_offset: int | None
    """The offset the seal recorded for it (None: inserted, no seal knows it)."""
    found_offset: int | None
    """Where it is in the topic now (None: deleted)."""

    def line(self) -> str:
        """``job-events/2 offset 7: deleted (the sealed record is no longer in the topic)``."""
        where = f"{self.topic}/{self.partition}"
        sealed = f"offset {self.sealed_offset}" if self.sealed_offset is not None else "no seal"
        found = "" if self.found_offset is None else f", now at offset {self.found_offset}"
        if self.sealed_offset is None:
            sealed = f"offset {self.found_offset}"
            found = ""
        return f"{where} {sealed}: {self.kind}{found} ({ADVICE[self.kind]})"


@dataclass(frozen=True)
class Unsealed:
    """Records after the last seal of a partition: nothing proves them yet."""

    topic: str
    partition: int
    first_offset: int
    count: int


Pair = tuple[int, str]


def compare(
    topic: str, partition: int, sealed: Sequence[Pair], found: Sequence[Pair]
) -> tuple[list[Finding], Unsealed | None]:
    """The findings of one partition, in topic order, and its unsealed tail."""
    if [leaf for _, leaf in found[: len(sealed)]] == [leaf for _, leaf in sealed] and [
        offset for offset, _ in found[: len(sealed)]
    ] == [offset for offset, _ in sealed]:
        return [], _tail(topic, partition, found[len(sealed) :])  # the common case: untouched
    sealed_leaves = [leaf for _, leaf in sealed]
    found_leaves = [leaf for _, leaf in found]
    matcher = SequenceMatcher(None, sealed_leaves, found_leaves, autojunk=False)
    of_found: list[int | None] = [None] * len(found)
    of_sealed: list[int | None] = [None] * len(sealed)
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            of_found[b + k], of_sealed[a + k] = a + k, b + k
    # A sealed record that did not line up but is in the topic elsewhere moved there.
    unplaced: dict[str, deque[int]] = defaultdict(deque)
    for j, i in enumerate(of_found):
        if i is None:
            unplaced[found_leaves[j]].append(j)
    moved: set[int] = set()
    for i, placed in enumerate(of_sealed):
        if placed is None and unplaced[sealed_leaves[i]]:
            j = unplaced[sealed_leaves[i]].popleft()
            of_found[j], of_sealed[i] = i, j
            moved.add(j)
    findings: list[Finding] = []
    altered: set[int] = set()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        lost = [i for i in range(i1, i2) if of_sealed[i] is None]
        new = [j for j in range(j1, j2) if of_found[j] is None]
        for i, j in zip(lost, new, strict=False):
            findings.append(Finding("altered", topic, partition, sealed[i][0], found[j][0]))
            altered.add(j)
        findings += [
            Finding("deleted", topic, partition, sealed[i][0], None) for i in lost[len(new) :]
        ]
    placed_before = [0]
    for place in of_sealed:
        placed_before.append(placed_before[-1] + (place is not None))
    findings += [
        Finding("reordered", topic, partition, sealed[i][0], found[j][0])
        for j, i in enumerate(of_found)
        if i is not None and (j in moved or _out_of_place(of_found, placed_before, j, i))
    ]
    accounted = [j for j, i in enumerate(of_found) if i is not None] + sorted(altered)
    last = max(accounted, default=-1)
    findings += [
        Finding("inserted", topic, partition, None, found[j][0])
        for j in range(last)
        if of_found[j] is None and j not in altered
    ]
    findings.sort(key=_topic_order)
    tail = [pair for j, pair in enumerate(found) if j > last]
    return findings, _tail(topic, partition, tail)


def _out_of_place(of_found: list[int | None], placed_before: list[int], j: int, i: int) -> bool:
    """Whether the record at ``j`` (sealed as the ``i``-th) follows neither the sealed
    record before it nor precedes the one after it. Sealed records that are gone
    (deleted, altered) between them do not count, nor does a neighbour that is no sealed
    record: a deletion or an alteration beside a record does not make it look moved.
    ``placed_before[k]``: how many of the first ``k`` sealed records are in the topic."""

    def adjacent(low: int, high: int) -> bool:
        return low < high and placed_before[high] - placed_before[low + 1] == 0

    before = of_found[j - 1] if j > 0 else None
    after = of_found[j + 1] if j + 1 < len(of_found) else None
    return (before is not None and not adjacent(before, i)) and (
        after is not None and not adjacent(i, after)
    )


def _topic_order(finding: Finding) -> tuple[int, int]:
    offset = finding.found_offset if finding.found_offset is not None else finding.sealed_offset
    return (offset or 0, 0 if finding.kind == "deleted" else 1)


def _tail(topic: str, partition: int, tail: Sequence[Pair]) -> Unsealed | None:
    return Unsealed(topic, partition, tail[0][0], len(tail)) if tail else None
