"""What the API answers when Postgres is away, when a handler fails, and under a key race.

Postgres "away" is a real pool on a port where nothing listens: every query gets
the connection refusal a stopped server gives. The broker outage needs a broker
to kill and lives in tests/system/test_broker_outage.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from schemas.events import JobSubmitted
from services.api.app import build_app
from services.api.errors import PROBLEM_JSON
from services.ledger import Ledger, compose
from services.ops.specs import free_port
from services.settings import Settings
from tests.api.conftest import Api, write_tokens
from tests.api.test_jobs import SPEC_YAML

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture
async def no_postgres(topics: Settings, tmp_path: Path) -> AsyncIterator[tuple[TestClient, Ledger]]:
    """The API on the real broker with its read models on a Postgres that is not there."""
    settings = topics.model_copy(
        update={
            "tokens_file": write_tokens(tmp_path / "tokens.json"),
            "pg_port": free_port(),
            "api_submit_visible_s": 2.0,
        }
    )
    pool = await asyncpg.create_pool(settings.dsn, min_size=0, max_size=2)
    assert pool is not None
    async with Ledger(settings, "test") as ledger:
        client = TestClient(TestServer(build_app(settings, ledger, pool)))
        await client.start_server()
        try:
            yield client, ledger
        finally:
            await client.close()
            await pool.close()


def headers(key: str | None = None) -> dict[str, str]:
    out = {"Authorization": "Bearer tok-dev", "Content-Type": "application/yaml"}
    return {**out, "Idempotency-Key": key} if key else out


async def test_with_postgres_down_a_submission_is_accepted_and_reads_say_they_lag(
    no_postgres: tuple[TestClient, Ledger],
) -> None:
    client, ledger = no_postgres
    response = await client.post("/v1/jobs", data=SPEC_YAML, headers=headers())
    assert response.status == 202, await response.text()
    accepted = await response.json()
    assert accepted["recorded"] is False and response.headers["Location"].endswith(
        accepted["job_id"]
    )
    assert [type(e) for e in await compose.history(ledger, accepted["job_id"])] == [JobSubmitted]

    # A key's repeat is still one job: the ids come from the key, not from Postgres.
    first = await client.post("/v1/jobs", data=SPEC_YAML, headers=headers("k-pg-down"))
    again = await client.post("/v1/jobs", data=SPEC_YAML, headers=headers("k-pg-down"))
    assert (first.status, again.status) == (202, 200)
    job_id = (await first.json())["job_id"]
    assert (await again.json())["job_id"] == job_id
    assert len(await compose.history(ledger, job_id)) == 1

    for path in ("/v1/jobs", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events", "/v1/nodes"):
        read = await client.get(path, headers=headers())
        assert read.status == 503, path
        assert read.content_type == PROBLEM_JSON
        assert int(read.headers["Retry-After"]) > 0
        problem = await read.json()
        assert problem["error"] == "read_models_unavailable" and problem["status"] == 503
        assert "Submissions are still accepted" in problem["detail"]


async def test_fifty_concurrent_posts_with_one_key_make_one_job_and_one_event(api: Api) -> None:
    async def post() -> tuple[int, str]:
        response = await api.client.post(
            "/v1/jobs",
            data=SPEC_YAML,
            headers={**api.auth(), "Content-Type": "application/yaml", "Idempotency-Key": "race"},
        )
        return response.status, (await response.json())["job_id"]

    answers = await asyncio.gather(*(post() for _ in range(50)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * 49 + [202]
    (job_id,) = {job_id for _, job_id in answers}
    assert [type(e) for e in await compose.history(api.ledger, job_id)] == [JobSubmitted]
    await api.sink.catch_up()
    listed = await (await api.client.get("/v1/jobs", headers=api.auth())).json()
    assert [j["job_id"] for j in listed["jobs"]] == [job_id]


async def test_a_handler_that_fails_answers_problem_json_with_the_id_in_the_log(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug in a handler")

    app = build_app(api.settings, api.ledger, api.pool)
    app.router.add_get("/v1/broken", broken)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        with caplog.at_level(logging.ERROR, logger="services.api.errors"):
            response = await client.get("/v1/broken", headers=api.auth())
            problem = await response.json(content_type=None)
    finally:
        await client.close()
    assert response.status == 500 and response.content_type == PROBLEM_JSON
    assert problem["error"] == "internal_error" and len(problem["correlation_id"]) == 16
    assert "RuntimeError" in problem["detail"] and "a bug in a handler" not in problem["detail"]
    (record,) = [r for r in caplog.records if problem["correlation_id"] in r.getMessage()]
    assert record.exc_info is not None and "a bug in a handler" in str(record.exc_info[1])
