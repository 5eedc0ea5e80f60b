"""The mutation report's seeded sample stays killed (bench/mutation.py, bench/results/mutation.md).

The full mutmut run over the pure core takes hours on two cores and stays out of CI; this
re-applies the report's fixed sample of mutants, each to a scratch copy, runs the tests that
cover it and fails when one survives or no longer applies to the code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import mutation
from tests.test_import_rule import PURE_SERVICE_MODULES


def test_mutmut_mutates_the_modules_the_purity_rule_guards() -> None:
    modules = set(mutation.pure_modules())
    projections = {
        str(p.relative_to(mutation.ROOT))
        for p in (mutation.ROOT / "projections").glob("*.py")
        if p.name != "__init__.py"
    }
    assert modules == projections | set(PURE_SERVICE_MODULES)


def test_the_run_order_names_every_module_once() -> None:
    assert sorted(mutation.ORDER) == sorted(set(mutation.ORDER)) == sorted(mutation.pure_modules())


def test_the_report_counts_every_module() -> None:
    report = json.loads(mutation.REPORT_JSON.read_text())
    assert report["sample"], "the report has no sample to re-run"
    for module, counts in report["modules"].items():
        verdicts = sum(v for k, v in counts.items() if k != "mutants")
        assert verdicts == counts["mutants"], module


@pytest.mark.xfail(
    strict=True,
    reason="not met yet: 8.8 % of the non-equivalent mutants run survive "
    "(bench/results/mutation.md lists them); strict, so meeting it fails this until "
    "the mark is removed",
)
def test_the_report_keeps_the_goal() -> None:
    report = json.loads(mutation.REPORT_JSON.read_text())
    assert report["survival_rate_non_equivalent"] <= 0.05


def test_a_sampled_mutant_that_survives_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check itself can fail: a "mutant" that changes nothing survives every test.
    sample = json.loads(mutation.REPORT_JSON.read_text())["sample"][0]
    harmless = {**sample, "replace": sample["find"], "tests": sample["tests"][:1]}
    report = tmp_path / "mutation.json"
    report.write_text(json.dumps({"sample": [harmless]}))
    monkeypatch.setattr(mutation, "REPORT_JSON", report)
    assert mutation.sample(timeout_s=120) == 1


def test_every_sampled_mutant_is_killed(capsys: pytest.CaptureFixture[str]) -> None:
    code = mutation.sample(timeout_s=120)
    assert code == 0, capsys.readouterr().out
