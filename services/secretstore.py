"""Per-tenant secrets: encrypted at rest in Postgres, resolved only for an attempt's own node.

One key, the operator's: 32 random bytes, base64 (``GRIDLEDGER_SECRETS_KEY``), or a
file holding them (``GRIDLEDGER_SECRETS_KEY_FILE``, default ``<home>/secrets.key``,
written with mode 0600 by ``gridledger dev up``). Two keys are derived from it:

- the **encryption key**: every value is sealed with AES-256-GCM, with the tenant and
  the secret's name as associated data, so a ciphertext copied to another tenant's or
  another name's row does not open. A row says which key sealed it (a short key id),
  so a wrong key is named as such, not reported as tampering;
- the **agent credential** of each node: ``agent_token(key, node_id)``, an HMAC of the
  node id. The API recomputes it to authenticate the agent's resolve call; an operator
  gives each GPU host only its own token (``gridledger secret agent-token NODE``), never
  the key. A tenant token is never accepted there, and an agent token never on the
  tenant routes.

The table ``tenant_secrets`` is the API's (migration ``0002_tenant_secrets.sql``, applied
with the read models' migrations; not derived from the ledger, so replay neither rebuilds
nor compares it). Values never reach the ledger, the views, the read models or logs: the
spec carries secret names only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schemas.errors import GridledgerError
from schemas.spec import SECRET_NAME_RE, SECRET_NAME_RULE
from services.private_files import write_private
from services.settings import Settings

if TYPE_CHECKING:  # the CLI imports this module for names and keys: no database client then
    import asyncpg

KEY_BYTES = 32
MAX_VALUE_BYTES = 64 * 1024
"""A secret is a credential, not a data file: 64 KiB holds any key or certificate chain."""
MAX_SECRETS_PER_TENANT = 1000
_FORMAT = b"\x01"
_NONCE_BYTES = 12
_KEY_ID_BYTES = 4


class SecretsKeyError(GridledgerError):
    """The secrets key is missing, unreadable, or not 32 bytes of base64."""


class SecretOpenError(GridledgerError):
    """A stored value does not open with this key (another key sealed it, or it was altered)."""


@dataclass(frozen=True)
class SecretsKey:
    """The operator's key and what is derived from it."""

    raw: bytes
    source: str
    """Where it came from (the variable or the file), for messages; never the key."""

    @property
    def key_id(self) -> bytes:
        """A short public fingerprint that names the key in each sealed value."""
        return hashlib.sha256(b"gridledger-secrets-key-id\0" + self.raw).digest()[:_KEY_ID_BYTES]

    def _derive(self, purpose: str) -> bytes:
        return hmac.new(self.raw, purpose.encode(), hashlib.sha256).digest()

    def seal(self, tenant: str, name: str, value: bytes) -> bytes:
        """``value`` encrypted for ``tenant``'s secret ``name`` (format byte, key id, nonce,
        ciphertext with its tag)."""
        nonce = os.urandom(_NONCE_BYTES)
        aead = AESGCM(self._derive("encryption"))
        sealed = aead.encrypt(nonce, value, _associated(tenant, name))
        return _FORMAT + self.key_id + nonce + sealed

    def open(self, tenant: str, name: str, blob: bytes) -> bytes:
        """The value :meth:`seal` sealed for this tenant and name; SecretOpenError otherwise."""
        head = 1 + _KEY_ID_BYTES
        if len(blob) < head + _NONCE_BYTES or blob[:1] != _FORMAT:
            raise SecretOpenError(f"secret {name!r} of tenant {tenant!r} is not a sealed value")
        key_id, nonce, sealed = blob[1:head], blob[head : head + _NONCE_BYTES], blob[head + 12 :]
        if key_id != self.key_id:
            raise SecretOpenError(
                f"secret {name!r} of tenant {tenant!r} was sealed with another key "
                f"(key id {key_id.hex()}, this key {self.key_id.hex()} from {self.source}); "
                "start the API with the key it was stored with, or set the secret again"
            )
        try:
            return AESGCM(self._derive("encryption")).decrypt(
                nonce, sealed, _associated(tenant, name)
            )
        except InvalidTag as exc:
            raise SecretOpenError(
                f"secret {name!r} of tenant {tenant!r} does not open with key "
                f"{self.key_id.hex()}: the stored value was altered; set the secret again"
            ) from exc

    def agent_token(self, node_id: str) -> str:
        """Node ``node_id``'s credential for the agent routes (not a tenant token)."""
        digest = hmac.new(self._derive("agent-token"), node_id.encode(), hashlib.sha256)
        return "gla_" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")

    def agent_token_valid(self, node_id: str, token: str) -> bool:
        """Whether ``token`` is ``node_id``'s agent credential (compared in constant time)."""
        return hmac.compare_digest(self.agent_token(node_id).encode(), token.encode())


