"""Bearer tokens: ``settings.tokens_path`` names each token's tenant, by its sha256.

The file's format and its commands are in :mod:`services.tokens`. It is re-read
when it changes, so ``gridledger tokens add|revoke`` take effect without a
restart; a file that cannot be used (a typo, a half-written copy, gone) keeps
the last good tokens in force and logs one error line naming the problem.
Unknown tenants get a 404 for anything that is not theirs, never a 403, so an
id says nothing about whether a job exists.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from services import tokens as tokens_file
from services.api.errors import problem

TENANT_KEY = web.RequestKey("tenant", str)
log = logging.getLogger(__name__)


class Tokens:
    """The tokens file, re-read when it changes (inode, size or modification time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._tokens = tokens_file.TokensFile()
        self._refresh()

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
            seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            seen = (0, 0, 0)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            loaded = tokens_file.load(self.path)
        except tokens_file.TokensFileError as exc:
            kept = len(self._tokens.entries)
            log.error(  # noqa: TRY400 - the reason is the message; no traceback
                "tokens file %s %s; keeping the %d token(s) last read from it",
                self.path,
                exc,
                kept,
            )
            return
        if loaded.plaintext is not None:
            log.warning(
                "tokens file %s holds tokens in the clear; `gridledger tokens migrate` "
                "stores them hashed",
                self.path,
            )
        self._tokens = loaded

    def tenant(self, token: str) -> str | None:
        """The tenant of ``token``, or None."""
        self._refresh()
        return self._tokens.tenant(token)


def unauthorized(why: str) -> web.Response:
    """The 401 for a missing or unknown token: what to send, and nothing about the server."""
    return problem(
        401,
        "unauthorized",
        "Unauthorized",
        f"{why}; send `Authorization: Bearer <token>` with a token your operator issued "
        "(`gridledger tokens add TENANT`)",
        headers={"WWW-Authenticate": 'Bearer realm="gridledger"'},
    )


AgentCheck = Callable[[web.Request], web.StreamResponse | None]
"""Checks an agent credential: None when valid (the request then names its node), else the
refusal."""


def middleware(
    tokens: Tokens,
    public: frozenset[str],
    agent_routes: frozenset[str] = frozenset(),
    agent_check: AgentCheck | None = None,
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Authenticate every route except those whose path template is in ``public``; those in
    ``agent_routes`` take an agent credential (``agent_check``), never a tenant token."""

    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if resource is not None and resource.canonical in public:
            return await handler(request)
        if resource is not None and resource.canonical in agent_routes:
            assert agent_check is not None, "agent routes need an agent check"
            return agent_check(request) or await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return unauthorized("no bearer token in the Authorization header")
        tenant = tokens.tenant(token.strip())
        if tenant is None:
            return unauthorized("the token is not known")
        request[TENANT_KEY] = tenant
        return await handler(request)

    return authenticate
