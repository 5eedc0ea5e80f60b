"""GET /v1/jobs pages on the key it orders by, so no page skips or repeats a job."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from schemas.events import JobQueued
from tests.api.conftest import OTHER_TOKEN, Api
from tests.sink.scenario import at, submitted

pytestmark = pytest.mark.integration

# Job ids deliberately out of submission order (ids are random in production): the
# newest job has a small id, the oldest a large one, and two share a submission time.
SUBMITTED = {
    "job-00000000000a": 70,
    "job-ffffffffffff": 10,
    "job-555555555555": 40,
    "job-000000000001": 40,
    "job-999999999999": 60,
    "job-333333333333": 20,
    "job-777777777777": 30,
}


def expected_order(ids: Mapping[str, float]) -> list[str]:
    return [j for j, _ in sorted(ids.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]


async def pages(
    api: Api, query: str, token: str | None = None, cursor: str | None = None
) -> list[list[str]]:
    """Every page of ``query``, following ``next_cursor`` (from ``cursor`` when given)."""
    out: list[list[str]] = []
    while True:
        url = f"/v1/jobs?{query}" + (f"&cursor={cursor}" if cursor else "")
        response = await api.client.get(url, headers=api.auth(token or "tok-dev"))
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        out.append([j["job_id"] for j in body["jobs"]])
        assert body["count"] == len(body["jobs"])
        cursor = body["next_cursor"]
        if cursor is None:
            return out
        assert len(out) < 20, "the cursor never ends"


async def test_pages_follow_submission_order_and_never_skip_a_job(api: Api) -> None:
    await api.ledger.append_many(
        [submitted(job_id, start=t) for job_id, t in SUBMITTED.items()]
        + [submitted("job-444444444444", tenant="other", start=35)]
    )
    await api.sink.catch_up()

    got = await pages(api, "limit=2")
    assert [len(p) for p in got] == [2, 2, 2, 1]
    flat = [j for p in got for j in p]
    assert flat == expected_order(SUBMITTED)
    # Paging by job id (the old bug) would have dropped these after the first page.
    assert "job-000000000001" in flat and "job-333333333333" in flat

    everything = await pages(api, "limit=500")
    assert everything == [expected_order(SUBMITTED)]
    assert await pages(api, "limit=3", OTHER_TOKEN) == [["job-444444444444"]]


async def test_a_job_submitted_while_paging_does_not_shift_later_pages(api: Api) -> None:
    await api.ledger.append_many([submitted(j, start=t) for j, t in SUBMITTED.items()])
    await api.sink.catch_up()
    first = await (await api.client.get("/v1/jobs?limit=3", headers=api.auth())).json()
    await api.ledger.append(submitted("job-0000000000ff", start=500))
    await api.sink.catch_up()
    rest = await pages(api, "limit=3", cursor=first["next_cursor"])
    seen = [j["job_id"] for j in first["jobs"]] + [j for p in rest for j in p]
    assert seen == expected_order(SUBMITTED), "no job repeated or skipped, the new one not mixed in"


async def test_status_filters_page_too(api: Api) -> None:
    await api.ledger.append_many([submitted(j, start=t) for j, t in SUBMITTED.items()])
    queued = ["job-ffffffffffff", "job-000000000001", "job-999999999999"]
    await api.ledger.append_many(
        [
            JobQueued(
                job_id=j, occurred_at=at(100), producer="scheduler/test", queue_deadline=at(700)
            )
            for j in queued
        ]
    )
    await api.sink.catch_up()
    got = await pages(api, "limit=1&status=queued")
    assert [j for p in got for j in p] == expected_order({j: SUBMITTED[j] for j in queued})
    both = await pages(api, "limit=2&status=queued,submitted")
    assert len([j for p in both for j in p]) == len(SUBMITTED)
    repeated = await pages(api, "limit=50&status=submitted&status=queued")
    assert [j for p in repeated for j in p] == expected_order(SUBMITTED)


@pytest.mark.parametrize(
    ("query", "field", "fix"),
    [
        ("limit=0", "limit", "1 to 500"),
        ("limit=501", "limit", "1 to 500"),
        ("limit=many", "limit", "1 to 500"),
        ("status=runing", "status", "running"),
    ],
)
async def test_a_bad_query_is_a_422_naming_the_parameter(
    api: Api, query: str, field: str, fix: str
) -> None:
    response = await api.client.get(f"/v1/jobs?{query}", headers=api.auth())
    assert response.status == 422
    assert response.content_type == "application/problem+json"
    body = await response.json()
    assert body["error"] == "invalid_query" and body["status"] == 422
    (problem,) = body["problems"]
    assert problem["field"] == field and fix in problem["fix"]


def forged(value: object, scope: str = "jobs") -> str:
    """A token shaped as the API's (its query's scope and a page key), with a forged key."""
    raw = json.dumps([scope, value]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


FORGED_CURSORS = [
    "nonsense",
    "WyJ4Il0",  # ["x"]
    "%00",
    forged([None, "job-\u0000x"]),  # a NUL would reach Postgres
    forged(["2026-01-01T00:00:00", "job-1"]),  # no zone
    forged(["2026-13-45T00:00:00+00:00", "job-1"]),
    forged([None, "j" * 5000]),
    forged({"a": 1}),
    forged([1, 2]),
    forged([[[[[[]]]]], "x"]),
    base64.urlsafe_b64encode(b"[" * 300 + b"]" * 300).decode(),
    "x" * 2000,
]


async def test_a_forged_or_garbage_cursor_is_a_400_naming_it(api: Api) -> None:
    for cursor in FORGED_CURSORS:  # one app for all: each case is one request
        response = await api.client.get(f"/v1/jobs?cursor={cursor}", headers=api.auth())
        assert response.status == 400, (cursor, await response.text())
        assert response.content_type == "application/problem+json"
        body = await response.json()
        assert body["error"] in ("invalid_cursor", "invalid_query")
        assert body["problems"][0]["field"] == "cursor"


async def test_a_forged_usage_cursor_with_a_nul_is_a_400_not_a_500(api: Api) -> None:
    from services.api.usage import scope

    token = forged(["2026-12-01T00:00:00+00:00"], scope("day", [], None, None))
    response = await api.client.get(f"/v1/usage?cursor={token}", headers=api.auth())
    assert response.status == 200, await response.text()  # a well-formed key: a page
    token = forged(["2026-12-01T00:00:00+00:00", "a\u0000b"], scope("day", ["region"], None, None))
    response = await api.client.get(f"/v1/usage?by=region&cursor={token}", headers=api.auth())
    assert response.status == 400, await response.text()
    assert (await response.json())["problems"][0]["field"] == "cursor"
