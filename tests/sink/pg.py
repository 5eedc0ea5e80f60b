"""Postgres helpers for tests: a private schema per test, and table dumps to compare."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from services.replay.compare import COMPARED_TABLES
from services.settings import Settings
from services.sink import db
from services.sink.migrate import migrate_pool
from services.sink.tables import TABLES


def new_schema() -> str:
    return f"t_{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def private_schema(settings: Settings) -> AsyncIterator[tuple[Settings, asyncpg.Pool]]:
    """Settings whose ``pg_schema`` is a fresh, migrated schema; dropped afterwards."""
    schema = new_schema()
    scoped = settings.model_copy(update={"pg_schema": schema})
    pool = await db.create_pool(scoped, schema, max_size=4)
    try:
        await migrate_pool(pool, schema)
        yield scoped, pool
    finally:
        await pool.close()
        await db.drop_schema(settings, schema)


async def dump(pool: asyncpg.Pool, *, offsets: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every derived table (and optionally consumer_offsets), rows sorted by key."""
    tables = dict(COMPARED_TABLES)
    if offsets:
        tables["consumer_offsets"] = ("consumer", "topic", "partition")
    out: dict[str, list[dict[str, Any]]] = {}
    async with pool.acquire() as conn:
        for table, key in tables.items():
            # The declared columns: what Postgres assigns (a position) is no derived data.
            columns = ", ".join(TABLES[table].names)
            rows = await conn.fetch(f"SELECT {columns} FROM {table} ORDER BY {', '.join(key)}")
            out[table] = [
                {
                    k: json.loads(v) if k in _JSON_COLUMNS and isinstance(v, str) else v
                    for k, v in dict(r).items()
                }
                for r in rows
            ]
    return out


_JSON_COLUMNS = {"view", "payload", "record", "evidence", "gpus", "gpu_usage"}
