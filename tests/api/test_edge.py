"""The API's edge on the real stack: cross-tenant references, ids, headers, error shapes."""

from __future__ import annotations

import re

import pytest

from schemas.events import JobSubmitted
from services.api import idempotency
from services.ledger import compose
from tests.api.conftest import OTHER_TOKEN, Api
from tests.api.test_jobs import submit
from tests.api.test_specs import job_events_appended

pytestmark = pytest.mark.integration

GOOD = {"image": "gridledger/busybox:latest", "command": ["true"]}


async def test_resume_from_another_tenants_job_is_a_404_like_an_unknown_job(api: Api) -> None:
    theirs = await submit(api, token=OTHER_TOKEN)
    mine = await submit(api)
    before = await job_events_appended(api)
    answers = {}
    for source in (theirs, "job-00000000000000000000000000000000"):
        response = await api.client.post(
            "/v1/jobs", json={**GOOD, "resume_from": source}, headers=api.auth()
        )
        assert response.status == 404, await response.text()
        assert response.content_type == "application/problem+json"
        body = await response.json()
        assert body["error"] == "not_found" and body["field"] == "resume_from"
        answers[source] = body["detail"].replace(source, "ID")
    # Another tenant's job and a job that does not exist answer alike: nothing to probe.
    assert len(set(answers.values())) == 1
    assert await job_events_appended(api) == before, "a refused submit reached the ledger"
    response = await api.client.post(
        "/v1/jobs", json={**GOOD, "resume_from": mine}, headers=api.auth()
    )
    assert response.status == 202, await response.text()
    job = (await response.json())["job_id"]
    view = await (await api.client.get(f"/v1/jobs/{job}", headers=api.auth())).json()
    assert view["spec"]["resume_from"] == mine and view["tenant"] == "dev"


async def test_job_ids_are_128_bit_and_keyed_ids_an_hmac_replicas_agree_on(api: Api) -> None:
    ids = {idempotency.new_job_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(re.fullmatch(r"job-[0-9a-f]{32}", i) for i in ids)
    response = await api.client.post(
        "/v1/jobs", json=GOOD, headers={**api.auth(), "Idempotency-Key": "k-1"}
    )
    assert response.status == 202, await response.text()
    keyed = (await response.json())["job_id"]
    secret = idempotency.id_key(api.settings)
    assert keyed == idempotency.job_id_for(secret, "dev", "k-1")
    # Another replica with the same key names the same job; without the key, nobody can.
    replica = api.settings.model_copy()
    assert idempotency.job_id_for(idempotency.id_key(replica), "dev", "k-1") == keyed
    assert idempotency.job_id_for(b"another key", "dev", "k-1") != keyed
    assert idempotency.job_id_for(secret, "other", "k-1") != keyed
    events = [
        r.value async for r in compose.read_partitions(api.ledger, api.settings.topic("job-events"))
    ]
    assert [e.job_id for e in events if isinstance(e, JobSubmitted)] == [keyed]


async def test_an_old_48_bit_job_id_still_reads(api: Api) -> None:
    response = await api.client.get("/v1/jobs/job-1f0c2a9e4b7d", headers=api.auth())
    assert response.status == 404  # unknown here, but a valid id: a lookup, not a refusal
    assert (await response.json())["error"] == "not_found"


REFUSALS = [
    ("GET", "/v1/nope", 404),
    ("DELETE", "/v1/jobs", 405),
    ("GET", "/v1/jobs/job-%00x", 404),
    ("GET", "/v1/jobs/" + "j" * 300, 404),
    ("GET", "/v1/jobs?status=nope", 422),
    ("GET", "/v1/jobs?limit=99999999999999999999999", 422),
]


async def test_every_refusal_is_problem_json(api: Api) -> None:
    for method, path, status in REFUSALS:
        response = await api.client.request(method, path, headers=api.auth())
        assert response.status == status, (path, await response.text())
        assert response.content_type == "application/problem+json", path
        body = await response.json()
        assert body["status"] == status and body["type"].startswith("/problems/") and body["title"]


async def test_a_401_is_problem_json_too(api: Api) -> None:
    response = await api.client.get("/v1/jobs")
    assert response.status == 401 and response.content_type == "application/problem+json"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_a_bad_cancel_reason_is_a_422_naming_it(api: Api) -> None:
    job = await submit(api)
    response = await api.client.post(
        f"/v1/jobs/{job}/cancel", json={"reason": "stop\u0000now"}, headers=api.auth()
    )
    assert response.status == 422, await response.text()
    body = await response.json()
    assert body["problems"][0]["field"] == "reason"
    response = await api.client.post(f"/v1/jobs/{job}/cancel", data="[" * 5000, headers=api.auth())
    assert response.status == 400


async def test_security_headers_on_the_console_and_the_api(api: Api) -> None:
    for path in ("/console", "/console/jobs/job-1", "/favicon.ico", "/v1/jobs", "/nope"):
        await check_security_headers(api, path)


async def check_security_headers(api: Api, path: str) -> None:
    response = await api.client.get(path, headers=api.auth())
    policy = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    if path.startswith("/console"):
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "<script>" not in await response.text(), "an inline script the CSP would block"
    if path.startswith("/v1/"):
        assert response.headers["Cache-Control"] == "no-store"
