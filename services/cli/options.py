"""Options shared by many commands, as click decorators, and the objects they hand over.

``@api_options`` adds ``--token`` and ``--api`` and passes ``conn`` (a
:class:`Connection`, which builds the API client only when first used, so
``--help`` and usage errors never need a token). ``@output_options`` adds
``-o/--output json|yaml|table`` (``--json`` is an alias of ``-o json``) and
passes ``out`` (an :class:`Output`). A command takes what it needs::

    @click.command()
    @click.argument("job")
    @api_options
    @output_options
    def explain(conn: Connection, out: Output, job: str) -> int:
        out.emit(conn.client.get(f"/v1/jobs/{job}"), text=render_explanation)
        return 0
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import yaml

from services.cli.client import ApiClient, base_url, resolve_token
from services.settings import Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "json", "yaml")


@dataclass
class Connection:
    """Where the API is and which token to send; the client is made on first use."""

    token: str | None = None
    api_url: str | None = None
    _client: ApiClient | None = field(default=None, repr=False)

    @functools.cached_property
    def settings(self) -> Settings:
        return load_settings()

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            settings = self.settings
            self._client = ApiClient(
                base_url(settings, self.api_url), resolve_token(settings, self.token)
            )
        return self._client


@dataclass(frozen=True)
class Output:
    """The format the user asked for; ``emit`` prints data in it."""

    format: str = "table"

    @property
    def machine(self) -> bool:
        """JSON or YAML: print only the document on stdout, no progress or colour."""
        return self.format != "table"

    def dump(self, data: Any) -> str:
        if self.format == "yaml":
            return yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True).rstrip("\n")
        return json.dumps(data, indent=2, default=str)

    def emit(self, data: Any, text: Callable[[Any], str | None] | None = None) -> None:
        """Print ``data`` as JSON/YAML, or as ``text(data)`` for the table format."""
        if self.machine or text is None:
            click.echo(self.dump(data))
            return
        rendered = text(data)
        if rendered is not None:
            click.echo(rendered)


def _plain(data: Any) -> Any:
    """JSON-compatible values only, so YAML shows the same document as JSON."""
    return json.loads(json.dumps(data, default=str))


def api_options(f: F) -> F:
    """Add ``--token`` and ``--api``; the command receives ``conn``."""

    @functools.wraps(f)
    def wrapper(*args: Any, token: str | None, api_url: str | None, **kwargs: Any) -> Any:
        return f(*args, conn=Connection(token=token, api_url=api_url), **kwargs)

    wrapper = click.option(
        "--api",
        "api_url",
        metavar="URL",
        help="API base URL (default: $GRIDLEDGER_API_URL or the settings).",
    )(wrapper)
    wrapper = click.option(
        "--token",
        metavar="TOKEN",
        help="API token (default: $GRIDLEDGER_TOKEN, else the local stack's dev token).",
    )(wrapper)
    return wrapper  # type: ignore[return-value]


def output_options(f: F) -> F:
    """Add ``-o/--output`` and its ``--json`` alias; the command receives ``out``."""

    @functools.wraps(f)
    def wrapper(*args: Any, output: str | None, as_json: bool, **kwargs: Any) -> Any:
        return f(*args, out=Output("json" if as_json else (output or "table")), **kwargs)

    wrapper = click.option("--json", "as_json", is_flag=True, help="Same as -o json.")(wrapper)
    wrapper = click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        help="Output format (default: table; plain text when piped).",
    )(wrapper)
    return wrapper  # type: ignore[return-value]
