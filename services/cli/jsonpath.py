"""``-o jsonpath=EXPR``: pick fields out of a command's JSON document, as kubectl does.

The subset every script needs, with kubectl's spelling: ``{.status}`` or ``.status``
or ``$.status`` (braces and ``$`` optional); ``.key`` and ``['key']``; ``[N]``
(negative from the end); ``[*]`` and ``.*`` (every item or value); ``..key`` (every
``key`` at any depth). Each match prints on its own line: strings as they are, any
other value as compact JSON. A key that is not there matches nothing and prints
nothing, as kubectl's default (``--allow-missing-template-keys``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_STEP = re.compile(
    r"""\.\.(?P<deep>[A-Za-z_][\w-]*)      # ..key
    | \.(?P<key>[A-Za-z_][\w-]*)           # .key
    | \.\*                                  # .*
    | \[\s*(?P<index>-?\d+)\s*\]            # [N]
    | \[\s*\*\s*\]                          # [*]
    | \[\s*(?P<q>['"])(?P<quoted>.*?)(?P=q)\s*\]   # ['key']
    """,
    re.X,
)


class JsonPathError(ValueError):
    """An expression outside the supported subset; the message says where."""


@dataclass(frozen=True)
class JsonPath:
    """A compiled expression: :meth:`find` gives its matches in a document."""

    text: str
    steps: tuple[tuple[str, Any], ...]

    @classmethod
    def compile(cls, text: str) -> JsonPath:
        """Parse ``text``; a JsonPathError names what could not be read."""
        body = text.strip()
        if body.startswith("{") and body.endswith("}"):
            body = body[1:-1].strip()
        if body.startswith("$"):
            body = body[1:]
        if not body:
            raise JsonPathError(f"{text!r} selects nothing; e.g. {{.status}} or {{[*].job_id}}")
        if not body.startswith((".", "[")):
            body = "." + body
        steps: list[tuple[str, Any]] = []
        at = 0
        while at < len(body):
            match = _STEP.match(body, at)
            if match is None:
                raise JsonPathError(
                    f"cannot read {body[at:]!r} in {text!r}; use .key, ['key'], [N], [*] or ..key"
                )
            if match["deep"] is not None:
                steps.append(("deep", match["deep"]))
            elif match["key"] is not None:
                steps.append(("key", match["key"]))
            elif match["quoted"] is not None:
                steps.append(("key", match["quoted"]))
            elif match["index"] is not None:
                steps.append(("index", int(match["index"])))
            else:
                steps.append(("all", None))
            at = match.end()
        return cls(text, tuple(steps))

    def find(self, document: Any) -> list[Any]:
        """Every value the expression selects in ``document``, in document order."""
        current = [document]
        for kind, arg in self.steps:
            current = [found for value in current for found in _step(kind, arg, value)]
        return current

    def render(self, document: Any) -> str:
        """The matches, one per line (strings raw, the rest as JSON); empty for none."""
        return "\n".join(
            v if isinstance(v, str) else json.dumps(v, default=str) for v in self.find(document)
        )


def _step(kind: str, arg: Any, value: Any) -> Iterator[Any]:
    if kind == "key":
        if isinstance(value, dict) and arg in value:
            yield value[arg]
    elif kind == "index":
        if isinstance(value, list) and -len(value) <= arg < len(value):
            yield value[arg]
    elif kind == "all":
        if isinstance(value, list):
            yield from value
        elif isinstance(value, dict):
            yield from value.values()
    else:  # deep
        yield from _deep(arg, value)


def _deep(key: str, value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        if key in value:
            yield value[key]
        for child in value.values():
            yield from _deep(key, child)
    elif isinstance(value, list):
        for child in value:
            yield from _deep(key, child)
