"""Bearer tokens: ``settings.tokens_path`` maps each token to its tenant.

The file is re-read when it changes, so tokens can be added without a restart.
Unknown tenants get a 404 for anything that is not theirs, never a 403, so an
id says nothing about whether a job exists.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

TENANT_KEY = web.RequestKey("tenant", str)


class Tokens:
    """The token file, re-read when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime: float | None = None
        self._tokens: dict[str, str] = {}

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            self._tokens, self._mtime = {}, None
            return
        if mtime != self._mtime:
            try:
                data = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError):
                data = {}
            self._tokens = {
                k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)
            }
            self._mtime = mtime

    def tenant(self, token: str) -> str | None:
        """The tenant of ``token``, compared in constant time, or None."""
        self._refresh()
        found = None
        for known, tenant in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = tenant
        return found


def unauthorized(path: Path, why: str) -> web.Response:
    """The 401 for a missing or unknown token, saying where tokens come from."""
    return web.json_response(
        {
            "error": "unauthorized",
            "detail": why,
            "hint": (
                "send `Authorization: Bearer <token>`; on a dev machine the tokens are in "
                f"{path} (written by `gridledger dev up`; the `dev` tenant's token is what "
                "the CLI uses by default)"
            ),
        },
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="gridledger"'},
    )


def middleware(
    tokens: Tokens, public: frozenset[str]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Authenticate every route except those whose path template is in ``public``."""

    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical in public:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return unauthorized(tokens.path, "no bearer token in the Authorization header")
        tenant = tokens.tenant(token.strip())
        if tenant is None:
            return unauthorized(tokens.path, "the token is not known")
        request[TENANT_KEY] = tenant
        return await handler(request)

    return authenticate
