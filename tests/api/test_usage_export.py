"""Billing exports on the real broker and Postgres, with the sink in-process.

2,500 jobs (more than the 1,000 a page holds) are appended as the agent and the
processors would write them, spread over two UTC days with labels, and folded by the
sink's real path. ``GET /v1/accounting`` and ``GET /v1/usage`` page over all of them;
the lines sum exactly to the accounting records, every period adds up to the same
total, and a re-export is byte-identical with the same line ids.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest

from schemas.events import AttemptScheduled, Event, JobSubmitted
from services.api import queries
from services.api import usage as usage_api
from tests.api.conftest import OTHER_TOKEN, Api
from tests.sink.scenario import SPEC, node_facts, run_facts

pytestmark = pytest.mark.integration

JOBS = 2_500
HELD_US = 30_500_000
"""Each job holds its GPU from ComputeHeld to ComputeReleased: 30.5 s (3 ticks: 30 s)."""
SPACING_S = 67.0
"""2,500 jobs 67 s apart: about 46 hours from T0 (09:00), across two midnights."""


def labelled(job_id: str, i: int, tenant: str) -> list[Event]:
    """A job that runs once (30.5 s held, 3 ticks of 10 s), with labels and a place of its own."""
    spec = SPEC.model_copy(update={"labels": {"project": ("llm", "vision")[i % 2]}})
    events = run_facts(job_id, start=i * SPACING_S, lines=0, tenant=tenant).all()
    out: list[Event] = []
    for e in events:
        if isinstance(e, JobSubmitted):
            e = e.model_copy(update={"spec": spec})
        elif isinstance(e, AttemptScheduled):
            e = e.model_copy(update={"spec": spec, "provider": ("aws", "gcp")[i % 3 == 0]})
        out.append(e)
    return out


async def every_page(api: Api, path: str, params: dict[str, Any], items: str) -> list[Any]:
    out: list[Any] = []
    query = dict(params)
    while True:
        response = await api.client.get(
            f"{path}?{urlencode(query, doseq=True)}", headers=api.auth()
        )
        assert response.status == 200, await response.text()
        page = await response.json()
        assert page["count"] == len(page[items]) <= query.get("limit", 1000)
        out += page[items]
        if page["next_cursor"] is None:
            return out
        query["cursor"] = page["next_cursor"]


async def problems(api: Api, path: str, status: int = 422) -> dict[str, str]:
    response = await api.client.get(path, headers=api.auth())
    assert response.status == status, await response.text()
    return {p["field"]: p["problem"] for p in (await response.json())["problems"]}


def us(seconds: float) -> int:
    return round(seconds * 1e6)


async def test_exports_of_2500_jobs_page_completely_and_sum_exactly(api: Api) -> None:
    started = time.monotonic()
    facts: list[Event] = [*node_facts()]
    for i in range(JOBS):
        facts += labelled(f"job-{i:012x}", i, "dev")
    facts += labelled("job-0ther0000001", 7, "other")  # another tenant's: never in dev's
    await api.ledger.append_many(facts)
    await api.sink.catch_up(timeout=300)
    loaded = time.monotonic() - started

    records = await every_page(api, "/v1/accounting", {"limit": 1000}, "records")
    assert len(records) == len({r["job_id"] for r in records}) == JOBS
    assert all(r["final"] and r["labels"]["project"] in ("llm", "vision") for r in records)
    billable = sum(us(r["billable_gpu_seconds"]) for r in records)
    assert billable == JOBS * HELD_US

    exports: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for period in ("hour", "day", "month"):
        for by in ("", "label:project,provider"):
            lines = await every_page(
                api, "/v1/usage", {"period": period, "by": by, "limit": 1000}, "lines"
            )
            exports[(period, by)] = lines
            assert sum(line["billable_gpu_us"] for line in lines) == billable
            assert sum(line["gpu_us"] for line in lines) == billable
            assert sum(line["credited_gpu_us"] for line in lines) == 0
            assert sum(line["metered_gpu_us"] for line in lines) == JOBS * 30_000_000
            assert len({line["line_id"] for line in lines}) == len(lines)
            keys = [(line["period_start"], *line["group"].values()) for line in lines]
            assert keys == sorted(keys), "ordered by period, then group"
    assert len(exports[("day", "")]) == 3 and len(exports[("month", "")]) == 2  # T0: Nov 30
    assert len(exports[("hour", "")]) == 47  # 09:00 on day 1 to 07:00 on day 3
    # Pages of 7 lines give the lines of one page of 1,000, byte for byte.
    again = await every_page(
        api, "/v1/usage", {"period": "hour", "by": "label:project,provider", "limit": 7}, "lines"
    )
    assert json.dumps(again) == json.dumps(exports[("hour", "label:project,provider")])
    by_project: dict[str, int] = {}
    for line in exports[("month", "label:project,provider")]:
        project = line["group"]["label:project"]
        by_project[project] = by_project.get(project, 0) + line["billable_gpu_us"]
    assert by_project == {"llm": (JOBS // 2) * HELD_US, "vision": (JOBS // 2) * HELD_US}

    # A window selects whole periods; its lines are the same lines, ids included.
    day2 = exports[("day", "")][1]
    window = await every_page(
        api,
        "/v1/usage",
        {"period": "hour", "since": day2["period_start"], "until": day2["period_end"]},
        "lines",
    )
    assert len(window) == 24
    assert sum(line["billable_gpu_us"] for line in window) == day2["billable_gpu_us"]
    other = await (await api.client.get("/v1/usage", headers=api.auth(OTHER_TOKEN))).json()
    assert [line["billable_gpu_us"] for line in other["lines"]] == [HELD_US]
    print(
        f"\n{JOBS} jobs: loaded through the sink in {loaded:.1f} s, exported in "
        f"{time.monotonic() - started - loaded:.1f} s"
    )


async def test_bad_usage_queries_name_the_field_and_the_rule(api: Api) -> None:
    assert "not a dimension" in (await problems(api, "/v1/usage?by=colour"))["by"]
    assert "label key" in (await problems(api, "/v1/usage?by=label:Cost%20Centre"))["by"]
    found = await problems(api, "/v1/usage?period=day&since=2026-12-01T05:00:00Z")
    assert found["since"] == "2026-12-01T05:00:00+00:00 is not the start of a UTC day"
    found = await problems(api, "/v1/usage?period=hour&since=2026-12-01T05:00:00")
    assert "since" in found  # a time without a zone is refused, never guessed
    found = await problems(api, "/v1/usage?since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z")
    assert found["until"] == "is not after since"
    assert "cursor" in await problems(api, "/v1/usage?cursor=not-a-cursor", 400)
    assert "colour" in await problems(api, "/v1/usage?colour=blue")
    forged = base64.urlsafe_b64encode(b'["usage:0000", ["x"]]').decode()
    assert "another query" in (await problems(api, f"/v1/usage?cursor={forged}", 400))["cursor"]
    scope = usage_api.scope("day", ("provider",), None, None)
    for key in (["2026-12-01T00:00:00+00:00", "a\x00"], ["2026-12-01T00:00:00", "aws"]):
        nul = queries.encode_token(scope, key)
        assert "cursor" in await problems(api, f"/v1/usage?by=provider&cursor={nul}", 400)
    assert "cursor" in await problems(api, "/v1/accounting?cursor=AAAA", 400)
    assert "limit" in await problems(api, "/v1/accounting?limit=5001")
