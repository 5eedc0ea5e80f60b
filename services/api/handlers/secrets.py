"""Secrets: a tenant sets, lists and removes its secrets; an agent resolves an attempt's.

A tenant's routes take its bearer token like every other route and only ever touch
that tenant's rows; values go in once and never come back out to a tenant (list shows
names, sizes and times). The agent's route takes an agent credential instead
(``X-Gridledger-Node`` and that node's token, :meth:`SecretsKey.agent_token`), never a
tenant token, and answers only for an attempt the read models show scheduled on that
very node, with the names the job's own spec gives, from the job's own tenant. So an
agent cannot ask for a name, a tenant or a node it was not given, and one tenant's job
can never receive another tenant's secret. Storage and sealing: services/secretstore.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from services import secretstore
from services.api import errors
from services.api import models as m
from services.api.auth import TENANT_KEY
from services.secretstore import SecretOpenError, SecretsKey, SecretsKeyError
from services.settings import Settings

log = logging.getLogger(__name__)

NODE_KEY = web.RequestKey("node", str)
NODE_HEADER = "X-Gridledger-Node"

OVER = frozenset({"lost", "ended", "superseded"})
"""Attempt statuses past which no container of the attempt may start."""
RECORDED_WAIT_S = 5.0
"""How long a resolve waits for the sink to record the attempt before a 409 (retried)."""


@dataclass(frozen=True)
class Vault:
    """The secrets table's pool and the key, or the error that says why there is no key."""

    pool: asyncpg.Pool
    key: SecretsKey | SecretsKeyError


VAULT = web.AppKey("vault", Vault)
Handler = Callable[[web.Request, asyncpg.Pool, SecretsKey], Awaitable[web.StreamResponse]]


def install(app: web.Application, settings: Settings, pool: asyncpg.Pool) -> None:
    """Load the key once; without one every secrets route answers 503 saying so."""
    try:
        key: SecretsKey | SecretsKeyError = secretstore.load_key(settings)
    except SecretsKeyError as exc:
        log.warning("secrets are unavailable: %s", exc)
        key = exc
    app[VAULT] = Vault(pool, key)


