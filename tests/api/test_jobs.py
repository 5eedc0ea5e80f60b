"""The API end to end on the real broker and Postgres, with the sink running in-process.

The other services are not needed: the tests append the facts an agent and the
processors would append, with the Ledger, and check what the API answers.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import CancelRequested, JobSubmitted
from services.ledger import compose
from tests.api.conftest import OTHER_TOKEN, Api
from tests.sink.scenario import T0, node_facts, run_facts

pytestmark = pytest.mark.integration

SPEC_YAML = """
name: train
image: gridledger/python:latest
command: [python3, train.py]
resources:
  gpus: 1
  memory_gb: 8
retry:
  max_attempts: 2
"""


async def submit(api: Api, body: str = SPEC_YAML, token: str | None = None) -> str:
    response = await api.client.post(
        "/v1/jobs",
        data=body,
        headers={**api.auth(token or "tok-dev"), "Content-Type": "application/yaml"},
    )
    assert response.status == 202, await response.text()
    created = await response.json()
    assert created["job_id"].startswith("job-") and len(created["job_id"]) == 36
    assert response.headers["Location"] == f"/v1/jobs/{created['job_id']}"
    return str(created["job_id"])


async def test_submit_status_logs_accounting(api: Api) -> None:
    job_id = await submit(api)
    history = await compose.history(api.ledger, job_id)
    assert [type(e) for e in history] == [JobSubmitted]
    assert isinstance(history[0], JobSubmitted)
    assert history[0].tenant == "dev" and history[0].spec.resources.memory_gb == 8

    response = await api.client.get(f"/v1/jobs/{job_id}", headers=api.auth())
    assert (await response.json())["status"] == "submitted"

    script = run_facts(job_id, submit=False, lines=4)
    await api.ledger.append_many([*node_facts(), *script.all()])
    await api.sink.catch_up()

    job = await (await api.client.get(f"/v1/jobs/{job_id}", headers=api.auth())).json()
    assert job["status"] == "succeeded" and job["terminal"]
    assert job["tenant"] == "dev" and job["spec"]["image"] == "gridledger/python:latest"
    (attempt,) = job["attempts"]
    assert attempt["node_id"] == "node-a" and attempt["exit_code"] == 0
    assert job["accounting"]["final"] and job["accounting"]["billable_gpu_seconds"] > 0
    assert "applied_event_ids" not in job

    logs = await api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.auth())
    assert logs.headers["Content-Type"].startswith("text/plain")
    assert await logs.text() == "step 0\nstep 1\nstep 2\nstep 3\n"

    events = await (await api.client.get(f"/v1/jobs/{job_id}/events", headers=api.auth())).json()
    types = [e["type"] for e in events["events"]]
    assert types[0] == "JobSubmitted" and types[-1] == "JobSucceeded"
    assert [e["seq"] for e in events["events"]] == list(range(1, len(types) + 1))

    record = await (
        await api.client.get(f"/v1/jobs/{job_id}/accounting", headers=api.auth())
    ).json()
    assert record["final"] and record["status"] == "succeeded"
    assert record["metered_gpu_seconds"] == pytest.approx(30.0)
    assert [a["attempt"] for a in record["attempts"]] == [1]

    listed = await (await api.client.get("/v1/jobs?status=succeeded", headers=api.auth())).json()
    assert [j["job_id"] for j in listed["jobs"]] == [job_id]
    listed = await (await api.client.get("/v1/jobs?status=failed", headers=api.auth())).json()
    assert listed["jobs"] == []
    usage = await (await api.client.get("/v1/accounting", headers=api.auth())).json()
    assert [r["job_id"] for r in usage["records"]] == [job_id]

    nodes = await (await api.client.get("/v1/nodes", headers=api.auth())).json()
    assert [n["node_id"] for n in nodes["nodes"]] == ["node-a"]
    assert nodes["nodes"][0]["gpus"][0]["model"] == "A100-80GB"


async def test_jobs_are_listed_newest_first(api: Api) -> None:
    first = await submit(api)
    second = await submit(api, SPEC_YAML.replace("name: train", "name: second"))
    listed = await (await api.client.get("/v1/jobs", headers=api.auth())).json()
    ids = [j["job_id"] for j in listed["jobs"]]
    assert ids == [second, first]


async def test_cancel_appends_cancel_requested_and_refuses_a_terminal_job(api: Api) -> None:
    job_id = await submit(api)
    response = await api.client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "wrong data"}, headers=api.auth()
    )
    assert response.status == 202
    history = await compose.history(api.ledger, job_id)
    cancel = [e for e in history if isinstance(e, CancelRequested)]
    assert len(cancel) == 1 and cancel[0].reason == "wrong data"
    assert cancel[0].requested_by == "dev"

    done = await submit(api)
    await api.ledger.append_many(run_facts(done, submit=False).job_events)
    await api.sink.catch_up()
    response = await api.client.post(f"/v1/jobs/{done}/cancel", headers=api.auth())
    assert response.status == 409
    assert "already succeeded" in (await response.json())["detail"]


async def test_a_tenant_never_sees_another_tenants_job(api: Api) -> None:
    job_id = await submit(api)
    await api.ledger.append_many(run_facts(job_id, submit=False).all())
    await api.sink.catch_up()
    other = api.auth(OTHER_TOKEN)
    for method, path in [
        ("GET", f"/v1/jobs/{job_id}"),
        ("GET", f"/v1/jobs/{job_id}/events"),
        ("GET", f"/v1/jobs/{job_id}/logs"),
        ("GET", f"/v1/jobs/{job_id}/logs?follow=true"),
        ("GET", f"/v1/jobs/{job_id}/accounting"),
        ("POST", f"/v1/jobs/{job_id}/cancel"),
    ]:
        response = await api.client.request(method, path, headers=other)
        assert response.status == 404, f"{method} {path} answered {response.status}"
        missing = await api.client.request(
            method, path.replace(job_id, "job-000000000000"), headers=other
        )
        assert await response.json() == {
            **await missing.json(),
            "detail": (await missing.json())["detail"].replace("job-000000000000", job_id),
        }, "another tenant's job must look exactly like a job that does not exist"
    listed = await (await api.client.get("/v1/jobs", headers=other)).json()
    assert listed["jobs"] == []
    usage = await (await api.client.get("/v1/accounting", headers=other)).json()
    assert usage["records"] == []
    assert (
        len(
            [e for e in await compose.history(api.ledger, job_id) if isinstance(e, CancelRequested)]
        )
        == 0
    )


async def test_missing_or_unknown_token_is_one_401_that_names_no_path(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        response = await api.client.get("/v1/jobs", headers=headers)
        assert response.status == 401
        assert response.content_type == "application/problem+json"
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="gridledger"'
        body = await response.json()
        assert body["error"] == "unauthorized" and "Authorization: Bearer" in body["detail"]
        text = json.dumps(body)
        assert "/" not in text.replace("/problems/unauthorized", "")
        assert "tokens.json" not in text and str(api.settings.home) not in text
    response = await api.client.post("/v1/jobs", data=SPEC_YAML)
    assert response.status == 401


async def test_health_readiness_and_openapi_need_no_token(api: Api) -> None:
    health = await api.client.get("/healthz")
    assert health.status == 200
    assert (await health.json())["alive"] is True
    ready = await api.client.get("/readyz")
    body = await ready.json()
    assert ready.status == 200, body
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["kafka"]["ok"] and checks["kafka"]["brokers"] >= 1
    assert checks["postgres"]["ok"]
    doc = await (await api.client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    assert {"/v1/jobs", "/v1/jobs/{job_id}/logs", "/v1/jobs/{job_id}/cancel"} <= set(doc["paths"])
    assert "resources" in doc["components"]["schemas"]["JobSpec"]["properties"]


async def test_a_retried_submit_with_the_same_idempotency_key_is_one_job(api: Api) -> None:
    headers = {**api.auth(), "Content-Type": "application/yaml", "Idempotency-Key": "k-1"}
    first = await api.client.post("/v1/jobs", data=SPEC_YAML, headers=headers)
    again = await api.client.post("/v1/jobs", data=SPEC_YAML, headers=headers)
    assert first.status == 202 and again.status == 200
    job_id = (await first.json())["job_id"]
    assert (await again.json())["job_id"] == job_id
    other = await api.client.post(
        "/v1/jobs", data=SPEC_YAML.replace("gpus: 1", "gpus: 2"), headers=headers
    )
    assert other.status == 409
    # The same key from another tenant is another job.
    theirs = await api.client.post(
        "/v1/jobs", data=SPEC_YAML, headers={**headers, **api.auth(OTHER_TOKEN)}
    )
    assert theirs.status == 202 and (await theirs.json())["job_id"] != job_id
    assert len(await compose.history(api.ledger, job_id)) == 1


async def test_a_node_that_stopped_reporting_is_shown_silent(api: Api) -> None:
    now = datetime.now(UTC)
    old = [
        e.model_copy(update={"occurred_at": now - timedelta(hours=1) + (e.occurred_at - T0)})
        for e in node_facts("node-gone")
    ]
    fresh = [
        e.model_copy(update={"occurred_at": now + (e.occurred_at - T0)})
        for e in node_facts("node-here")
    ]
    await api.ledger.append_many([*old, *fresh])
    await api.sink.catch_up()

    nodes = await (await api.client.get("/v1/nodes", headers=api.auth())).json()
    status = {n["node_id"]: n["status"] for n in nodes["nodes"]}
    assert status == {"node-gone": "silent", "node-here": "ready"}
