"""The API's tokens file: who may call the API, and as which tenant.

The file (``GRIDLEDGER_TOKENS_FILE``, default ``<home>/tokens.json``) holds no
token, only each token's sha256 and its tenant::

    {"version": 1, "tokens": [
      {"id": "tk-3f9a1c2b7d10", "tenant": "dev", "sha256": "<64 hex>",
       "created_at": "2026-12-01T22:40:00Z"}]}

A token is ``gl_<tenant>_`` plus 32 random bytes (URL-safe base64), so a plain
sha256 is enough: there is nothing to guess a dictionary of. The id names a
token to the operator (``gridledger tokens list|revoke``) and says nothing about
it. ``gridledger tokens add TENANT`` prints a new token once; it is never
stored in the clear.

An older file that maps each token itself to its tenant (``{token: tenant}``)
is still read, so a running stack keeps working, and
:func:`migrate` rewrites it hashed (``dev up`` and every ``tokens`` command do).

The dev stack's own clients (the CLI's default, the demo, the tests) need the
plaintext of the ``dev`` and ``other`` tenants' tokens: ``dev up`` keeps those,
and only those, in ``dev-tokens.json`` beside the tokens file (``{tenant:
token}``, 0600). A deployment has no such file unless ``dev init`` wrote it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from services.clock import utcnow
from services.private_files import write_private

VERSION = 1
TENANT_RULE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
"""A tenant name: what can stand in an S3 prefix and a URL without escaping."""
ID_RULE = re.compile(r"^tk-[0-9a-f]{12}$")
SHA256_RULE = re.compile(r"^[0-9a-f]{64}$")
DEV_TOKENS_NAME = "dev-tokens.json"


class TokensFileError(ValueError):
    """The tokens file cannot be used; the message names the file's problem, not its path."""


@dataclass(frozen=True)
class TokenEntry:
    """One token as the file holds it: never the token itself."""

    id: str
    tenant: str
    sha256: str
    created_at: str

    def as_json(self) -> dict[str, str]:
        """The entry as the file stores it."""
        return asdict(self)


@dataclass(frozen=True)
class TokensFile:
    """The parsed file; ``plaintext`` keeps an old ``{token: tenant}`` file's tokens until
    :func:`migrate` writes them hashed."""

    entries: tuple[TokenEntry, ...] = ()
    plaintext: dict[str, str] | None = None

    def tenant(self, token: str) -> str | None:
        """The tenant of ``token`` or None; every entry is compared, in constant time."""
        digest = digest_of(token)
        found = None
        for entry in self.entries:
            if hmac.compare_digest(entry.sha256, digest):
                found = entry.tenant
        return found

    @property
    def tenants(self) -> set[str]:
        """The tenants that have at least one token."""
        return {e.tenant for e in self.entries}

    def render(self) -> str:
        """The file's content (always the hashed format)."""
        return (
            json.dumps(
                {"version": VERSION, "tokens": [e.as_json() for e in self.entries]}, indent=2
            )
            + "\n"
        )


def digest_of(token: str) -> str:
    """What the file stores of a token: its sha256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(tenant: str) -> str:
    """A fresh API token; the tenant in it is for people reading it, never trusted."""
    return f"gl_{tenant}_{secrets.token_urlsafe(32)}"


def entry_for(token: str, tenant: str) -> TokenEntry:
    """A new entry for ``token``: a random id, its sha256, the time now."""
    created = utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    return TokenEntry(f"tk-{secrets.token_hex(6)}", tenant, digest_of(token), created)


def check_tenant(tenant: str) -> str:
    """``tenant`` when it is a valid tenant name, else a TokensFileError with the rule."""
    if not TENANT_RULE.match(tenant):
        raise TokensFileError(
            f"tenant {tenant!r} is not a valid name: 1 to 63 of a-z, 0-9, '-' and '_', "
            "starting with a letter or digit"
        )
    return tenant


def parse(text: str) -> TokensFile:
    """The tokens file's content, checked; a TokensFileError names the first problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokensFileError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TokensFileError("must be a JSON object")
    if "tokens" not in data:
        return _parse_plaintext(data)
    if data.get("version") != VERSION:
        raise TokensFileError(f"'version' must be {VERSION}")
    raw = data["tokens"]
    if not isinstance(raw, list):
        raise TokensFileError("'tokens' must be a list")
    entries = tuple(_parse_entry(i, item) for i, item in enumerate(raw))
    ids = [e.id for e in entries]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        raise TokensFileError(f"token id {duplicate} appears twice")
    return TokensFile(entries)


