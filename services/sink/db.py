"""Postgres connections for the read models: one schema, chosen by settings or by the caller."""

from __future__ import annotations

import re

import asyncpg

from schemas.errors import GridledgerError
from services.settings import Settings

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class ReadModelError(GridledgerError):
    """The read-model database could not be reached or is not in the expected shape."""


def check_schema(name: str) -> str:
    """Return ``name`` if it is a safe, unquoted Postgres schema name."""
    if not _SCHEMA_RE.match(name):
        raise ReadModelError(
            f"schema name {name!r} is not allowed; use lower-case letters, digits and '_'"
        )
    return name


async def create_pool(
    settings: Settings, schema: str | None = None, *, min_size: int = 1, max_size: int = 5
) -> asyncpg.Pool:
    """A pool whose connections see ``schema`` (default ``settings.pg_schema``) first."""
    schema = check_schema(schema or settings.pg_schema)
    try:
        pool = await asyncpg.create_pool(
            settings.dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings={"search_path": schema, "timezone": "UTC"},
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise ReadModelError(
            f"cannot reach Postgres at {settings.dsn}: {exc}. "
            "Start the local stack with `gridledger dev up`"
        ) from exc
    assert pool is not None
    return pool


async def drop_schema(settings: Settings, schema: str) -> None:
    """Drop a schema and everything in it (tests, replay scratch schemas)."""
    conn = await asyncpg.connect(settings.dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {check_schema(schema)} CASCADE")
    finally:
        await conn.close()
