"""Turning a submitted body into a JobSpec, or into problems that name the field and the fix."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from schemas.spec import JobSpec

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request, in the user's terms."""

    field: str
    problem: str
    fix: str

    def to_json(self) -> dict[str, str]:
        """The problem as the API's error body lists it."""
        return asdict(self)


class BodyError(Exception):
    """The body is not a spec at all (unparsable, not an object)."""

    def __init__(self, problem: Problem, status: int = 400) -> None:
        super().__init__(problem.problem)
        self.problems = [problem]
        self.status = status


def parse_body(raw: bytes, content_type: str) -> Any:
    """JSON or YAML (by content type; JSON first, then YAML when the type says neither)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(
            Problem("(body)", f"not UTF-8 text: {exc}", "send the spec as UTF-8 JSON or YAML")
        ) from exc
    if not text.strip():
        raise BodyError(
            Problem("(body)", "the body is empty", 'send a job spec, e.g. {"image": "..."}')
        )
    if content_type in YAML_TYPES:
        return _yaml(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if content_type == "application/json":
            raise BodyError(
                Problem(
                    "(body)",
                    f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                    "fix the JSON, or send YAML with Content-Type: application/yaml",
                )
            ) from exc
    return _yaml(text)


def _yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise BodyError(
            Problem("(body)", f"invalid YAML{where}: {reason}", "fix the YAML syntax")
        ) from exc


def field_path(loc: tuple[Any, ...]) -> str:
    """('outputs', 0, 'path') -> 'outputs[0].path'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(body)"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at ``loc`` (for listing allowed fields)."""
    model: type[BaseModel] | None = JobSpec
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


_TYPE_FIX = {
    "int_type": "use a whole number, e.g. 1",
    "int_parsing": "use a whole number, e.g. 1",
    "int_from_float": "use a whole number, e.g. 1",
    "float_type": "use a number, e.g. 2.5",
    "float_parsing": "use a number, e.g. 2.5",
    "string_type": 'use a string in quotes, e.g. "value"',
    "bool_type": "use true or false",
    "bool_parsing": "use true or false",
    "list_type": 'use a list, e.g. ["python3", "train.py"]',
    "dict_type": "use a mapping of names to values",
    "model_type": "use a mapping with the fields of this section",
    "model_attributes_type": "use a mapping with the fields of this section",
}


def _fix(error: dict[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"])
    name = field_path(loc)
    if kind == "missing":
        example = {"image": " e.g. gridledger/python:latest"}.get(str(loc[-1]), "")
        return f"add `{name}`{example}"
    if kind == "extra_forbidden":
        model = _model_at(loc)
        allowed = ", ".join(model.model_fields) if model else ""
        return f"remove `{name}` (check the spelling); allowed here: {allowed}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bounds = {
            "greater_than_equal": ("at least", "ge"),
            "greater_than": ("more than", "gt"),
            "less_than_equal": ("at most", "le"),
            "less_than": ("less than", "lt"),
        }[kind]
        return f"use a value {bounds[0]} {ctx.get(bounds[1])}"
    if kind in ("string_too_short", "too_short"):
        return "give a non-empty value"
    if kind in ("string_too_long", "too_long"):
        return f"shorten it to at most {ctx.get('max_length')} characters/items"
    if kind == "literal_error":
        return f"use one of {ctx.get('expected')}"
    if kind == "value_error":
        return "see the problem: it says what to change"
    return _TYPE_FIX.get(kind, "check the value against the job spec (GET /openapi.json)")


def _problem_text(error: dict[str, Any]) -> str:
    msg = str(error["msg"])
    msg = msg.removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] in _TYPE_FIX:
        got = error.get("input")
        shown = type(got).__name__ if isinstance(got, dict | list) else repr(got)[:60]
        return f"{msg} (got {shown})"
    return msg


def problems_of(exc: ValidationError) -> list[Problem]:
    """One problem per error pydantic found, with the dotted field path."""
    return [
        Problem(field_path(tuple(e["loc"])), _problem_text(e), _fix(e))  # type: ignore[arg-type]
        for e in exc.errors(include_url=False)
    ]


def spec_from(data: Any) -> JobSpec:
    """Validate parsed data as a JobSpec (raises ValidationError or BodyError)."""
    if not isinstance(data, dict):
        raise BodyError(
            Problem(
                "(body)",
                f"the spec must be a mapping of fields, got {type(data).__name__}",
                'send an object such as {"image": "gridledger/python:latest"}',
            ),
            status=422,
        )
    return JobSpec.model_validate(data)
