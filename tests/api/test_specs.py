"""Bad specs get a 422 (or 413) that names the field, before anything is recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import Api

pytestmark = pytest.mark.integration

GOOD: dict[str, Any] = {"image": "gridledger/python:latest", "command": ["python3", "x.py"]}

BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("negative gpus", {**GOOD, "resources": {"gpus": -1}}, "resources.gpus"),
    ("missing image", {"command": ["python3"]}, "image"),
    ("unknown top-level field", {**GOOD, "gpu": 2}, "gpu"),
    ("unknown nested field", {**GOOD, "resources": {"gpus": 1, "vram": 80}}, "resources.vram"),
    ("10 MB command", {**GOOD, "command": ["python3", "-c", "x" * 10_000_000]}, "command"),
    ("gpus as text", {**GOOD, "resources": {"gpus": "two"}}, "resources.gpus"),
    ("command as a string", {**GOOD, "command": 42}, "command"),
    ("memory as text", {**GOOD, "resources": {"memory_gb": "lots"}}, "resources.memory_gb"),
    ("bad dtype", {**GOOD, "model": {"params_billion": 7, "dtype": "fp64"}}, "model.dtype"),
    ("absolute output", {**GOOD, "outputs": [{"path": "/etc/passwd"}]}, "outputs[0].path"),
    ("bad image ref", {**GOOD, "image": "Not An Image"}, "image"),
    ("zero runtime", {**GOOD, "limits": {"max_runtime_s": 0}}, "limits.max_runtime_s"),
    ("reserved env", {**GOOD, "env": {"GRIDLEDGER_JOB_ID": "x"}}, "env"),
    ("label key with a space", {**GOOD, "labels": {"cost centre": "cc-42"}}, "labels"),
    ("17 labels", {**GOOD, "labels": {f"k{i}": "v" for i in range(17)}}, "labels"),
]


async def job_events_appended(api: Api) -> int:
    topic = api.settings.topic("job-events")
    return len([r async for r in api.ledger.read_partitions(topic)])


async def test_bad_specs_are_422_naming_the_field(api: Api) -> None:
    failures = []
    for name, spec, field in BAD_SPECS:
        response = await api.client.post("/v1/jobs", json=spec, headers=api.auth())
        body = await response.json()
        fields = [p["field"] for p in body.get("problems", [])]
        if response.status != 422 or field not in fields:
            failures.append(f"{name}: {response.status} {fields}")
            continue
        for problem in body["problems"]:
            assert problem["problem"] and problem["fix"], f"{name}: {problem}"
    assert not failures, failures
    assert await job_events_appended(api) == 0, "a rejected spec must not reach the ledger"


async def test_the_fix_says_what_to_do(api: Api) -> None:
    response = await api.client.post(
        "/v1/jobs", json={**GOOD, "resources": {"gpus": -1}, "colour": "red"}, headers=api.auth()
    )
    problems = {p["field"]: p for p in (await response.json())["problems"]}
    assert "at least 0" in problems["resources.gpus"]["fix"]
    assert problems["colour"]["problem"] == "unknown field"
    assert "allowed here: name, image, command" in problems["colour"]["fix"]


async def test_yaml_body_errors_and_non_objects(api: Api) -> None:
    yaml_headers = {**api.auth(), "Content-Type": "application/yaml"}
    response = await api.client.post("/v1/jobs", data="image: [unclosed", headers=yaml_headers)
    assert response.status == 400
    assert "invalid YAML" in (await response.json())["problems"][0]["problem"]
    response = await api.client.post("/v1/jobs", data="- a\n- b\n", headers=yaml_headers)
    assert response.status == 422
    assert (await response.json())["problems"][0]["field"] == "(body)"
    json_headers = {**api.auth(), "Content-Type": "application/json"}
    response = await api.client.post("/v1/jobs", data="{nope", headers=json_headers)
    assert response.status == 400
    response = await api.client.post(
        "/v1/jobs", data="resources:\n  gpus: -3\n", headers=yaml_headers
    )
    fields = {p["field"] for p in (await response.json())["problems"]}
    assert fields == {"image", "resources.gpus"}
    assert await job_events_appended(api) == 0


async def test_a_body_over_the_limit_is_a_clear_413(api: Api) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from services.api.app import build_app

    small = api.settings.model_copy(update={"api_max_body_bytes": 1024 * 1024})
    client = TestClient(TestServer(build_app(small, api.ledger, api.pool)))
    await client.start_server()
    try:
        body = json.dumps({**GOOD, "command": ["python3", "-c", "x" * 10_000_000]})
        response = await client.post(
            "/v1/jobs", data=body, headers={**api.auth(), "Content-Type": "application/json"}
        )
        assert response.status == 413
        (problem,) = (await response.json())["problems"]
        assert "at most 1048576 bytes" in problem["problem"]
    finally:
        await client.close()
    assert await job_events_appended(api) == 0