def _associated(tenant: str, name: str) -> bytes:
    return f"gridledger-secret\0{tenant}\0{name}".encode()


def key_path(settings: Settings) -> Path:
    """The key file: ``secrets_key_file``, else ``<home>/secrets.key``."""
    return settings.secrets_key_file or settings.home / "secrets.key"


def load_key(settings: Settings) -> SecretsKey:
    """The operator's key: ``GRIDLEDGER_SECRETS_KEY``, else the key file; a clear error else."""
    if settings.secrets_key:
        return SecretsKey(_decode(settings.secrets_key, "GRIDLEDGER_SECRETS_KEY"), "the env")
    path = key_path(settings)
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise SecretsKeyError(
            f"no secrets key: {path} does not exist and GRIDLEDGER_SECRETS_KEY is not set. "
            "`gridledger dev up` writes one for the local stack; on a real installation "
            "create 32 random bytes in base64 (`gridledger secret new-key > FILE`, mode "
            "0600) and point GRIDLEDGER_SECRETS_KEY_FILE at it"
        ) from None
    except OSError as exc:
        raise SecretsKeyError(f"cannot read the secrets key {path}: {exc}") from exc
    return SecretsKey(_decode(text, str(path)), str(path))


def _decode(text: str, source: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise SecretsKeyError(
            f"the secrets key in {source} is not {KEY_BYTES} bytes of base64 "
            "(`gridledger secret new-key` prints one)"
        )
    return raw


def new_key_text() -> str:
    """A fresh key, as the key file holds it."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def ensure_key(settings: Settings) -> bool:
    """Write the key file (mode 0600 from its creation) unless a key is configured already."""
    path = key_path(settings)
    if settings.secrets_key or path.is_file():
        load_key(settings)  # an unusable key is said now, not at the first secret
        return False
    write_private(path, new_key_text() + "\n")
    return True


# --------------------------------------------------------------------------- names


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a secret name, or None when it is one."""
    return (
        None if SECRET_NAME_RE.match(name) else f"{name!r} is not a secret name: {SECRET_NAME_RULE}"
    )


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class StoredSecret:
    """What a tenant may see of one of its secrets: never the value."""

    name: str
    created_at: datetime
    updated_at: datetime
    value_bytes: int


async def put(
    pool: asyncpg.Pool, key: SecretsKey, tenant: str, name: str, value: bytes
) -> tuple[StoredSecret, bool] | None:
    """Store (or replace) ``tenant``'s secret ``name``: what is stored and whether it is new;
    None (nothing stored) when it would be a new secret past :data:`MAX_SECRETS_PER_TENANT`."""
    row = await pool.fetchrow(
        "INSERT INTO tenant_secrets (tenant, name, sealed, value_bytes, created_at, updated_at)"
        " SELECT $1, $2, $3, $4, now(), now()"
        " WHERE EXISTS (SELECT 1 FROM tenant_secrets WHERE tenant = $1 AND name = $2)"
        "    OR (SELECT count(*) FROM tenant_secrets WHERE tenant = $1) < $5"
        " ON CONFLICT (tenant, name) DO UPDATE SET sealed = EXCLUDED.sealed,"
        " value_bytes = EXCLUDED.value_bytes, updated_at = now()"
        " RETURNING name, created_at, updated_at, value_bytes, created_at = updated_at AS new",
        tenant,
        name,
        key.seal(tenant, name, value),
        len(value),
        MAX_SECRETS_PER_TENANT,
    )
    if row is None:
        return None
    fields = dict(row)
    new = bool(fields.pop("new"))
    return StoredSecret(**fields), new


async def listing(pool: asyncpg.Pool, tenant: str) -> list[StoredSecret]:
    """``tenant``'s secrets by name: names, sizes and times only."""
    rows = await pool.fetch(
        "SELECT name, created_at, updated_at, value_bytes FROM tenant_secrets"
        " WHERE tenant = $1 ORDER BY name",
        tenant,
    )
    return [StoredSecret(**dict(row)) for row in rows]


async def remove(pool: asyncpg.Pool, tenant: str, name: str) -> bool:
    """Delete ``tenant``'s secret ``name``; False when there was none."""
    done = await pool.execute(
        "DELETE FROM tenant_secrets WHERE tenant = $1 AND name = $2", tenant, name
    )
    return done != "DELETE 0"


async def reveal(
    pool: asyncpg.Pool, key: SecretsKey, tenant: str, names: list[str]
) -> tuple[dict[str, str], list[str]]:
    """The values of ``tenant``'s secrets ``names`` and the names it does not hold."""
    rows = await pool.fetch(
        "SELECT name, sealed FROM tenant_secrets WHERE tenant = $1 AND name = ANY($2::text[])",
        tenant,
        names,
    )
    found = {r["name"]: key.open(tenant, r["name"], bytes(r["sealed"])).decode() for r in rows}
    return found, [n for n in names if n not in found]
