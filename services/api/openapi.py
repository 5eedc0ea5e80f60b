"""The OpenAPI 3.1 document, generated from the API's operation table.

Every route the API serves is one :class:`Operation`: method, path, handler,
``operationId``, the query model and the response models by status.
``build_app`` registers the routes from the same table, so the document cannot
list a route that does not exist or miss one that does; the schemas come from
the pydantic models (``services.api.models``, ``schemas.spec``,
``schemas.views``), so a generated client (``openapi-python-client``) is typed.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from services.api.errors import PROBLEM_JSON
from services.api.models import ErrorBody, ProblemDetail, Problems

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Reply:
    """One response of an operation: a model (JSON) or a plain schema in another media type."""

    description: str
    model: type[BaseModel] | None = None
    model_media: str = "application/json"
    """The media type the model is sent as (NDJSON streams send one model per line)."""
    media: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Media type -> schema, for bodies that are not one JSON model (text, NDJSON, HTML)."""


@dataclass(frozen=True)
class Header:
    """A response header an operation documents (Location, Retry-After ...)."""

    name: str
    description: str


@dataclass(frozen=True)
class Operation:
    """One route: its handler and what the API description says of it, declared once for both."""

    method: str
    path: str
    handler: Handler
    operation_id: str
    summary: str
    responses: dict[int, Reply]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_media: tuple[str, ...] = ("application/json",)
    body_required: bool = True
    headers: tuple[Header, ...] = ()
    public: bool = False
    """Served without a bearer token (health, this document, the console's static pages)."""
    agent: bool = False
    """Authenticated with an agent credential (a node and its token), never a tenant token."""
    tags: tuple[str, ...] = ("jobs",)


UNAUTHORIZED = Reply("missing or unknown bearer token", ProblemDetail)
NOT_FOUND = Reply("no such job for this tenant (another tenant's job looks the same)", ErrorBody)
SERVICE_UNAVAILABLE = Reply(
    "application/problem+json with Retry-After: the read models (Postgres) are away",
    ProblemDetail,
)
INVALID_QUERY = Reply("a query parameter is invalid: which one and how to fix it", Problems)
INVALID_CURSOR = Reply("the cursor is not one this API gave out", Problems)


def _path_parameters(path: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", []))
    params = []
    for name, prop in schema["properties"].items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        description = prop.pop("description", None)
        param: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": prop,
        }
        if description:
            param["description"] = description
        if prop.get("type") == "array":
            param["style"], param["explode"] = "form", True
        params.append(param)
    return params


def _models(operations: Sequence[Operation]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    found: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {}
    for op in operations:
        if op.body is not None:
            found[(op.body, "validation")] = None
        for reply in op.responses.values():
            if reply.model is not None:
                found[(reply.model, "serialization")] = None
    return list(found)


def _responses(op: Operation, refs: dict[Any, Any]) -> dict[str, Any]:
    replies = dict(op.responses)
    if not op.public:
        replies.setdefault(401, UNAUTHORIZED)
    if "{job_id}" in op.path and not op.public:
        replies.setdefault(404, NOT_FOUND)
    if op.query is not None:
        replies.setdefault(422, INVALID_QUERY)
        if "cursor" in op.query.model_fields:
            replies.setdefault(400, INVALID_CURSOR)
    if not op.public and op.path.startswith("/v1/"):
        # Every read can meet an outage of the read models (errors.middleware).
        replies.setdefault(503, SERVICE_UNAVAILABLE)
    out: dict[str, Any] = {}
    for status, reply in sorted(replies.items()):
        content = dict(reply.media)
        if reply.model is not None:
            # Every refusal and failure is a problem document (errors.middleware).
            media = PROBLEM_JSON if status >= 400 else reply.model_media
            content[media] = {"schema": refs[(reply.model, "serialization")]}
        out[str(status)] = {"description": reply.description, "content": content}
    return out


def openapi_document(operations: Sequence[Operation]) -> dict[str, Any]:
    """The API description of ``operations``: paths, parameters, bearer auth, models."""
    refs, defs = models_json_schema(_models(operations), ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        item: dict[str, Any] = {
            "operationId": op.operation_id,
            "summary": op.summary,
            "tags": list(op.tags),
            "parameters": [
                *_path_parameters(op.path),
                *(_query_parameters(op.query) if op.query else []),
                *(
                    {
                        "name": h.name,
                        "in": "header",
                        "schema": {"type": "string"},
                        "description": h.description,
                    }
                    for h in op.headers
                ),  # fmt: skip
            ],
            "responses": _responses(op, refs),
        }
        if op.public:
            item["security"] = []
        elif op.agent:
            item["security"] = [{"agent": []}]
        if op.body is not None:
            schema = refs[(op.body, "validation")]
            item["requestBody"] = {
                "required": op.body_required,
                "content": {media: {"schema": schema} for media in op.body_media},
            }
        paths.setdefault(op.path, {})[op.method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gridledger",
            "version": "1",
            "description": "Submit containerised GPU jobs; follow, explain and account for them.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "agent": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a node's agent token, with the node in X-Gridledger-Node",
                },
            },
        },
    }


def register(app: web.Application, operations: Sequence[Operation]) -> None:
    """Add every operation's route to ``app`` (the only place routes are added)."""
    for op in operations:
        app.router.add_route(op.method, op.path, op.handler, name=op.operation_id)


def public_paths(operations: Sequence[Operation]) -> frozenset[str]:
    """Path templates served without a token."""
    return frozenset(op.path for op in operations if op.public)


def agent_paths(operations: Sequence[Operation]) -> frozenset[str]:
    """Path templates that take an agent credential instead of a tenant token."""
    return frozenset(op.path for op in operations if op.agent)


OPENAPI = web.AppKey("openapi", dict)
"""The document of the app's routes, built once by ``build_app``."""


async def serve_document(request: web.Request) -> web.Response:
    """GET /openapi.json: the API's description, built from the same routes and models it serves."""
    return web.json_response(request.app[OPENAPI])
