"""Bad specs get a 422 (or 413) that names the field, before anything is recorded.

On the FakeLedger (the API takes the ledger port) and the real Postgres: what is
recorded is what the fake holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.ledger import compose
from tests.api.conftest import Api

pytestmark = pytest.mark.integration


@pytest.fixture
def api(fake_api: Api) -> Api:
    """Every test here runs the API on the fake ledger."""
    return fake_api


GOOD: dict[str, Any] = {"image": "gridledger/python:latest", "command": ["python3", "x.py"]}

BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("negative gpus", {**GOOD, "resources": {"gpus": -1}}, "resources.gpus"),
    ("missing image", {"command": ["python3"]}, "image"),
    ("unknown top-level field", {**GOOD, "gpu": 2}, "gpu"),
    ("unknown nested field", {**GOOD, "resources": {"gpus": 1, "vram": 80}}, "resources.vram"),
    ("100 KB command", {**GOOD, "command": ["python3", "-c", "x" * 100_000]}, "command"),
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
    # Hostile bytes (issue 21): each refused at the edge, naming the field.
    ("NUL in name", {**GOOD, "name": "nul\u0000x"}, "name"),
    ("escape in name", {**GOOD, "name": "\x1b[2Jgone"}, "name"),
    ("newline in name", {**GOOD, "name": "a\nb"}, "name"),
    ("NUL in a command argument", {**GOOD, "command": ["sh", "-c\u0000"]}, "command[1]"),
    ("NUL in an env value", {**GOOD, "env": {"A": "x\u0000"}}, "env.A"),
    ("bell in an env name", {**GOOD, "env": {"A\u0007": "x"}}, "env.A\u0007"),
    ("NUL in an output path", {**GOOD, "outputs": [{"path": "a\u0000"}]}, "outputs[0].path"),
    ("newline in checkpoints", {**GOOD, "checkpoints": "ck\npt"}, "checkpoints"),
    (
        "escape in a provider",
        {**GOOD, "placement": {"providers": ["\x1b"]}},
        "placement.providers[0]",
    ),
    (
        "NUL in a GPU model",
        {**GOOD, "resources": {"gpu_models": ["A\u0000"]}},
        "resources.gpu_models[0]",
    ),
    ("NUL in resume_from", {**GOOD, "resume_from": "job-\u0000"}, "resume_from"),
    ("lone surrogate", {**GOOD, "name": "\ud800"}, "name"),
    (
        "min_vram_gb Infinity",
        {**GOOD, "resources": {"min_vram_gb": float("inf")}},
        "resources.min_vram_gb",
    ),
    (
        "min_vram_gb NaN",
        {**GOOD, "resources": {"min_vram_gb": float("nan")}},
        "resources.min_vram_gb",
    ),
    ("min_vram_gb huge", {**GOOD, "resources": {"min_vram_gb": 1e9}}, "resources.min_vram_gb"),
    ("memory_gb 1e-10", {**GOOD, "resources": {"memory_gb": 1e-10}}, "resources.memory_gb"),
    ("cpus 1e-10", {**GOOD, "resources": {"cpus": 1e-10}}, "resources.cpus"),
    ("backoff NaN", {**GOOD, "retry": {"backoff_s": float("nan")}}, "retry.backoff_s"),
    (
        "params Infinity",
        {**GOOD, "model": {"params_billion": float("inf")}},
        "model.params_billion",
    ),
    ("NVIDIA_VISIBLE_DEVICES", {**GOOD, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env"),
    ("nvidia_driver_capabilities", {**GOOD, "env": {"nvidia_driver_capabilities": "all"}}, "env"),
    ("CUDA_VISIBLE_DEVICES", {**GOOD, "env": {"CUDA_VISIBLE_DEVICES": "0,1"}}, "env"),
    ("300 env entries", {**GOOD, "env": {f"V{i}": "" for i in range(300)}}, "env"),
    ("40 KB env value", {**GOOD, "env": {"BIG": "x" * 40_000}}, "env.BIG"),
    ("90 KB env", {**GOOD, "env": {f"V{i}": "x" * 30_000 for i in range(3)}}, "env"),
    ("2000 command items", {**GOOD, "command": ["x"] * 2000}, "command"),
    ("100 outputs", {**GOOD, "outputs": [{"path": f"o{i}"} for i in range(100)]}, "outputs"),
    ("50 providers", {**GOOD, "placement": {"providers": ["p"] * 50}}, "placement.providers"),
    (
        "a long GPU model",
        {**GOOD, "resources": {"gpu_models": ["A" * 500]}},
        "resources.gpu_models[0]",
    ),
    ("a long name", {**GOOD, "name": "n" * 201}, "name"),
    ("a long resume_from", {**GOOD, "resume_from": "job-" + "0" * 100}, "resume_from"),
]


async def job_events_appended(api: Api) -> int:
    topic = api.settings.topic("job-events")
    return len([r async for r in compose.read_partitions(api.ledger, topic)])


async def test_bad_specs_are_422_naming_the_field(api: Api) -> None:
    failures = []
    for name, spec, field in BAD_SPECS:
        response = await api.client.post("/v1/jobs", json=spec, headers=api.auth())
        body = await response.json()
        fields = [p["field"] for p in body.get("problems", [])]
        if response.status != 422 or field not in fields:
            failures.append(f"{name}: {response.status} {fields}")
            continue
        assert response.content_type == "application/problem+json", name
        assert body["type"] == "/problems/invalid_spec" and body["status"] == 422, name
        assert field in body["detail"] or field.startswith("env."), (name, body["detail"])
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


def deep_json(depth: int) -> str:
    return '{"image": "gridledger/busybox:latest", "env": ' + "[" * depth + "]" * depth + "}"


BAD_BODIES: list[tuple[str, str, str, int, str]] = [
    ("20,000-deep JSON", "application/json", deep_json(20_000), 400, "nested more than"),
    ("33-deep JSON", "application/json", deep_json(33), 400, "nested more than"),
    (
        "5,000-digit integer",
        "application/json",
        '{"image": "x", "resources": {"gpus": ' + "9" * 5000 + "}}",
        400,
        "digits",
    ),
    (
        "20,000-deep YAML",
        "application/yaml",
        "image: x\nenv: " + "[" * 20_000 + "]" * 20_000,
        400,
        "nest",  # the YAML parser's own bound, as a 400 too
    ),
    (
        "5,000-digit YAML integer",
        "application/yaml",
        "image: x\nresources: {gpus: " + "9" * 5000 + "}\n",
        400,
        "digits",
    ),
    (
        "a YAML alias bomb",
        "application/yaml",
        "a: &a [x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 8)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "image: x\n",
        400,
        "aliases",
    ),
]


async def test_hostile_bodies_get_a_clean_4xx(api: Api) -> None:
    for name, media, body, status, words in BAD_BODIES:
        response = await api.client.post(
            "/v1/jobs", data=body, headers={**api.auth(), "Content-Type": media}
        )
        assert response.status == status, (name, await response.text())
        assert response.content_type == "application/problem+json", name
        problem = await response.json()
        assert problem["status"] == status and problem["type"].startswith("/problems/"), name
        assert words in problem["problems"][0]["problem"], (name, problem)
    assert await job_events_appended(api) == 0


async def test_a_2_mib_body_is_a_413_and_a_spec_encoding_too_large_a_422(api: Api) -> None:
    big = json.dumps({**GOOD, "env": {"X": "x" * (2 * 1024 * 1024)}})
    response = await api.client.post(
        "/v1/jobs", data=big, headers={**api.auth(), "Content-Type": "application/json"}
    )
    assert response.status == 413 and response.content_type == "application/problem+json"
    assert (await response.json())["error"] == "body_too_large"
    # Each field within its bounds, the whole over api_max_spec_bytes (128 KiB): newlines
    # count one byte in the command's bound and two once encoded.
    spec = {**GOOD, "command": ["sh", "-c", "\n" * 60_000], "env": {"E": "\n" * 30_000}}
    response = await api.client.post("/v1/jobs", json=spec, headers=api.auth())
    assert response.status == 422, await response.text()
    body = await response.json()
    assert body["problems"][0]["field"] == "(spec)" and "encodes to" in body["detail"]
    assert await job_events_appended(api) == 0


async def test_tab_and_newline_are_allowed_in_commands_and_env_values(api: Api) -> None:
    spec = {**GOOD, "command": ["sh", "-c", "echo a\n\techo b"], "env": {"SCRIPT": "a\nb\tc"}}
    response = await api.client.post("/v1/jobs", json=spec, headers=api.auth())
    assert response.status == 202, await response.text()


BAD_HEADERS = [
    ("Idempotency-Key", "k" * 201),
    ("Idempotency-Key", "a\x85b"),  # a C1 control (the client refuses to send C0)
    ("X-Gridledger-Submitter", "me\x9b"),
]


async def test_bad_headers_are_a_400_naming_the_header(api: Api) -> None:
    for header, value in BAD_HEADERS:
        response = await api.client.post(
            "/v1/jobs", json=GOOD, headers={**api.auth(), header: value}
        )
        assert response.status == 400, (header, await response.text())
        body = await response.json()
        assert body["error"] == "invalid_header" and body["problems"][0]["field"] == header
    assert await job_events_appended(api) == 0
