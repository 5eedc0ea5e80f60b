"""Real responses validate against the models the OpenAPI document is generated from."""

from __future__ import annotations

from typing import Any

import pytest

from services.api.explain import explain
from services.api.openapi import Operation
from services.api.routes import ROUTES
from tests.api.conftest import Api
from tests.api.test_jobs import submit
from tests.sink.scenario import node_facts, run_facts

pytestmark = pytest.mark.integration


def operations(api: Api) -> dict[str, Operation]:
    return {op.operation_id: op for op in api.app[ROUTES]}


def conforms(api: Api, operation_id: str, status: int, body: Any) -> None:
    reply = operations(api)[operation_id].responses[status]
    assert reply.model is not None, f"{operation_id} {status} has no model"
    reply.model.model_validate(body)


async def call(api: Api, method: str, path: str, operation_id: str, status: int = 200) -> Any:
    response = await api.client.request(method, path, headers=api.auth())
    assert response.status == status, await response.text()
    body = await response.json()
    conforms(api, operation_id, status, body)
    return body


async def test_every_json_operation_answers_what_its_model_says(api: Api) -> None:
    failed = await submit(api)
    running = await submit(api)
    await api.ledger.append_many(
        [
            *node_facts(),
            *run_facts(failed, submit=False, exit_code=1).all(),
            *run_facts(running, submit=False, finish=False, exited=False).job_events,
        ]
    )
    await api.sink.catch_up()
    job = f"/v1/jobs/{failed}"

    await call(api, "GET", "/v1/jobs?limit=1", "listJobs")
    document = await call(api, "GET", job, "getJob")
    assert document["status"] == "failed"
    await call(api, "GET", f"{job}/events", "listJobEvents")
    await call(api, "GET", f"{job}/accounting", "getJobAccounting")
    await call(api, "GET", f"{job}/artifacts", "listJobArtifacts")
    await call(api, "GET", "/v1/accounting", "listAccounting")
    await call(api, "GET", "/v1/nodes", "listNodes")
    await call(api, "GET", "/healthz", "getLiveness")
    await call(api, "GET", "/readyz", "getReadiness")
    await call(api, "POST", f"/v1/jobs/{running}/cancel", "cancelJob", 202)
    await call(api, "POST", f"{job}/cancel", "cancelJob", 409)

    timeline = await call(api, "GET", f"{job}/timeline", "getJobTimeline")
    states = [s["state"] for s in timeline["lanes"][0]["segments"]]
    assert states == ["submitted", "queued", "scheduled", "starting", "running", "finishing",
                      "failed"]  # fmt: skip
    assert [e["seq"] for e in timeline["events"]] == list(range(1, len(timeline["events"]) + 1))

    explained = await call(api, "GET", f"{job}/explain", "explainJob")
    assert explained["text"] == explain(document), "the console shows what the CLI prints"
    assert "missing the Python module 'transformers'" in explained["text"]
    assert "\x1b[" not in explained["text"]


async def test_a_submit_answers_the_created_model(api: Api) -> None:
    response = await api.client.post(
        "/v1/jobs",
        json={"image": "gridledger/busybox:latest", "command": ["true"]},
        headers=api.auth(),
    )
    assert response.status == 202
    conforms(api, "submitJob", 202, await response.json())
