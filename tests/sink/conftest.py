"""Fixtures of the sink tests: a private Postgres schema per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from services.settings import Settings
from tests.sink.pg import private_schema


@pytest_asyncio.fixture
async def pg(topics: Settings) -> AsyncIterator[tuple[Settings, asyncpg.Pool]]:
    """(settings with own topics and own schema, pool on that schema)."""
    async with private_schema(topics) as scoped:
        yield scoped