def with_key(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The route, given the pool and the key; a 503 that says so when there is no key."""

    async def route(request: web.Request) -> web.StreamResponse:
        vault = request.app[VAULT]
        if isinstance(vault.key, SecretsKeyError):
            return _no_key()
        return await handler(request, vault.pool, vault.key)

    route.__doc__ = handler.__doc__
    return route


def _no_key() -> web.Response:
    return errors.problem(
        503,
        "secrets_unavailable",
        "Secrets are not configured on this installation",
        "the API has no secrets key (GRIDLEDGER_SECRETS_KEY or its key file); the operator "
        "must provide it. Nothing was stored or read",
    )


def _refused(field: str, problem: str, fix: str, status: int = 422) -> web.Response:
    return errors.problem(
        status,
        "invalid_secret",
        "The secret was refused",
        f"{field}: {problem}",
        problems=[{"field": field, "problem": problem, "fix": fix}],
    )


def _info(stored: secretstore.StoredSecret) -> dict[str, Any]:
    return {
        "name": stored.name,
        "bytes": stored.value_bytes,
        "created_at": stored.created_at.isoformat(),
        "updated_at": stored.updated_at.isoformat(),
    }


# --------------------------------------------------------------------------- tenant routes


@with_key
async def set_secret(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """PUT /v1/secrets/{name}: store or replace the tenant's secret (201 new, 200 replaced)."""
    tenant, name = request[TENANT_KEY], request.match_info["name"]
    problem = secretstore.name_problem(name)
    if problem:
        return _refused("name", problem, "e.g. `gridledger secret set hf-token`")
    try:
        body = m.SecretValue.model_validate_json(await request.read())
    except ValidationError:
        return _refused("value", 'the body is not {"value": "..."}', 'send {"value": "..."}')
    value = body.value.encode()
    if not value or len(value) > secretstore.MAX_VALUE_BYTES or "\0" in body.value:
        return _refused(
            "value",
            f"is {len(value)} bytes" + (" with a NUL" if "\0" in body.value else ""),
            f"a secret is 1 to {secretstore.MAX_VALUE_BYTES} bytes of text without NUL; "
            "put data files in the image or an output instead",
        )
    stored = await secretstore.put(pool, key, tenant, name, value)
    if stored is None:
        return _refused(
            "name",
            f"the tenant already holds {secretstore.MAX_SECRETS_PER_TENANT} secrets",
            "remove unused ones first (`gridledger secret rm NAME`)",
            status=409,
        )
    info, created = stored
    log.info("tenant %s %s secret %s", tenant, "set" if created else "replaced", name)
    return web.json_response(_info(info), status=201 if created else 200)


@with_key
async def list_secrets(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """GET /v1/secrets: the tenant's secrets, names, sizes and times only."""
    found = await secretstore.listing(pool, request[TENANT_KEY])
    return web.json_response({"secrets": [_info(s) for s in found], "count": len(found)})


@with_key
async def remove_secret(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """DELETE /v1/secrets/{name}: remove the tenant's secret; 404 when it has none by that name."""
    name = request.match_info["name"]
    if not await secretstore.remove(pool, request[TENANT_KEY], name):
        return errors.problem(
            404,
            "secret_not_found",
            "No such secret",
            f"this tenant has no secret {name!r}; `gridledger secret list` shows yours",
        )
    log.info("tenant %s removed secret %s", request[TENANT_KEY], name)
    return web.json_response({"name": name, "removed": True})


# --------------------------------------------------------------------------- the agent's route


def agent_refusal(detail: str) -> web.Response:
    """The 401 of the agent route: no or a wrong agent credential (a tenant token is one)."""
    return errors.problem(
        401,
        "agent_unauthorized",
        "Not an agent credential",
        f"{detail}; this route takes `{NODE_HEADER}: <node id>` and that node's agent token "
        "(`gridledger secret agent-token NODE`), never a tenant token",
        headers={"WWW-Authenticate": 'Bearer realm="gridledger-agent"'},
    )


def authenticate_agent(request: web.Request) -> web.Response | None:
    """Check the agent credential; set the request's node, or answer the refusal."""
    key = request.app[VAULT].key
    if isinstance(key, SecretsKeyError):
        return _no_key()
    node = request.headers.get(NODE_HEADER, "").strip()
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if not node or scheme.lower() != "bearer" or not token.strip():
        return agent_refusal(f"no {NODE_HEADER} header or no bearer token")
    if not key.agent_token_valid(node, token.strip()):
        return agent_refusal(f"the token is not node {node!r}'s agent token")
    request[NODE_KEY] = node
    return None


@with_key
async def resolve_secrets(
    request: web.Request, pool: asyncpg.Pool, key: SecretsKey
) -> web.Response:
    """POST /v1/agent/secrets: the values of one attempt's secrets, for the node it runs on."""
    node = request[NODE_KEY]
    try:
        asked = m.AgentSecretsRequest.model_validate_json(await request.read())
    except ValidationError as exc:
        return errors.problem(422, "invalid_request", "Not a resolve request", str(exc))
    row = await _scheduled(pool, asked.job_id, asked.attempt)
    if row is None:
        return errors.problem(
            409,
            "attempt_not_recorded",
            "The attempt is not in the read models yet",
            f"attempt {asked.attempt} of {asked.job_id} is not recorded yet; retry shortly",
            headers={"Retry-After": "1"},
        )
    if row["node_id"] != node:
        log.warning(
            "node %s asked for the secrets of %s/%s, scheduled on %r",
            node,
            asked.job_id,
            asked.attempt,
            row["node_id"],
        )
        return errors.problem(
            403,
            "not_this_node",
            "The attempt is not scheduled on this node",
            f"attempt {asked.attempt} of {asked.job_id} is not scheduled on node {node}",
        )
    if row["status"] in OVER:
        return errors.problem(
            410,
            "attempt_over",
            "The attempt is over",
            f"attempt {asked.attempt} of {asked.job_id} is {row['status']}; its secrets are no "
            "longer handed out",
        )
    wanted: dict[str, str] = json.loads(row["secrets"] or "{}")
    try:
        values, missing = await secretstore.reveal(
            pool, key, row["tenant"], sorted(set(wanted.values()))
        )
    except SecretOpenError:
        log.exception("secrets of %s do not open", asked.job_id)
        return errors.problem(
            503,
            "secrets_unavailable",
            "A stored secret does not open with this installation's key",
            "the operator's secrets key does not open a secret this job needs; the "
            "operator must restore the key it was stored with (or the tenant sets it again)",
        )
    log.info(
        "resolved %d secret(s) of %s/%s for node %s",
        len(values),
        row["job_id"],
        asked.attempt,
        node,
    )
    return web.json_response(
        {
            "job_id": asked.job_id,
            "attempt": asked.attempt,
            "values": {var: values[name] for var, name in wanted.items() if name in values},
            "missing": [
                {"variable": var, "secret": name}
                for var, name in sorted(wanted.items())
                if name in missing
            ],
        }
    )


async def _scheduled(pool: asyncpg.Pool, job_id: str, attempt: int) -> asyncpg.Record | None:
    """The attempt's node, its job's tenant and the spec's secrets, once the sink has them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECORDED_WAIT_S
    while True:
        row = await pool.fetchrow(
            "SELECT j.job_id, j.tenant, (j.spec -> 'secrets')::text AS secrets,"
            " a.node_id, a.status FROM jobs j JOIN attempts a ON a.job_id = j.job_id"
            " WHERE j.job_id = $1 AND a.attempt = $2 AND a.node_id <> ''",
            job_id,
            attempt,
        )
        if row is not None or loop.time() >= deadline:
            return row
        await asyncio.sleep(0.1)
