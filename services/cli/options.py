"""Options shared by many commands, as click decorators, and the objects they hand over.

``@api_options`` adds ``--token``, ``--api`` and ``--profile`` and passes
``conn`` (a :class:`Connection`, which resolves the URL and token as
:mod:`services.cli.config` says and builds the API client only when first
used, so ``--help`` and usage errors never need a token). ``@output_options``
adds ``-o/--output table|wide|json|yaml|name|jsonpath=EXPR`` (``--json`` is an alias
of ``-o json``; ``@rows_output_options`` adds ``csv`` and ``parquet``) and ``--utc``, and
passes ``out``
(an :class:`Output`, whose ``clock`` formats times). A command takes what it needs::

    @click.command()
    @click.argument("job")
    @api_options
    @output_options
    def explain(conn: Connection, out: Output, job: str) -> int:
        out.emit(conn.client.get(f"/v1/jobs/{job}"), text=render_explanation)
        return 0
"""

from __future__ import annotations

import csv
import functools
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click
import yaml

from services.cli import config
from services.cli.client import ApiClient
from services.cli.exits import CliError, Exit
from services.cli.jsonpath import JsonPath, JsonPathError
from services.cli.render import Clock, parse_since
from services.settings import Settings, load_settings

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "wide", "json", "yaml", "name")
"""What ``-o`` takes: a table (``wide``: with more columns where a command has them), the
whole document (JSON, YAML), only the names (``name``: job ids, node ids, paths; one a
line), and :data:`JSONPATH`."""

JSONPATH = "jsonpath=EXPR"
"""``-o jsonpath=EXPR``: the fields a JSONPath expression picks (:mod:`services.cli.jsonpath`)."""

NAME_KEYS = ("job_id", "node_id", "path", "profile", "name")
"""What ``-o name`` prints of each item: its first key of these that it has."""


@dataclass
class Connection:
    """Where the API is and which token to send; the client is made on first use."""

    token: str | None = None
    api_url: str | None = None
    profile: str | None = None
    insecure_http: bool = False

    @functools.cached_property
    def settings(self) -> Settings:
        """The local settings, read once per command and only when needed."""
        return load_settings()

    @functools.cached_property
    def target(self) -> config.Target:
        """The API and token this command uses, from flags, environment and profile."""
        return config.resolve(
            self.settings, token=self.token, api_url=self.api_url, profile=self.profile
        )

    @functools.cached_property
    def client(self) -> ApiClient:
        """An API client for the target; a CliError with advice when there is no token.

        When the saved tokens belong to other APIs and a person is at the terminal, the
        token for this API is asked for (without echo) instead.
        """
        target = self.target
        token, token_from = target.token, target.token_from
        if not token and target.withheld and sys.stdin.isatty():
            click.echo(f"{target.withheld}; a saved token is only sent to its own API", err=True)
            token = click.prompt(f"token for {target.api_url}", hide_input=True, err=True)
            token_from = "the token typed at the prompt"
        if not token:
            raise CliError(
                config.no_token_advice(self.settings, target.withheld), Exit.NOT_AUTHORISED
            )
        return ApiClient(
            target.api_url,
            token.strip(),
            token_from=token_from,
            insecure_http=self.insecure_http,
        )


@dataclass(frozen=True)
class Output:
    """The format the user asked for; ``emit`` prints data in it."""

    format: str = "table"
    utc: bool = False
    path: JsonPath | None = None
    """The expression of ``-o jsonpath=EXPR``."""

    @functools.cached_property
    def clock(self) -> Clock:
        """How times are shown: local time, or UTC with --utc."""
        return Clock(utc=self.utc)

    @property
    def machine(self) -> bool:
        """Not a table: print only the document (or what -o picks of it) on stdout, no
        progress or colour."""
        return self.format not in ("table", "wide")

    def dump(self, data: Any) -> str:
        """The whole document in the chosen machine format, or what ``name``/``jsonpath``
        pick of it."""
        if self.format == "yaml":
            return yaml.safe_dump(_plain(data), sort_keys=False, allow_unicode=True).rstrip("\n")
        if self.format == "name":
            return "\n".join(names(_plain(data)))
        if self.path is not None:
            return self.path.render(_plain(data))
        return json.dumps(data, indent=2, default=str)

    def line(self, data: Any) -> str:
        """One document per line (JSON) or per ``---`` document (YAML), for streams."""
        if self.format == "yaml":
            return "---\n" + self.dump(data)
        if self.format == "json":
            return json.dumps(data, default=str)
        return self.dump(data)

    def emit(
        self,
        data: Any,
        text: Callable[[Any], str | None] | None = None,
        wide: Callable[[Any], str | None] | None = None,
    ) -> None:
        """Print ``data`` in the chosen format: ``text(data)`` for the table (``wide(data)``
        for ``-o wide`` where the command has more columns), the document otherwise."""
        if self.machine or text is None:
            rendered: str | None = self.dump(data)
        else:
            rendered = (wide or text)(data) if self.format == "wide" else text(data)
        if rendered:
            click.echo(rendered)

    def emit_rows(
        self,
        data: Any,
        rows: list[dict[str, Any]],
        text: Callable[[Any], str | None] | None = None,
    ) -> None:
        """:meth:`emit`, except that ``-o csv`` prints ``rows``: a header of the first row's
        keys, then one line per row (RFC 4180 quoting); ``-o parquet`` writes them as one
        Parquet file to stdout (a Decimal value becomes an exact decimal column)."""
        if self.format == "parquet":
            write_parquet(rows)
            return
        if self.format != "csv":
            self.emit(data, text)
            return
        buffer = io.StringIO()
        if rows:
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        click.echo(buffer.getvalue(), nl=False)


