"""Webhook subscriptions and their delivery log, in Postgres (migration ``0005_webhooks.sql``).

A subscription is a tenant's URL, the event types it wants and a signing secret. It is
state the tenant sets, holding a secret, so it lives where the tenants' secrets live (a
table of the API's, sealed with the operator's key: services/secretstore.py) and not on
the ledger, which is immutable and readable by every consumer: a secret written there
could never be taken back. Every query names the tenant, so one tenant never sees,
changes or triggers another's subscription; an id of another tenant's looks like none.

The signing secret is Standard Webhooks' ``whsec_`` + base64 of 24 random bytes, shown
once (when added, when rotated). A rotation keeps the previous secret for
``webhooks_rotation_overlap_s``: deliveries meanwhile carry both signatures.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from schemas.events import EVENT_TYPES
from services.secretstore import SecretsKey

EVENT_NAMES: tuple[str, ...] = tuple(
    sorted(name for name, cls in EVENT_TYPES.items() if cls.TOPIC == "job-events")
)
"""The event types a subscription may name: the lifecycle events of ``job-events``."""
MAX_PER_TENANT = 20
ID_RE = re.compile(r"^wh_[0-9a-f]{16}$")
SECRET_PREFIX = "whsec_"

_COLUMNS = (
    "id, tenant, url, events, created_at, rotated_at, enabled, disabled_at, disabled_reason,"
    " consecutive_failures, previous_until"
)


@dataclass(frozen=True)
class Subscription:
    """What a tenant sees of a subscription: never its secret."""

    id: str
    url: str
    events: tuple[str, ...]
    created_at: datetime
    rotated_at: datetime | None
    enabled: bool
    disabled_at: datetime | None
    disabled_reason: str
    consecutive_failures: int
    pending: int

    def public(self) -> dict[str, Any]:
        """The API's JSON of it."""
        return {
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "created_at": self.created_at.isoformat(),
            "rotated_at": self.rotated_at.isoformat() if self.rotated_at else None,
            "enabled": self.enabled,
            "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None,
            "disabled_reason": self.disabled_reason,
            "consecutive_failures": self.consecutive_failures,
            "pending": self.pending,
        }


def events_problem(events: list[str]) -> str | None:
    """Why ``events`` is not a list of event types a subscription may name (None: it is)."""
    if not events:
        return "names no event type; name at least one, e.g. JobFailed,JobSucceeded"
    unknown = sorted(set(events) - set(EVENT_NAMES))
    if unknown:
        shown = ", ".join(repr(u[:60]) for u in unknown[:5])
        return f"{shown} {'is' if len(unknown) == 1 else 'are'} not a job event type"
    return None


def new_secret() -> str:
    """A fresh signing secret in Standard Webhooks' form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _sealed_name(subscription_id: str) -> str:
    return f"webhook:{subscription_id}"


def _subscription(row: asyncpg.Record, pending: int = 0) -> Subscription:
    return Subscription(
        id=row["id"],
        url=row["url"],
        events=tuple(row["events"]),
        created_at=row["created_at"],
        rotated_at=row["rotated_at"],
        enabled=row["enabled"],
        disabled_at=row["disabled_at"],
        disabled_reason=row["disabled_reason"],
        consecutive_failures=row["consecutive_failures"],
        pending=pending,
    )


async def create(
    pool: asyncpg.Pool, key: SecretsKey, tenant: str, url: str, events: list[str], now: datetime
) -> tuple[Subscription, str] | None:
    """A new subscription and its secret; None when the tenant holds the most it may."""
    subscription_id = "wh_" + secrets.token_hex(8)
    secret = new_secret()
    sealed = key.seal(tenant, _sealed_name(subscription_id), secret.encode())
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"webhooks:{tenant}")
        held = await conn.fetchval(
            "SELECT count(*) FROM webhook_subscriptions WHERE tenant = $1", tenant
        )
        if held >= MAX_PER_TENANT:
            return None
        row = await conn.fetchrow(
            "INSERT INTO webhook_subscriptions (id, tenant, url, events, sealed, created_at)"
            f" VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_COLUMNS}",
            subscription_id,
            tenant,
            url,
            sorted(set(events)),
            sealed,
            now,
        )
    return _subscription(row), secret


async def listing(pool: asyncpg.Pool, tenant: str) -> list[Subscription]:
    """The tenant's subscriptions, oldest first, with how many events wait for each."""
    rows = await pool.fetch(
        f"SELECT {', '.join('s.' + c.strip() for c in _COLUMNS.split(','))},"
        " (SELECT count(*) FROM webhook_outbox o WHERE o.subscription_id = s.id) AS pending"
        " FROM webhook_subscriptions s WHERE s.tenant = $1 ORDER BY s.created_at, s.id",
        tenant,
    )
    return [_subscription(r, r["pending"]) for r in rows]


