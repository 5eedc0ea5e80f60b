"""The OpenAPI document is generated from the routes: every route, typed, with an operationId."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import asyncpg

from services.api.app import build_app
from services.api.openapi import OPENAPI
from services.api.routes import OPERATIONS
from services.ledger import Ledger
from services.ops.server import OpsEndpoints
from services.settings import load_settings


def app_and_document(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    settings = load_settings(tokens_file=tmp_path / "tokens.json")
    # The router and the document need no connection: nothing is called before a request.
    app = build_app(settings, cast(Ledger, None), cast(asyncpg.Pool, None), OpsEndpoints("api"))
    return app, app[OPENAPI]


def test_the_document_covers_every_route_the_router_serves(tmp_path: Path) -> None:
    app, doc = app_and_document(tmp_path)
    served = {
        (route.method.lower(), route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    documented = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert served == documented
    assert {(op.method.lower(), op.path) for op in OPERATIONS} <= served


def test_every_operation_has_an_operation_id_and_a_response_schema(tmp_path: Path) -> None:
    _, doc = app_and_document(tmp_path)
    ids = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            assert op.get("operationId"), f"{where} has no operationId"
            ids.append(op["operationId"])
            assert op["responses"], f"{where} has no responses"
            for status, response in op["responses"].items():
                content = response.get("content") or {}
                assert content, f"{where} {status} has no content schema"
                for media, body in content.items():
                    assert "schema" in body, f"{where} {status} {media} has no schema"
            success = [s for s in op["responses"] if s.startswith("2")]
            assert success, f"{where} has no success response"
    assert len(ids) == len(set(ids)), "operationIds must be unique"


def test_every_reference_resolves_and_models_are_typed(tmp_path: Path) -> None:
    _, doc = app_and_document(tmp_path)
    components = doc["components"]["schemas"]
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[1] in components, f"{ref} does not resolve"
    job = doc["paths"]["/v1/jobs/{job_id}"]["get"]["responses"]["200"]["content"]
    assert job["application/json"]["schema"] == {"$ref": "#/components/schemas/JobDocument"}
    page = components["JobPage"]["properties"]
    assert {"jobs", "count", "next_cursor"} <= set(page)
    params = {p["name"] for p in doc["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert params == {"status", "limit", "cursor"}
    assert "resources" in components["JobSpec"]["properties"]


def test_console_pages_and_health_are_public_and_the_api_is_not(tmp_path: Path) -> None:
    _, doc = app_and_document(tmp_path)
    public = {
        path
        for path, item in doc["paths"].items()
        for op in item.values()
        if op.get("security") == []
    }
    assert public == {
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/console",
        "/console/jobs/{job_id}",
        "/console/fleet",
        "/console/static/{name}",
        "/favicon.ico",
    }
    for path, item in doc["paths"].items():
        for op in item.values():
            if path not in public:
                assert "401" in op["responses"], path


def test_the_document_states_the_specs_limits_and_every_refusal_is_problem_json(
    tmp_path: Path,
) -> None:
    import re

    from schemas.spec import LIMITS, MIN_CPUS, MIN_MEMORY_GB, RESERVED_ENV_PATTERN

    _, doc = app_and_document(tmp_path)
    schemas = doc["components"]["schemas"]
    spec, resources = schemas["JobSpec"]["properties"], schemas["Resources"]["properties"]
    assert spec["name"]["maxLength"] == LIMITS["name_chars"] and "pattern" in spec["name"]
    assert spec["command"]["maxItems"] == LIMITS["command_items"]
    assert "pattern" in spec["command"]["items"]
    names = spec["env"]["propertyNames"]
    assert names["not"]["pattern"] == RESERVED_ENV_PATTERN
    for reserved in ("NVIDIA_VISIBLE_DEVICES", "cuda_visible_devices", "GRIDLEDGER_X"):
        assert re.match(RESERVED_ENV_PATTERN, reserved), reserved
    assert not re.match(RESERVED_ENV_PATTERN, "CUDA_HOME")
    assert spec["env"]["maxProperties"] == LIMITS["env_items"]
    assert resources["memory_gb"]["minimum"] == MIN_MEMORY_GB
    assert resources["cpus"]["minimum"] == MIN_CPUS
    vram = next(s for s in resources["min_vram_gb"]["anyOf"] if s.get("type") == "number")
    assert vram["maximum"] > 0
    # Control characters are outside every string's pattern (schemathesis sees the rule).
    assert not re.match(spec["name"]["pattern"], "a\x00b")
    assert re.match(spec["command"]["items"]["pattern"], "a\n\tb")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
    cancel = doc["paths"]["/v1/jobs/{job_id}/cancel"]["post"]
    assert cancel["requestBody"]["required"] is False
