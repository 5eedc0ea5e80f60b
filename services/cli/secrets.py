"""``gridledger secret``: the tenant's secrets (set, list, rm), and the operator's key tools.

A secret's value goes to the API once and is never printed back; jobs name secrets in
their spec (``secrets: {HF_TOKEN: hf-token}``) and the agent resolves them at dispatch
(services/secretstore.py says how they are sealed and who may read them).
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import click

from services import secretstore
from services.cli import render
from services.cli.exits import CliError, Exit
from services.cli.options import Connection, Output, api_options, output_options
from services.settings import load_settings


def read_value(from_file: Path | None) -> str:
    """The value from the file, else stdin (asked for, hidden, on a terminal); one trailing
    newline is dropped (``echo``, editors)."""
    if from_file is not None:
        try:
            raw = from_file.read_bytes()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {from_file}: {exc}") from exc
    elif sys.stdin.isatty():
        raw = click.prompt("Value", hide_input=True, err=True).encode()
    else:
        raw = sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(
            "the value is not UTF-8 text; a secret reaches the job as an environment "
            "variable (base64 it first for binary data)",
            Exit.USAGE,
        ) from exc
    return text.removesuffix("\n").removesuffix("\r")


def _path(name: str) -> str:
    return f"/v1/secrets/{urllib.parse.quote(name, safe='')}"


def _secrets_table(secrets: list[dict[str, Any]], clock: render.Clock) -> str:
    rows = [
        [s["name"], s["bytes"], clock.format(s["created_at"]), clock.format(s["updated_at"])]
        for s in secrets
    ]
    return render.table(["NAME", "BYTES", clock.header("CREATED"), clock.header("UPDATED")], rows)


@click.group("secret", short_help="your secrets: set, list, rm (values never shown)")
def secret() -> None:
    """Per-tenant secrets, sealed at rest; a job names them in `secrets:` of its spec."""


@secret.command("set", short_help="store or replace a secret (value from stdin or a file)")
@click.argument("name")
@click.option(
    "--from-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the value from this file instead of stdin.",
)
@api_options
@output_options
def set_secret(conn: Connection, out: Output, name: str, from_file: Path | None) -> int:
    """Store NAME with the value read from stdin (or --from-file); a later set replaces it.

    Use it in a job with `secrets: {ENV_NAME: NAME}`. The value is never printed.
    """
    problem = secretstore.name_problem(name)
    if problem:
        raise click.BadParameter(problem, param_hint="NAME")
    value = read_value(from_file)
    if not value:
        raise CliError("the value is empty; nothing was stored", Exit.USAGE)
    info = conn.client.send("PUT", _path(name), json.dumps({"value": value}).encode())
    out.emit(info, lambda i: f"secret {i['name']} stored ({i['bytes']} bytes)")
    return 0


@secret.command("list", short_help="your secrets: names, sizes and times")
@api_options
@output_options
def list_secrets(conn: Connection, out: Output) -> int:
    """Your secrets: names, sizes and times, never values."""
    out.emit(conn.client.get("/v1/secrets")["secrets"], lambda s: _secrets_table(s, out.clock))
    return 0


@secret.command("rm", short_help="remove a secret")
@click.argument("name")
@api_options
@output_options
def remove_secret(conn: Connection, out: Output, name: str) -> int:
    """Remove NAME; a job that names it afterwards fails `secret_missing` at dispatch."""
    out.emit(conn.client.send("DELETE", _path(name)), lambda r: f"secret {r['name']} removed")
    return 0


@secret.command("new-key", short_help="operators: print a fresh secrets key")
def new_key() -> int:
    """Print 32 random bytes in base64, for GRIDLEDGER_SECRETS_KEY or its key file (0600)."""
    click.echo(secretstore.new_key_text())
    return 0


@secret.command("agent-token", short_help="operators: print a node's agent credential")
@click.argument("node_id")
def agent_token(node_id: str) -> int:
    """Print NODE_ID's agent token, derived from this installation's secrets key.

    Give it to that GPU host only, as GRIDLEDGER_AGENT_TOKEN; the host never needs the key.
    """
    click.echo(secretstore.load_key(load_settings()).agent_token(node_id))
    return 0


COMMANDS = (secret,)
