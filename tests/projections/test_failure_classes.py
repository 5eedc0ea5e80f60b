"""The failure-class table is the single source: rules, the decider and the README agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from projections.classes import CLASSES, TABLE, row
from projections.failures import RULES
from projections.retry import DEFAULT_POLICY

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_classes() -> dict[str, tuple[str, str, str, str]]:
    """The README's failure-class table: class -> (evidence, side, retried, billed)."""
    text = README.read_text()
    section = text.split("## Failure classes", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, str, str]] = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(\w+)` \| (.*) \| (\w+) \| (.*) \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), m.group(5))
    return rows


def test_the_readme_lists_exactly_the_classes_of_the_table() -> None:
    assert list(readme_classes()) == [r.name for r in TABLE]


@pytest.mark.parametrize("cls", TABLE, ids=lambda r: r.name)
def test_the_readme_row_matches_the_table_row(cls: object) -> None:
    r = CLASSES[cls.name]  # type: ignore[attr-defined]
    evidence, side, retried, billed = readme_classes()[r.name]
    assert (evidence, side, retried, billed) == (r.evidence, r.side, r.retried(), r.billed())


def test_every_rule_names_a_class_of_the_table_on_an_allowed_side() -> None:
    for rule in RULES:
        r = CLASSES[rule.failure_class]
        # A rule may only move a class to the platform side where the row says it can.
        assert rule.attribution == r.side or (r.platform_cause and rule.attribution == "platform")


def test_the_decider_reads_the_table() -> None:
    assert DEFAULT_POLICY.classes == dict(CLASSES)
    assert [n for n, r in CLASSES.items() if r.opt_in] == [
        "gpu_out_of_memory",
        "host_out_of_memory",
        "user_process_error",
    ]
    assert {n: r.limit for n, r in CLASSES.items() if r.limit is not None} == {"unknown": 1}
    for r in TABLE:
        assert bool(r.avoid) == (r.retryable or r.platform_cause), r.name
        assert bool(r.avoid_why) == bool(r.avoid), r.name


def test_an_unknown_class_is_treated_like_unknown() -> None:
    r = row("a_class_from_a_newer_classifier")
    assert r.retryable and r.limit == 1 and r.side == "platform"
