"""Dev API tokens: ``<home>/tokens.json`` maps each token to its tenant.

``dev up`` writes one token for tenant ``dev`` and one for tenant ``other``
(tests use the second to check that tenants never see each other's jobs).
An existing file is never rewritten, so tokens stay valid across restarts.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from infra.status import ComponentStatus
from schemas.errors import StackError
from services.settings import Settings

TENANTS = ("dev", "other")


def new_token(tenant: str) -> str:
    """A fresh API token; the tenant in it is for people reading a tokens file, never trusted."""
    return f"gl_{tenant}_{secrets.token_urlsafe(24)}"


def load(path: Path) -> dict[str, str]:
    """The ``{token: tenant}`` mapping of a tokens file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StackError(f"cannot read the tokens file {path}: {exc}; fix or delete it") from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise StackError(f"{path} must be a JSON object of token to tenant strings")
    return data


def ensure_tokens(settings: Settings) -> bool:
    """Write the tokens file with one token per tenant of :data:`TENANTS` unless it exists."""
    path = settings.tokens_path
    if path.is_file():
        load(path)
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens = {new_token(tenant): tenant for tenant in TENANTS}
    # Created private from the start: the file holds credentials.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(tokens, f, indent=2)
        f.write("\n")
    return True


def token_for(settings: Settings, tenant: str) -> str:
    """A token of ``tenant`` from the tokens file."""
    for token, owner in load(settings.tokens_path).items():
        if owner == tenant:
            return token
    raise StackError(f"{settings.tokens_path} has no token for tenant {tenant!r}")


def status(settings: Settings) -> ComponentStatus:
    """Whether the tokens file exists, and which tenants it serves."""
    path = settings.tokens_path
    if not path.is_file():
        return ComponentStatus(name="tokens", running=False, address=str(path), detail="missing")
    tenants = sorted(set(load(path).values()))
    return ComponentStatus(
        name="tokens", running=True, address=str(path), detail=f"tenants: {', '.join(tenants)}"
    )
