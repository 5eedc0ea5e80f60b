"""Turning a submitted body into a JobSpec, or into problems that name the field and the fix.

A body is checked before it is parsed: at most :data:`MAX_DEPTH` levels of nesting
and no number literal of more than :data:`MAX_NUMBER_DIGITS` digits (a parser would
recurse or convert without bound), YAML with at most :data:`MAX_ALIASES` aliases (an
alias bomb expands exponentially). The size of the body is bounded before it is
read (``api_max_body_bytes``, a 413), the encoded spec after it validated
(``api_max_spec_bytes``, a 422).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from http import HTTPStatus
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from schemas.spec import LIMITS, JobSpec, character_problem, encoded_size

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


MAX_DEPTH = 32
"""Nesting a body may have: a spec is four levels deep."""
MAX_NUMBER_DIGITS = 40
"""Digits of one number literal: every number of a spec has far fewer."""
MAX_ALIASES = 16
"""YAML aliases (``*name``) one body may use."""
MAX_PROBLEMS = 20
"""Problems one answer lists; a hostile body can have a problem per item."""

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_LONG_NUMBER = re.compile(rf"\d{{{MAX_NUMBER_DIGITS + 1},}}")
_YAML_INT = "tag:yaml.org,2002:int"


def _too_deep(depth: int) -> BodyError:
    return BodyError(
        Problem(
            "(body)",
            f"nested more than {MAX_DEPTH} levels deep (at least {depth})",
            f"a job spec is a few levels deep; send at most {MAX_DEPTH}",
        )
    )


def _too_long_number(where: str) -> BodyError:
    return BodyError(
        Problem(
            "(body)",
            f"a number in {where} has more than {MAX_NUMBER_DIGITS} digits",
            "use a number the field's range allows (GET /openapi.json lists them)",
        )
    )


def check_json_shape(text: str) -> None:
    """Refuse JSON nested too deep or with a too long number, without parsing it."""
    bare = _JSON_STRING.sub('""', text)  # what is left holds no string's content
    depth = 0
    for bracket in _BRACKET.finditer(bare):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise _too_deep(depth)
    number = _LONG_NUMBER.search(bare)
    if number is not None:
        raise _too_long_number("the body")


def check_yaml_shape(text: str) -> None:
    """The same for YAML, from the parser's events (iterative: no recursion, no values)."""
    resolver = yaml.resolver.Resolver()
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(depth)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise BodyError(
                    Problem(
                        "(body)",
                        f"uses more than {MAX_ALIASES} YAML aliases",
                        "write the values out instead of repeating anchors",
                    )
                )
        elif (
            isinstance(event, yaml.ScalarEvent)
            and not event.style  # plain (the C parser says "", the Python one None)
            and len(event.value) > MAX_NUMBER_DIGITS
            and resolver.resolve(yaml.ScalarNode, event.value, (True, False)) == _YAML_INT
        ):
            mark = event.start_mark
            raise _too_long_number(f"line {mark.line + 1}" if mark else "the body")


def line_problem(value: str, max_chars: int) -> str | None:
    """Why ``value`` is not a one-line string of at most ``max_chars`` (a header, a
    parameter), or None."""
    if len(value) > max_chars:
        return f"is {len(value)} characters; at most {max_chars} are allowed"
    return character_problem(value)


def printable(value: str) -> bool:
    """Whether a message may quote ``value`` as it is."""
    return len(value) <= LIMITS["job_id_chars"] and character_problem(value) is None


def valid_job_id(job_id: str) -> bool:
    """Whether ``job_id`` can name a job at all (the spec's bound of an id): any other
    answers 404 without a query."""
    return 0 < len(job_id) <= LIMITS["job_id_chars"] and character_problem(job_id) is None


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
        check_json_shape(text)
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
        check_yaml_shape(text)
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
        if part == "[key]":
            continue  # the problem is the map key itself, named by the part before
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
    "finite_number": "use a finite number (Infinity and NaN are not numbers a job can use)",
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
    """One problem per error pydantic found, with the dotted field path (the first
    :data:`MAX_PROBLEMS`, and a count of the others)."""
    errors = exc.errors(include_url=False)
    out = [
        Problem(field_path(tuple(e["loc"])), _problem_text(e), _fix(e))  # type: ignore[arg-type]
        for e in errors[:MAX_PROBLEMS]
    ]
    if len(errors) > MAX_PROBLEMS:
        out.append(
            Problem(
                "(body)",
                f"{len(errors) - MAX_PROBLEMS} more problems not listed",
                "fix the ones listed and submit again",
            )
        )
    return out


def check_encoded_size(spec: JobSpec, limit: int) -> None:
    """Refuse a valid spec whose encoding is larger than ``limit`` bytes (a 422)."""
    size = encoded_size(spec)
    if size > limit:
        raise BodyError(
            Problem(
                "(spec)",
                f"the spec encodes to {size} bytes; a job's spec may take at most {limit}",
                "put large inputs (data, long commands, many env values) in the image or "
                "a file the job reads, not in the spec",
            ),
            status=422,
        )


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


def title(status: int) -> str:
    """The title of a problem of ``status``: the status's phrase (e.g. "Not Found")."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_document(
    status: int, error: str, title: str, detail: str, **extra: Any
) -> dict[str, Any]:
    """An RFC 9457 problem document with gridledger's ``error`` code: every refusal's body."""
    return {
        "type": f"/problems/{error}",
        "title": title,
        "status": status,
        "detail": detail,
        "error": error,
        **extra,
    }


def refusal(status: int, error: str, items: list[Problem]) -> dict[str, Any]:
    """The problem document listing each problem with its field and fix: every validation
    error's shape (the API's, and ``gridledger validate``'s offline)."""
    return problem_document(
        status,
        error,
        title(status),
        "; ".join(f"{p.field}: {p.problem}" for p in items),
        problems=[p.to_json() for p in items],
    )


class SpecRefusedError(Exception):
    """A body that is no valid spec: the status, the API's ``error`` and every problem."""

    def __init__(self, status: int, error: str, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{p.field}: {p.problem}" for p in problems))
        self.status = status
        self.error = error
        self.problems = problems

    def document(self) -> dict[str, Any]:
        """The problem document the API answers with."""
        return refusal(self.status, self.error, self.problems)


def too_large(size: int | None, limit: int) -> SpecRefusedError:
    """The refusal of a body over the API's limit (413)."""
    got = f"{size} bytes" if size is not None else "larger than the limit"
    problem = Problem(
        "(body)",
        f"the request body is {got}; the API accepts at most {limit} bytes",
        "put large inputs (data, long commands) in the image or a mounted file, not in the spec",
    )
    return SpecRefusedError(413, "body_too_large", [problem])


def read_spec(
    raw: bytes, content_type: str, limit: int | None = None, max_spec_bytes: int | None = None
) -> JobSpec:
    """The spec of a body, or :class:`SpecRefusedError`: the one reading of a spec, for the
    API's submit and dry run and for ``gridledger validate`` (offline, same messages).
    ``limit``: the most bytes a body may have; ``max_spec_bytes``: its encoded spec."""
    if limit is not None and len(raw) > limit:
        raise too_large(len(raw), limit)
    try:
        spec = spec_from(parse_body(raw, content_type))
        if max_spec_bytes is not None:
            check_encoded_size(spec, max_spec_bytes)
    except BodyError as exc:
        raise SpecRefusedError(exc.status, "invalid_body", exc.problems) from exc
    except ValidationError as exc:
        raise SpecRefusedError(422, "invalid_spec", problems_of(exc)) from exc
    return spec
