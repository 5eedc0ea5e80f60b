"""Dev API tokens: one token each for tenants ``dev`` and ``other``.

``dev up`` (and ``dev init``) write them: their sha256 to the tokens file the
API reads (format in :mod:`services.tokens`), their plaintext to
``dev-tokens.json`` beside it for the local clients (the CLI's default, the
demo, the tests use the second tenant to check that tenants never see each
other's jobs). An existing file is never replaced, so tokens stay valid across
restarts; an old plaintext one is rewritten hashed with every token kept.
"""

from __future__ import annotations

from infra.status import ComponentStatus
from schemas.errors import StackError
from services import tokens
from services.settings import Settings

TENANTS = ("dev", "other")


def tenants(settings: Settings) -> set[str]:
    """The tenants the tokens file serves; a broken file is a StackError."""
    try:
        return tokens.load(settings.tokens_path).tenants
    except tokens.TokensFileError as exc:
        raise StackError(f"the tokens file {settings.tokens_path} {exc}; fix or delete it") from exc


def ensure_tokens(settings: Settings) -> bool:
    """Write the tokens file with one token per tenant of :data:`TENANTS` unless it exists
    (an old plaintext one is migrated); True when it was created."""
    path = settings.tokens_path
    if path.is_file():
        tenants(settings)
        tokens.migrate(path)
        return False
    by_tenant = {tenant: tokens.new_token(tenant) for tenant in TENANTS}
    # The plaintext first: a tokens file never exists without its dev clients' tokens.
    tokens.save_dev_tokens(path, by_tenant)
    entries = tuple(tokens.entry_for(token, tenant) for tenant, token in by_tenant.items())
    tokens.save(path, tokens.TokensFile(entries))
    return True


def token_for(settings: Settings, tenant: str) -> str:
    """The plaintext token of ``tenant`` that ``dev up`` kept for the local clients."""
    found = tokens.load_dev_tokens(settings.tokens_path).get(tenant)
    if found is None:
        raise StackError(
            f"{tokens.dev_tokens_path(settings.tokens_path)} has no token for tenant "
            f"{tenant!r}; `gridledger tokens add {tenant}` makes one"
        )
    return found


def status(settings: Settings) -> ComponentStatus:
    """Whether the tokens file exists, and which tenants it serves."""
    path = settings.tokens_path
    if not path.is_file():
        return ComponentStatus(name="tokens", running=False, address=str(path), detail="missing")
    served = sorted(tenants(settings))
    return ComponentStatus(
        name="tokens", running=True, address=str(path), detail=f"tenants: {', '.join(served)}"
    )
