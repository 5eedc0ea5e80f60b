"""The OpenAPI 3.1 document served at ``/openapi.json``; the JobSpec schema comes from the model."""

from __future__ import annotations

from functools import cache
from typing import Any

from schemas.spec import JobSpec
from schemas.views import JOB_STATUSES, AccountingRecord, JobView


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_PROBLEMS = _json(_ref("Problems"), "what is wrong, field by field, and how to fix it")
_NOT_FOUND = {"description": "no such job for this tenant (another tenant's job looks the same)"}
_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _components() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (JobSpec, JobView, AccountingRecord):
        doc = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(doc.pop("$defs", {}))
        schemas[model.__name__] = doc
    schemas["Problems"] = {
        "type": "object",
        "properties": {
            "error": {"type": "string"},
            "problems": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "field": {"type": "string", "examples": ["resources.gpus"]},
                        "problem": {"type": "string"},
                        "fix": {"type": "string"},
                    },
                    "required": ["field", "problem", "fix"],
                },
            },
        },
    }
    return schemas


@cache
def openapi_document() -> dict[str, Any]:
    """The API description (paths, bearer auth, and the models' JSON schemas)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gridledger",
            "version": "1",
            "description": "Submit containerised GPU jobs; follow, explain and account for them.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/jobs": {
                "post": {
                    "summary": "Submit a job (JSON or YAML JobSpec)",
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "schema": {"type": "string"},
                            "description": "a retried submit with the same key returns the "
                            "same job (200) instead of creating another, even under concurrency "
                            "and while Postgres is down",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": _ref("JobSpec")},
                            "application/yaml": {"schema": _ref("JobSpec")},
                        },
                    },
                    "responses": {
                        "202": {
                            "description": "accepted: the broker acknowledged JobSubmitted; body "
                            "has job_id, links and recorded (false while status reads lag)"
                        },
                        "200": {"description": "a repeat of an Idempotency-Key: the same job"},
                        "409": {"description": "the Idempotency-Key was used with another spec"},
                        "503": {
                            "description": "application/problem+json with Retry-After: the "
                            "broker did not take the write; nothing was recorded"
                        },
                        "400": _PROBLEMS,
                        "401": {"description": "missing or unknown bearer token"},
                        "413": _PROBLEMS,
                        "422": _PROBLEMS,
                    },
                },
                "get": {
                    "summary": "The tenant's jobs, newest first",
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "schema": {"type": "string", "enum": list(JOB_STATUSES)},
                        },
                        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                        {"name": "before", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {"200": {"description": "{jobs: [...], count}"}},
                },
            },
            "/v1/jobs/{job_id}": {
                "get": {
                    "summary": "The job's view: status, failure, advice, evidence, attempts",
                    "parameters": [_JOB_ID],
                    "responses": {"200": _json(_ref("JobView"), "the job"), "404": _NOT_FOUND},
                }
            },
            "/v1/jobs/{job_id}/events": {
                "get": {
                    "summary": "Every lifecycle event of the job, in order",
                    "parameters": [_JOB_ID],
                    "responses": {"200": {"description": "{job_id, events}"}, "404": _NOT_FOUND},
                }
            },
            "/v1/jobs/{job_id}/logs": {
                "get": {
                    "summary": "The job's logs; follow=true streams live until the job ends",
                    "parameters": [
                        _JOB_ID,
                        {"name": "follow", "in": "query", "schema": {"type": "boolean"}},
                        {"name": "attempt", "in": "query", "schema": {"type": "integer"}},
                        {
                            "name": "stream",
                            "in": "query",
                            "schema": {"enum": ["stdout", "stderr", "system"]},
                        },
                        {"name": "format", "in": "query", "schema": {"enum": ["text", "ndjson"]}},
                    ],
                    "responses": {
                        "200": {
                            "description": "text/plain, or application/x-ndjson with one chunk "
                            "per line, {keepalive: true} lines while a followed job is quiet, "
                            "and a final {end: true, status}",
                        },
                        "404": _NOT_FOUND,
                    },
                }
            },
            "/v1/jobs/{job_id}/accounting": {
                "get": {
                    "summary": "The job's accounting record",
                    "parameters": [_JOB_ID],
                    "responses": {
                        "200": _json(_ref("AccountingRecord"), "the record"),
                        "404": _NOT_FOUND,
                    },
                }
            },
            "/v1/jobs/{job_id}/cancel": {
                "post": {
                    "summary": "Ask for the job to be cancelled",
                    "parameters": [_JOB_ID],
                    "responses": {
                        "202": {"description": "CancelRequested recorded"},
                        "404": _NOT_FOUND,
                        "409": {"description": "the job is already terminal"},
                    },
                }
            },
            "/v1/accounting": {
                "get": {
                    "summary": "The tenant's accounting records, newest jobs first",
                    "responses": {"200": {"description": "{records, count}"}},
                }
            },
            "/v1/nodes": {
                "get": {"summary": "The fleet", "responses": {"200": {"description": "{nodes}"}}}
            },
            "/healthz": {
                "get": {
                    "summary": "The process is alive (liveness)",
                    "security": [],
                    "responses": {"200": {"description": "{service, pid, alive, uptime_s}"}},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Readiness: broker metadata fetched, Postgres answers SELECT 1",
                    "security": [],
                    "responses": {
                        "200": {"description": "{service, pid, ready, checks[]}: all passed"},
                        "503": {"description": "same body; at least one check failed"},
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (text exposition format)",
                    "security": [],
                    "responses": {"200": {"description": "text/plain; version=0.0.4"}},
                }
            },
        },
        "components": {
            "schemas": _components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