def write_parquet(rows: list[dict[str, Any]]) -> None:
    """``rows`` as a Parquet file on stdout, which must not be a terminal (it is binary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from services.cli.exits import CliError, Exit

    stdout = click.get_binary_stream("stdout")
    if stdout.isatty():
        raise CliError(
            "-o parquet writes a binary file: redirect it, e.g. > usage.parquet", Exit.USAGE
        )
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    stdout.write(buffer.getvalue())
    stdout.flush()


def names(data: Any) -> list[str]:
    """``-o name``: each item's name (:data:`NAME_KEYS`); a document holding a list of items
    (``{"nodes": [...]}``) names its items."""
    if isinstance(data, list):
        return [n for item in data for n in names(item)]
    if isinstance(data, dict):
        for key in NAME_KEYS:
            if isinstance(data.get(key), str | int):
                return [str(data[key])]
        return [n for value in data.values() if isinstance(value, list) for n in names(value)]
    return []


class OutputFormat(click.ParamType):
    """``-o``'s value: one of ``formats`` or ``jsonpath=EXPR``, whose expression is compiled
    here, so a bad one is a usage error before anything runs."""

    name = "FORMAT"

    def __init__(self, formats: tuple[str, ...] = FORMATS) -> None:
        self.formats = formats

    @property
    def shown(self) -> tuple[str, ...]:
        """Every value, as ``-h`` and errors list them."""
        return (*self.formats, JSONPATH)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """What ``-h`` shows as the value."""
        return "[" + "|".join(self.shown) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``(format, JsonPath or None)``."""
        if isinstance(value, tuple):
            return value
        text = str(value)
        if text in self.formats:
            return text, None
        if text.startswith("jsonpath="):
            try:
                return "jsonpath", JsonPath.compile(text.removeprefix("jsonpath="))
            except JsonPathError as exc:
                self.fail(str(exc), param, ctx)
        self.fail(f"{text!r} is none of {', '.join(self.shown)}", param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[Any]:
        """The formats, ``jsonpath=`` without an expression."""
        from click.shell_completion import CompletionItem

        choices = [*self.formats, "jsonpath="]
        return [CompletionItem(c) for c in choices if c.startswith(incomplete)]


@dataclass(frozen=True)
class Deadline:
    """When a wait gives up (``--timeout``); no limit without one."""

    timeout_s: float | None = None
    began: float = field(default_factory=time.monotonic)

    def passed(self) -> bool:
        """True once the timeout is over (never without one)."""
        return self.timeout_s is not None and time.monotonic() - self.began >= self.timeout_s

    def remaining(self, otherwise: float) -> float:
        """Seconds left (at least a tenth of one), or ``otherwise`` without a timeout."""
        if self.timeout_s is None:
            return otherwise
        return max(0.1, self.timeout_s - (time.monotonic() - self.began))

    def check(self, what: str, job_id: str) -> None:
        """Raise the TIMED_OUT error once the timeout is over: ``what`` is the job's state."""
        if self.passed():
            raise CliError(
                f"gave up waiting after {self.timeout_s:g} s (--timeout): {job_id} is still "
                f"{what}; it goes on (`gridledger status {job_id} --watch` to follow it)",
                Exit.TIMED_OUT,
            )


def _timeout(ctx: click.Context, param: click.Parameter, value: str | None) -> Deadline:
    if value is None:
        return Deadline()
    from services.cli.render import parse_duration

    seconds = parse_duration(value)
    if seconds is None:
        try:
            seconds = float(value)
        except ValueError:
            seconds = None
    if seconds is None or seconds <= 0:
        raise click.BadParameter(f"{value!r} is no duration; use seconds or e.g. 90s, 10m, 1h")
    return Deadline(seconds)


def moment(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A time option's value (``10m`` ago, ``14:05``, ``2026-12-01T14:05[+01:00]``) as ISO
    8601 in UTC; a time without a zone is local, or UTC with ``--utc``."""
    if value is None:
        return None
    try:
        return parse_since(value, Clock(utc=bool(ctx.params.get("utc")))).isoformat()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def as_of_option(f: F) -> F:
    """``--as-of TIME`` (``status``, ``explain``): the job as the ledger knew it then."""
    return click.option(
        "--as-of",
        callback=moment,
        metavar="TIME",
        help="The job as the ledger knew it then: its events appended (broker time) and meter "
        "ticks recorded by TIME (2026-12-01T14:05[+01:00], 14:05, or 10m ago).",
    )(f)


def timeout_option(f: F) -> F:
    """Add ``--timeout DURATION`` to a command that waits; it receives ``deadline``."""
    return click.option(
        "--timeout",
        "deadline",
        metavar="DURATION",
        callback=_timeout,
        help="Give up waiting after this long (seconds, or 90s, 10m, 1h); exit 9 then, "
        "the job goes on. Default: no limit.",
    )(f)


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a JOB argument: the user's most recent job ids."""
    from click.shell_completion import CompletionItem

    conn = Connection(
        token=ctx.params.get("token"),
        api_url=ctx.params.get("api_url"),
        profile=ctx.params.get("profile"),
    )
    try:
        client = conn.client
        client.timeout = 3.0
        jobs = client.get("/v1/jobs?limit=200")["jobs"]
    except Exception:  # noqa: BLE001 - a completion must never print a traceback into the shell
        return []
    return [
        CompletionItem(j["job_id"], help=f"{j['status']} {j.get('name') or ''}".strip())
        for j in jobs
        if j["job_id"].startswith(incomplete)
    ]


def _plain(data: Any) -> Any:
    """JSON-compatible values only, so YAML shows the same document as JSON."""
    return json.loads(json.dumps(data, default=str))


def api_options(f: F) -> F:
    """Add ``--token``, ``--api``, ``--profile`` and ``--insecure-http``; the command receives
    ``conn``."""

    @functools.wraps(f)
    def wrapper(
        *args: Any,
        token: str | None,
        api_url: str | None,
        profile: str | None,
        insecure_http: bool,
        **kwargs: Any,
    ) -> Any:
        # `gridledger --profile X status` and `gridledger status --profile X` both work.
        profile = profile or click.get_current_context().find_root().params.get("profile")
        conn = Connection(token, api_url, profile, insecure_http)
        return f(*args, conn=conn, **kwargs)

    wrapper = insecure_http_option(wrapper)

    wrapper = click.option(
        "--profile",
        metavar="NAME",
        help="Profile of the config file (default: $GRIDLEDGER_PROFILE, the file's "
        "default_profile, else 'default').",
    )(wrapper)

    wrapper = click.option(
        "--api",
        "api_url",
        metavar="URL",
        help="API base URL (default: $GRIDLEDGER_API_URL, the profile, the local stack).",
    )(wrapper)
    wrapper = click.option(
        "--token",
        metavar="TOKEN",
        help="API token (default: $GRIDLEDGER_TOKEN, the profile, the local stack's dev token).",
    )(wrapper)
    return wrapper  # type: ignore[return-value]


def insecure_http_option(f: F) -> F:
    """``--insecure-http``: allow sending the token over plain http to a non-loopback host."""
    return click.option(
        "--insecure-http",
        is_flag=True,
        help="Allow plain http to an API that is not on this machine (the token travels "
        "unencrypted; or $GRIDLEDGER_INSECURE_HTTP=1).",
    )(f)


def output_options(f: F) -> F:
    """Add ``-o/--output``, its ``--json`` alias and ``--utc``; the command receives ``out``."""
    return _output_options(f, FORMATS)


ROW_FORMATS = (*FORMATS, "csv", "parquet")


def rows_output_options(f: F, formats: tuple[str, ...] = ROW_FORMATS) -> F:
    """:func:`output_options` with ``-o csv`` and ``-o parquet`` too, for a command whose
    output is rows (it prints them with :meth:`Output.emit_rows`); ``formats``: all it
    takes."""
    return _output_options(f, formats)


def _output_options(f: F, formats: tuple[str, ...]) -> F:
    @functools.wraps(f)
    def wrapper(
        *args: Any,
        output: tuple[str, JsonPath | None] | None,
        as_json: bool,
        utc: bool,
        **kwargs: Any,
    ) -> Any:
        chosen, path = ("json", None) if as_json else (output or ("table", None))
        return f(*args, out=Output(chosen, utc=utc, path=path), **kwargs)

    wrapper = click.option(
        "--utc",
        is_flag=True,
        is_eager=True,  # read before --since and other times that depend on the zone
        help="Show times in UTC (default: local time, honouring TZ).",
    )(wrapper)

    wrapper = click.option("--json", "as_json", is_flag=True, help="Same as -o json.")(wrapper)
    wrapper = click.option(
        "-o",
        "--output",
        type=OutputFormat(formats),
        help="Output format (default: table; plain text when piped). wide: more columns; "
        "name: the ids, one a line; jsonpath=EXPR: the fields EXPR picks, e.g. "
        "'jsonpath={.status}' or 'jsonpath={[*].job_id}'.",
    )(wrapper)
    return wrapper  # type: ignore[return-value]
