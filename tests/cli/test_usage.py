"""``gridledger usage``: usage lines by period and group, every record, CSV, errors."""

from __future__ import annotations

import csv
import io

import pytest

from tests.api.conftest import Api
from tests.api.test_usage_export import HELD_US, labelled
from tests.cli.conftest import gridledger
from tests.sink.scenario import node_facts

pytestmark = pytest.mark.integration


async def test_usage_by_period_and_label_as_csv_and_table(
    cli_env: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    # Three jobs: two of project llm (i even), one of vision.
    jobs = [labelled(f"job-{i:012x}", i, "dev") for i in (0, 1, 2)]
    await api.ledger.append_many([*node_facts(), *(e for j in jobs for e in j)])
    await api.sink.catch_up()

    assert await gridledger("usage", "--period", "hour", "--by", "label:project", "-o", "csv") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == [
        "line_id",
        "period",
        "period_start",
        "period_end",
        "label:project",
        "jobs",
        "held_us",
        "gpu_us",
        "metered_gpu_us",
        "billable_gpu_us",
        "credited_gpu_us",
        "currency",
        "billable_cost",
        "credited_cost",
        "unpriced_gpu_us",
        "price_versions",
        "final",
    ]
    assert {r["label:project"]: int(r["billable_gpu_us"]) for r in rows} == {
        "llm": 2 * HELD_US,
        "vision": HELD_US,
    }
    assert await gridledger("usage", "--period", "month") == 0
    out = capsys.readouterr().out
    assert "PERIOD (UTC)" in out and "2026-11" in out
    assert f"total: {3 * HELD_US // 10**6}.{3 * HELD_US % 10**6:06d} GPU-seconds" in out

    assert await gridledger("usage", "--records", "-o", "csv") == 0
    records = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(records) == 3 and {r["labels"] for r in records} == {
        '{"project": "llm"}',
        '{"project": "vision"}',
    }


async def test_a_window_off_the_period_says_what_to_use(
    cli_env: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await gridledger("usage", "--period", "day", "--since", "2026-11-30T09:30")
    assert code != 0
    err = capsys.readouterr().err
    assert "since" in err and "is not the start of a UTC day" in err
    assert "2026-11-30T00:00:00+00:00" in err
