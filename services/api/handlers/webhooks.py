"""The webhooks handlers: a tenant adds, lists, rotates, enables and removes its subscriptions
and reads their delivery log. Storage: services/webhooks/store.py; delivery: the webhooks
service (services/webhooks/service.py).

Every route is the calling tenant's: an id of another tenant's subscription is a 404, like
one that does not exist. A secret is shown once, when added or rotated; it is sealed with
the operator's secrets key (as tenant secrets are), so without one these routes answer 503.
"""

from __future__ import annotations

import logging

import asyncpg
from aiohttp import web
from pydantic import ValidationError

from services.api import errors, problems
from services.api import models as m
from services.api.auth import TENANT_KEY
from services.api.deps import SETTINGS, problem_response, shown
from services.api.handlers.secrets import with_key
from services.clock import utcnow
from services.secretstore import SecretsKey
from services.webhooks import store, targets

log = logging.getLogger(__name__)


def _refused(field: str, problem: str, fix: str, status: int = 422) -> web.Response:
    return problem_response(status, [problems.Problem(field, problem, fix)], "invalid_webhook")


def _own_id(request: web.Request) -> str:
    """The path's subscription id; a 404 when it cannot be one (it never reaches Postgres)."""
    sid = request.match_info["id"]
    if not store.ID_RE.match(sid):
        raise _not_found(sid)
    return sid


def _not_found(sid: str) -> web.HTTPNotFound:
    return errors.not_found(
        f"this tenant has no webhook {shown(sid)}; `gridledger webhooks list` shows yours"
    )


@with_key
async def add_webhook(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """POST /v1/webhooks: subscribe a URL to job events; the reply holds the secret, once."""
    tenant, settings = request[TENANT_KEY], request.app[SETTINGS]
    try:
        body = m.WebhookCreate.model_validate_json(await request.read())
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        return _refused(
            field, first["msg"], 'send {"url": "https://...", "events": ["JobFailed", ...]}'
        )
    problem = await targets.target_problem(body.url, settings.webhooks_allow_loopback)
    if problem:
        return _refused(
            "url",
            problem,
            "give an http(s) URL without credentials whose host is a public address",
        )
    problem = store.events_problem(body.events)
    if problem:
        return _refused("events", problem, f"choose among {', '.join(store.EVENT_NAMES)}")
    made = await store.create(pool, key, tenant, body.url, body.events, utcnow())
    if made is None:
        return _refused(
            "url",
            f"the tenant already holds {store.MAX_PER_TENANT} webhooks",
            "remove unused ones first (`gridledger webhooks rm ID`)",
            status=409,
        )
    subscription, secret = made
    log.info("tenant %s added webhook %s", tenant, subscription.id)
    return web.json_response({**subscription.public(), "secret": secret}, status=201)


@with_key
async def list_webhooks(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """GET /v1/webhooks: the tenant's subscriptions, with whether and why one is disabled."""
    found = await store.listing(pool, request[TENANT_KEY])
    return web.json_response({"webhooks": [s.public() for s in found], "count": len(found)})


@with_key
async def remove_webhook(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """DELETE /v1/webhooks/{id}: remove it, with its queued events and its log."""
    sid = _own_id(request)
    if not await store.remove(pool, request[TENANT_KEY], sid):
        raise _not_found(sid)
    log.info("tenant %s removed webhook %s", request[TENANT_KEY], sid)
    return web.json_response({"id": sid, "removed": True})


@with_key
async def rotate_webhook(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """POST /v1/webhooks/{id}/rotate: a new secret; the previous one signs too for a while."""
    sid = _own_id(request)
    overlap = request.app[SETTINGS].webhooks_rotation_overlap_s
    rotated = await store.rotate(pool, key, request[TENANT_KEY], sid, utcnow(), overlap)
    if rotated is None:
        raise _not_found(sid)
    secret, until = rotated
    return web.json_response(
        {"id": sid, "secret": secret, "previous_valid_until": until.isoformat()}
    )


@with_key
async def enable_webhook(request: web.Request, pool: asyncpg.Pool, key: SecretsKey) -> web.Response:
    """POST /v1/webhooks/{id}/enable: deliver again (and what was queued meanwhile)."""
    sid = _own_id(request)
    if not await store.enable(pool, request[TENANT_KEY], sid):
        raise _not_found(sid)
    return web.json_response({"id": sid, "enabled": True})


@with_key
async def list_deliveries(
    request: web.Request, pool: asyncpg.Pool, key: SecretsKey
) -> web.Response:
    """GET /v1/webhooks/{id}/deliveries: the latest delivery attempts, newest first."""
    sid = _own_id(request)
    keep = request.app[SETTINGS].webhooks_log_keep
    found = await store.deliveries(pool, request[TENANT_KEY], sid, keep)
    if found is None:
        raise _not_found(sid)
    return web.json_response({"id": sid, "deliveries": found})
