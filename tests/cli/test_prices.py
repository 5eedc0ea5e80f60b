"""Money on the real broker and Postgres: the price catalog on the ledger, usage priced by the
sink, a later version that leaves the past as it was (live and on ``replay --verify``), and
the exports (``-o parquet``, ``-o cloudevents``) read back.

The jobs run on 2026-11-30 (``tests.sink.scenario``); version 1 is appended as published
before them, with a price change at 10:00 that one job crosses. Version 2 is loaded the
operator's way (``gridledger prices load``, now), so its rows start after every job here
but one, which is appended to run in version 2's first hour.
"""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from cloudevents.core.formats.json import JSONFormat

from schemas.events import AttemptScheduled, Event, PriceCatalogPublished, PriceEntry
from services.clock import utcnow
from services.ledger import Ledger
from services.replay.verify import verify
from tests.api.conftest import Api
from tests.api.test_usage_export import every_page
from tests.cli.conftest import gridledger
from tests.sink.scenario import T0, node_facts, run_facts

pytestmark = pytest.mark.integration

MODEL = "A100-80GB"


def on_aws(job_id: str, start: float) -> list[Event]:
    """A job that holds one GPU for 30.5 s from ``start`` + 4 s, placed on aws/eu."""
    return [
        e.model_copy(update={"provider": "aws", "region": "eu"})
        if isinstance(e, AttemptScheduled)
        else e
        for e in run_facts(job_id, start=start, lines=0).all()
    ]


def version_1() -> PriceCatalogPublished:
    rows = [("3.6", T0 - timedelta(hours=1)), ("7.2", T0 + timedelta(hours=1))]
    return PriceCatalogPublished(
        event_id="catalog-v1",
        occurred_at=T0 - timedelta(hours=1),
        version=1,
        currency="EUR",
        entries=[
            PriceEntry(provider="aws", gpu_model=MODEL, per_gpu_hour=p, effective_from=t)
            for p, t in rows
        ],
    )


