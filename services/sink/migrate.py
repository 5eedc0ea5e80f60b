"""Apply ``migrations/*.sql`` in order inside one schema, recording each in ``schema_migrations``.

A migration is applied in its own transaction together with its record, under an
advisory lock, so two services starting at once do not both apply it.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg

from services.sink.db import check_schema

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def migration_files() -> list[Path]:
    """The migrations of the repo, in the order they are applied (by file name)."""
    return sorted(MIGRATIONS_DIR.glob("*.sql"))


async def apply_migrations(conn: asyncpg.Connection, schema: str) -> list[str]:
    """Create ``schema`` if needed and apply the migrations it lacks; return their names."""
    schema = check_schema(schema)
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"migrate:{schema}")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    for path in migration_files():
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"migrate:{schema}")
            done = await conn.fetchval(
                f"SELECT 1 FROM {schema}.schema_migrations WHERE version = $1", path.stem
            )
            if done:
                continue
            await conn.execute(f"SET LOCAL search_path TO {schema}")
            await conn.execute(path.read_text())
            await conn.execute(
                f"INSERT INTO {schema}.schema_migrations (version) VALUES ($1)", path.stem
            )
            applied.append(path.stem)
    return applied


async def migrate_pool(pool: asyncpg.Pool, schema: str) -> list[str]:
    """:func:`apply_migrations` on a connection of ``pool``."""
    async with pool.acquire() as conn:
        return await apply_migrations(conn, schema)
