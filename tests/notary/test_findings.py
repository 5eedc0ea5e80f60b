"""Which records differ from their seals, at which offsets (pure)."""

from __future__ import annotations

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


def test_a_record_moved_far_is_the_one_reordered() -> None:
    leaves = [leaf for _, leaf in SEALED]
    leaves.insert(8, leaves.pop(1))
    findings, _ = compare("job-events", 0, SEALED, renumbered(leaves))
    assert kinds(findings) == [("reordered", 1, 8)]


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