def _parse_entry(index: int, item: Any) -> TokenEntry:
    where = f"tokens[{index}]"
    if not isinstance(item, dict):
        raise TokensFileError(f"{where} must be an object")
    missing = sorted({"id", "tenant", "sha256"} - set(item))
    if missing:
        raise TokensFileError(f"{where} lacks {', '.join(missing)}")
    values = {k: item.get(k, "") for k in ("id", "tenant", "sha256", "created_at")}
    if not all(isinstance(v, str) for v in values.values()):
        raise TokensFileError(f"{where}: every value must be a string")
    if not ID_RULE.match(values["id"]):
        raise TokensFileError(f"{where}.id must look like tk-<12 hex digits>")
    if not SHA256_RULE.match(values["sha256"]):
        raise TokensFileError(f"{where}.sha256 must be 64 lowercase hex digits")
    try:
        check_tenant(values["tenant"])
    except TokensFileError as exc:
        raise TokensFileError(f"{where}: {exc}") from None
    return TokenEntry(**values)


def _parse_plaintext(data: dict[str, Any]) -> TokensFile:
    """An old file, ``{token: tenant}``: hashed in memory, kept for :func:`migrate`."""
    for token, tenant in data.items():
        if not isinstance(tenant, str) or not isinstance(token, str) or not token:
            raise TokensFileError(
                "must be {'version': 1, 'tokens': [...]} (or an old {token: tenant} map)"
            )
        check_tenant(tenant)
    entries = tuple(
        TokenEntry(
            f"tk-{digest_of(token)[:12]}", tenant, digest_of(token), created_at=""
        )  # a stable id: the same old file always gives the same ids
        for token, tenant in data.items()
    )
    return TokensFile(entries, plaintext=dict(data))


def load(path: Path) -> TokensFile:
    """The file at ``path``; a missing or broken file is a TokensFileError."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TokensFileError("does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokensFileError(f"cannot be read ({exc.__class__.__name__})") from None
    return parse(text)


def dev_tokens_path(tokens_path: Path) -> Path:
    """Where the dev stack keeps its own clients' tokens: beside the tokens file."""
    return tokens_path.with_name(DEV_TOKENS_NAME)


def load_dev_tokens(tokens_path: Path) -> dict[str, str]:
    """``{tenant: token}`` the local clients use: ``dev-tokens.json``, else the first token
    of each tenant of an old plaintext tokens file; empty when neither has any."""
    try:
        data = json.loads(dev_tokens_path(tokens_path).read_text())
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}
    except (OSError, ValueError):
        pass
    try:
        plaintext = load(tokens_path).plaintext or {}
    except TokensFileError:
        return {}
    found: dict[str, str] = {}
    for token, tenant in plaintext.items():
        found.setdefault(tenant, token)
    return found


def save(path: Path, tokens: TokensFile) -> None:
    """Replace the tokens file, privately (services.private_files)."""
    write_private(path, tokens.render())


def save_dev_tokens(tokens_path: Path, by_tenant: dict[str, str]) -> None:
    """Replace ``dev-tokens.json`` beside the tokens file, privately."""
    write_private(dev_tokens_path(tokens_path), json.dumps(by_tenant, indent=2) + "\n")


def migrate(path: Path) -> bool:
    """Rewrite an old plaintext file hashed, every token kept valid; True when it did.

    The plaintext of one token per tenant is written to ``dev-tokens.json`` first
    (unless that file exists), so the local clients that read it keep working.
    """
    current = load(path)
    if current.plaintext is None:
        return False
    if not dev_tokens_path(path).is_file():
        save_dev_tokens(path, load_dev_tokens(path))
    save(path, TokensFile(current.entries))
    return True


def add(path: Path, tenant: str) -> tuple[str, TokenEntry]:
    """A new token for ``tenant`` added to the file (created when missing): the token,
    to be shown once, and its entry."""
    check_tenant(tenant)
    if path.exists():
        migrate(path)
    current = load(path) if path.exists() else TokensFile()
    token = new_token(tenant)
    entry = entry_for(token, tenant)
    save(path, TokensFile((*current.entries, entry)))
    return token, entry


def revoke(path: Path, token_id: str) -> TokenEntry:
    """Remove the token ``token_id`` from the file; its entry, or TokensFileError."""
    migrate(path)
    current = load(path)
    kept = tuple(e for e in current.entries if e.id != token_id)
    if len(kept) == len(current.entries):
        known = ", ".join(e.id for e in current.entries) or "none"
        raise TokensFileError(f"has no token {token_id} (ids: {known})")
    save(path, TokensFile(kept))
    return next(e for e in current.entries if e.id == token_id)