def hour_after(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


async def usage(api: Api, period: str = "hour") -> list[dict[str, Any]]:
    return await every_page(api, "/v1/usage", {"period": period, "by": "provider"}, "lines")


async def records(api: Api) -> dict[str, dict[str, Any]]:
    found = await every_page(api, "/v1/accounting", {"limit": 1000}, "records")
    return {r["job_id"]: r for r in found}


async def test_usage_is_priced_per_hour_and_a_later_version_never_changes_the_past(
    cli_env: Api,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = cli_env
    # `prices load` is the operator's: it reads the stack's settings, here the test's topics.
    monkeypatch.setenv("GRIDLEDGER_TOPIC_PREFIX", api.settings.topic_prefix)
    # job-a in the 09:00 hour (3.60/h); job-b from 09:59:54 to 10:00:24.5, across the change.
    await api.ledger.append_many(
        [
            *node_facts(),
            version_1(),
            *on_aws("job-00000000000a", 0),
            *on_aws("job-00000000000b", 3590),
        ]
    )
    await api.sink.catch_up()

    lines = await usage(api)
    assert [(line["period_start"][11:16], line["billable_cost"]) for line in lines] == [
        ("09:00", "0.036500000"),  # 30.5 s + 6 s at 3.60 per GPU-hour
        ("10:00", "0.049000000"),  # 24.5 s at 7.20
    ]
    assert all(line["currency"] == "EUR" and line["price_versions"] == [1] for line in lines)
    before = await records(api)
    assert before["job-00000000000b"]["billable_cost"] == "0.055000000"
    assert sum(r["billable_cost_nanos"] for r in before.values()) == sum(
        line["billable_cost_nanos"] for line in lines
    )
    for period in ("day", "month"):
        (whole,) = await usage(api, period)
        assert whole["billable_cost"] == "0.085500000" and whole["unpriced_gpu_us"] == 0
    one = await (
        await api.client.get("/v1/jobs/job-00000000000b/accounting", headers=api.auth())
    ).json()
    assert (one["billable_cost"], one["price_versions"], one["status"]) == (
        "0.055000000",
        [1],
        "succeeded",
    )

    # Version 2, the operator's way: its rows start at the next whole hour from now on.
    start = hour_after(utcnow())
    catalog = tmp_path / "prices.yaml"
    catalog.write_text(
        "version: 2\ncurrency: EUR\nprices:\n"
        f"  - {{provider: aws, gpu_model: {MODEL}, per_gpu_hour: '100', "
        f"effective_from: '{start.isoformat()}'}}\n"
    )
    assert await gridledger("prices", "load", str(catalog)) == 0
    assert "published version 2 (1 rows, EUR)" in capsys.readouterr().out
    # Loading it again, or a version that reaches back before now, is refused by name.
    assert await gridledger("prices", "load", str(catalog)) == 3
    assert "version: 2 is not above the latest version, 2" in capsys.readouterr().err
    past = hour_after(utcnow()) - timedelta(hours=2)
    catalog.write_text(
        catalog.read_text()
        .replace("version: 2", "version: 3")
        .replace(start.isoformat(), past.isoformat())
    )
    assert await gridledger("prices", "load", str(catalog)) == 3
    assert "prices[0].effective_from" in (err := capsys.readouterr().err)
    assert "a price change never changes a past period" in err
    # A forged version on the ledger that reaches back is refused by the fold itself.
    forged = version_1().model_copy(
        update={"event_id": "forged-v3", "version": 3, "occurred_at": T0 + timedelta(days=1)}
    )
    await api.ledger.append_many(
        [forged, *on_aws("job-00000000000c", (start - T0).total_seconds())]
    )
    await api.sink.catch_up()

    after = await usage(api)
    assert after[:2] == lines, "a later version changed a past hour"
    assert [line["price_versions"] for line in after[2:]] == [[2]]
    assert after[2]["billable_cost"] == "0.847222222"  # 30.5 s at 100 per GPU-hour
    assert {j: r for j, r in (await records(api)).items() if j in before} == before
    listing = await (await api.client.get("/v1/prices", headers=api.auth())).json()
    assert [(v["version"], v["accepted"]) for v in listing["versions"]] == [
        (1, True),
        (2, True),
        (3, False),
    ]
    assert listing["versions"][2]["problems"][0]["field"] == "prices[0].effective_from"
    assert await gridledger("prices", "show", "--at", "2026-11-30T10:30", "-o", "json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(p["per_gpu_hour"], p["version"]) for p in shown["prices"]] == [("7.200000", 1)]

    # No tenant can publish: the API has no route that writes prices.
    for method in ("POST", "PUT", "DELETE"):
        response = await api.client.request(method, "/v1/prices", headers=api.auth(), json={})
        assert response.status == 405

    # Replay rebuilds the same money from the ledger, whatever order it reads the topics in
    # (it applies every job before the prices topic). Decision drift is not asked for: these
    # are hand-made facts, not the deciders' own.
    assert isinstance(api.ledger, Ledger)  # replay reads the broker's batches
    report = await verify(api.settings, api.ledger, catch_up_s=5, workers=1)
    assert report.ok, report.lines()
    assert {"usage_lines", "accounting_records", "price_catalogs"} <= set(report.table_counts)
    assert not any(report.table_counts.values()), report.lines()


async def test_parquet_and_cloudevents_exports_read_back_as_the_json(
    cli_env: Api, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    api = cli_env
    running = run_facts("job-0000000000ff", start=7200, lines=0, finish=False).all()
    await api.ledger.append_many(
        [
            *node_facts(),
            version_1(),
            *on_aws("job-00000000000a", 0),
            *on_aws("job-00000000000b", 3590),
            *running,
        ]
    )
    await api.sink.catch_up()
    args = ("usage", "--period", "hour", "--by", "tenant,provider")
    assert await gridledger(*args, "-o", "json") == 0
    lines = json.loads(capsysbinary.readouterr().out)["lines"]
    assert len(lines) == 3 and not lines[2]["final"]

    assert await gridledger(*args, "-o", "parquet") == 0
    table = pq.read_table(io.BytesIO(capsysbinary.readouterr().out)).to_pylist()
    assert [r["line_id"] for r in table] == [line["line_id"] for line in lines]
    for row, line in zip(table, lines, strict=True):
        assert row["billable_cost"] == Decimal(line["billable_cost"])
        assert isinstance(row["billable_cost"], Decimal)
        assert (row["tenant"], row["provider"]) == tuple(line["group"].values())
        for column in ("billable_gpu_us", "credited_gpu_us", "unpriced_gpu_us", "jobs", "final"):
            assert row[column] == line[column]
        assert row["period_start"] == line["period_start"]

    exports = []
    for _ in range(2):
        assert await gridledger(*args, "-o", "cloudevents") == 0
        captured = capsysbinary.readouterr()
        exports.append(captured.out)
    assert exports[0] == exports[1], "a re-export is byte-identical, ids included"
    assert b"1 line(s) not final yet left out" in captured.err
    # Read back with the CloudEvents SDK, which checks the required attributes and types.
    events = [JSONFormat().read(None, text) for text in exports[0].splitlines()]
    assert [e.get_attributes()["id"] for e in events] == [line["line_id"] for line in lines[:2]]
    for ce, line in zip(events, lines[:2], strict=True):
        event = ce.get_attributes()
        assert (event["specversion"], event["type"], event["subject"]) == (
            "1.0",
            "gridledger.UsageLine",
            "dev",
        )
        assert event["time"] == datetime.fromisoformat(line["period_start"])
        data = ce.get_data()
        assert isinstance(data, dict)
        assert data["billable_cost"] == line["billable_cost"]
        assert Decimal(data["billable_gpu_seconds"]) * 10**6 == line["billable_gpu_us"]
