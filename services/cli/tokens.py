"""``gridledger tokens add TENANT | list | revoke ID | migrate``: the API's tokens, for operators.

They edit the tokens file the API reads (``GRIDLEDGER_TOKENS_FILE``, default
``<home>/tokens.json``) on this machine; a running API picks the change up at
its next request. The file holds only each token's sha256, so ``add`` prints
the new token once and it cannot be shown again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from services import tokens
from services.cli import render
from services.cli.exits import CliError, Exit
from services.cli.options import Output, output_options
from services.settings import load_settings


def _path() -> Path:
    return load_settings().tokens_path


def _fail(path: Path, exc: tokens.TokensFileError, code: Exit = Exit.ERROR) -> CliError:
    return CliError(f"the tokens file {path} {exc}", code)


@click.group("tokens", short_help="issue, list and revoke API tokens (operators)")
def tokens_group() -> None:
    """Issue, list and revoke the API's tokens in GRIDLEDGER_TOKENS_FILE (stored hashed)."""


@tokens_group.command("add", short_help="issue a new token for TENANT (printed once)")
@click.argument("tenant")
@output_options
def add(out: Output, tenant: str) -> int:
    """Issue a new token for TENANT and print it; only its sha256 is stored, so keep it now."""
    path = _path()
    try:
        token, entry = tokens.add(path, tenant)
    except tokens.TokensFileError as exc:
        raise _fail(path, exc) from None
    payload = {"id": entry.id, "tenant": entry.tenant, "token": token, "file": str(path)}
    out.emit(
        payload,
        lambda p: (
            f"{p['token']}\n(token {p['id']} for tenant {p['tenant']}, added to {p['file']}; "
            "it is not stored and cannot be shown again)"
        ),
    )
    return 0


def _table(data: dict[str, Any]) -> str:
    rows = [[t["id"], t["tenant"], t["created_at"] or "-"] for t in data["tokens"]]
    if not rows:
        return f"no tokens in {data['file']}; `gridledger tokens add TENANT` issues one"
    return render.table(["ID", "TENANT", "CREATED"], rows)


@tokens_group.command("list", short_help="the tokens' ids and tenants (never the tokens)")
@output_options
def list_tokens(out: Output) -> int:
    """List each token's id, tenant and creation time."""
    path = _path()
    try:
        loaded = tokens.load(path) if path.exists() else tokens.TokensFile()
    except tokens.TokensFileError as exc:
        raise _fail(path, exc) from None
    payload = {
        "file": str(path),
        "tokens": [
            {"id": e.id, "tenant": e.tenant, "created_at": e.created_at} for e in loaded.entries
        ],
    }
    out.emit(payload, _table)
    return 0


@tokens_group.command("revoke", short_help="revoke the token ID (see `tokens list`)")
@click.argument("token_id", metavar="ID")
def revoke(token_id: str) -> int:
    """Remove the token ID from the file; the API refuses it from its next request on."""
    path = _path()
    try:
        entry = tokens.revoke(path, token_id)
    except tokens.TokensFileError as exc:
        raise _fail(path, exc, Exit.NOT_FOUND) from None
    click.echo(f"revoked token {entry.id} of tenant {entry.tenant} in {path}")
    return 0


@tokens_group.command("migrate", short_help="store an old plaintext tokens file hashed")
def migrate() -> int:
    """Rewrite an old ``{token: tenant}`` file as hashes; every token stays valid."""
    path = _path()
    try:
        changed = tokens.migrate(path)
    except tokens.TokensFileError as exc:
        raise _fail(path, exc) from None
    click.echo(f"{path}: " + ("stored hashed" if changed else "already hashed; nothing to do"))
    return 0


COMMANDS = (tokens_group,)
