"""Which records differ from their seals, at which offsets (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.notary.findings import Finding, compare

SEALED = [(o, f"{o:064x}") for o in range(10)]


def kinds(findings: list[Finding]) -> list[tuple[str, int | None, int | None]]:
    return [(f.kind, f.sealed_offset, f.found_offset) for f in findings]


def renumbered(leaves: list[str]) -> list[tuple[int, str]]:
    """A topic rewritten with these leaves: the broker numbers them from 0 again."""
    return list(enumerate(leaves))


def test_an_untouched_partition_has_no_finding_and_its_tail_is_unsealed() -> None:
    tail = [(10, "a" * 64), (11, "b" * 64)]
    findings, unsealed = compare("job-events", 0, SEALED, SEALED + tail)
    assert findings == []
    assert unsealed is not None and (unsealed.first_offset, unsealed.count) == (10, 2)
    assert compare("job-events", 0, SEALED, SEALED) == ([], None)


def test_an_altered_a_deleted_and_a_swapped_record_are_each_found_where_sealed() -> None:
    leaves = [leaf for _, leaf in SEALED]
    leaves[2] = "e" * 64  # altered
    del leaves[5]  # deleted: everything after moves down one offset
    leaves[6], leaves[7] = leaves[7], leaves[6]  # sealed offsets 7 and 8, now at 6 and 7
    findings, unsealed = compare("job-events", 0, SEALED, renumbered(leaves))
    assert sorted(kinds(findings), key=str) == sorted(
        [("altered", 2, 2), ("deleted", 5, None), ("reordered", 7, 7), ("reordered", 8, 6)],
        key=str,
    )
    assert unsealed is None


def test_a_record_moved_far_is_reordered_with_the_ones_it_moved_past() -> None:
    leaves = [leaf for _, leaf in SEALED]
    leaves.insert(5, leaves.pop(1))  # sealed 1 now after sealed 2..5
    findings, _ = compare("job-events", 0, SEALED, renumbered(leaves))
    assert kinds(findings) == [
        ("reordered", 2, 1),
        ("reordered", 3, 2),
        ("reordered", 4, 3),
        ("reordered", 5, 4),
        ("reordered", 1, 5),
    ]


def test_inserted_records_and_a_deleted_tail() -> None:
    leaves = [leaf for _, leaf in SEALED][:8]
    leaves.insert(4, "f" * 64)
    findings, unsealed = compare("job-events", 0, SEALED, renumbered(leaves))
    assert kinds(findings) == [("inserted", None, 4), ("deleted", 8, None), ("deleted", 9, None)]
    assert unsealed is None


def test_records_deleted_from_the_start_keep_their_offsets() -> None:
    # Retention (or DeleteRecords) removes the oldest records; offsets stay as they were.
    findings, _ = compare("job-events", 0, SEALED, SEALED[3:])
    assert kinds(findings) == [("deleted", 0, None), ("deleted", 1, None), ("deleted", 2, None)]


def test_an_altered_last_record_and_new_records_after_it() -> None:
    leaves = [leaf for _, leaf in SEALED]
    leaves[9] = "e" * 64
    findings, unsealed = compare("job-events", 0, SEALED, renumbered([*leaves, "a" * 64]))
    assert kinds(findings) == [("altered", 9, 9)]
    assert unsealed is not None and (unsealed.first_offset, unsealed.count) == (10, 1)


def test_no_seal_at_all_leaves_everything_unsealed() -> None:
    findings, unsealed = compare("log-chunks", 1, [], SEALED)
    assert findings == []
    assert unsealed is not None and (unsealed.first_offset, unsealed.count) == (0, 10)


@st.composite
def tampering(draw: st.DrawFn) -> tuple[int, dict[int, str]]:
    """A sealed length and changes at least three records apart: sealed index -> what
    was done there (``swap`` swaps it with the next one)."""
    size = draw(st.integers(8, 60))
    starts = draw(st.sets(st.integers(0, size - 2), max_size=6))
    chosen: list[int] = []
    for start in sorted(starts):
        if not chosen or start - chosen[-1] >= 3:
            chosen.append(start)
    kinds = st.sampled_from(["altered", "deleted", "swap"])
    return size, {index: draw(kinds) for index in chosen}


@settings(max_examples=100, deadline=None)
@given(tampering(), st.integers(0, 3), st.integers(0, 1000))
def test_each_change_is_found_at_its_sealed_offset(
    case: tuple[int, dict[int, str]], appended: int, base: int
) -> None:
    size, changes = case
    sealed = [(base + n, f"{n:064x}") for n in range(size)]
    leaves = [leaf for _, leaf in sealed]
    rewritten: list[str] = []
    expected: set[tuple[str, int]] = set()
    skip = False
    for n, leaf in enumerate(leaves):
        if skip:
            skip = False
            continue
        change = changes.get(n)
        if change == "altered":
            rewritten.append("e" * 60 + f"{n:04x}")
            expected.add(("altered", base + n))
        elif change == "deleted":
            expected.add(("deleted", base + n))
        elif change == "swap":
            rewritten += [leaves[n + 1], leaf]
            expected |= {("reordered", base + n), ("reordered", base + n + 1)}
            skip = True
        else:
            rewritten.append(leaf)
    rewritten += ["a" * 60 + f"{n:04x}" for n in range(appended)]
    found = [(base + n, leaf) for n, leaf in enumerate(rewritten)]
    findings, unsealed = compare("job-events", 0, sealed, found)
    assert {(f.kind, f.sealed_offset) for f in findings} == expected
    assert len(findings) == len(expected)
    assert (unsealed.count if unsealed else 0) == appended
