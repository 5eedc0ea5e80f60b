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
    "reordered": "the sealed record is there, in another order against other sealed ones",
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
    for i, placed in enumerate(of_sealed):
        if placed is None and unplaced[sealed_leaves[i]]:
            j = unplaced[sealed_leaves[i]].popleft()
            of_found[j], of_sealed[i] = i, j
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
    findings += [
        Finding("reordered", topic, partition, sealed[i][0], found[j][0])
        for j, i in _out_of_order(of_found)
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


def _out_of_order(of_found: list[int | None]) -> list[tuple[int, int]]:
    """(position, sealed index) of each sealed record now before one that was sealed
    before it, or after one sealed after it: both records of a swap, and a record moved
    far together with the ones it moved past. Deleted, altered and inserted records
    around it do not count."""
    placed = [(j, i) for j, i in enumerate(of_found) if i is not None]
    highest_before: list[int] = []
    highest = -1
    for _, i in placed:
        highest_before.append(highest)
        highest = max(highest, i)
    lowest_after: list[int] = []
    lowest = len(of_found) + len(placed) + 1
    for _, i in reversed(placed):
        lowest_after.append(lowest)
        lowest = min(lowest, i)
    lowest_after.reverse()
    return [
        (j, i)
        for (j, i), high, low in zip(placed, highest_before, lowest_after, strict=True)
        if not high < i < low
    ]


def _topic_order(finding: Finding) -> tuple[int, int]:
    offset = finding.found_offset if finding.found_offset is not None else finding.sealed_offset
    return (offset or 0, 0 if finding.kind == "deleted" else 1)


def _tail(topic: str, partition: int, tail: Sequence[Pair]) -> Unsealed | None:
    return Unsealed(topic, partition, tail[0][0], len(tail)) if tail else None