async def remove(pool: asyncpg.Pool, tenant: str, subscription_id: str) -> bool:
    """Remove it with its queue and log; False when the tenant has none by that id."""
    done = await pool.execute(
        "DELETE FROM webhook_subscriptions WHERE tenant = $1 AND id = $2", tenant, subscription_id
    )
    return done != "DELETE 0"


async def rotate(
    pool: asyncpg.Pool,
    key: SecretsKey,
    tenant: str,
    subscription_id: str,
    now: datetime,
    overlap_s: int,
) -> tuple[str, datetime] | None:
    """A new secret, signing from now on; the previous one signs too until the returned
    time. None when the tenant has no such subscription."""
    secret = new_secret()
    sealed = key.seal(tenant, _sealed_name(subscription_id), secret.encode())
    until = now + timedelta(seconds=overlap_s)
    done = await pool.execute(
        "UPDATE webhook_subscriptions SET sealed_previous = sealed, sealed = $3,"
        " previous_until = $4, rotated_at = $5 WHERE tenant = $1 AND id = $2",
        tenant,
        subscription_id,
        sealed,
        until,
        now,
    )
    return None if done == "UPDATE 0" else (secret, until)


async def enable(pool: asyncpg.Pool, tenant: str, subscription_id: str) -> bool:
    """Enable a disabled subscription again (its queue is delivered from where it stopped)."""
    done = await pool.execute(
        "UPDATE webhook_subscriptions SET enabled = true, disabled_at = NULL,"
        " disabled_reason = '', consecutive_failures = 0, retry_at = '-infinity'"
        " WHERE tenant = $1 AND id = $2",
        tenant,
        subscription_id,
    )
    return done != "UPDATE 0"


async def deliveries(
    pool: asyncpg.Pool, tenant: str, subscription_id: str, limit: int
) -> list[dict[str, Any]] | None:
    """The subscription's latest delivery attempts, newest first; None when the tenant has
    no such subscription."""
    async with pool.acquire() as conn:
        owned = await conn.fetchval(
            "SELECT 1 FROM webhook_subscriptions WHERE tenant = $1 AND id = $2",
            tenant,
            subscription_id,
        )
        if not owned:
            return None
        rows = await conn.fetch(
            "SELECT event_id, event_type, attempt, at, status_code, latency_ms, ok, error"
            " FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY seq DESC LIMIT $2",
            subscription_id,
            limit,
        )
    return [{**dict(r), "at": r["at"].isoformat()} for r in rows]


def signing_secrets(key: SecretsKey, row: asyncpg.Record, now: datetime) -> list[str]:
    """The secrets a delivery is signed with now: the current one, and the previous one
    while its overlap lasts."""
    name = _sealed_name(row["id"])
    found = [key.open(row["tenant"], name, row["sealed"]).decode()]
    if row["sealed_previous"] is not None and row["previous_until"] and now < row["previous_until"]:
        found.append(key.open(row["tenant"], name, row["sealed_previous"]).decode())
    return found
