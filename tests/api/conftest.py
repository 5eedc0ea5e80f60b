"""Fixtures of the API tests: the app on its own topics and schema, with the sink in-process."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services import tokens
from services.api.app import build_app
from services.ledger import Ledger, LedgerPort
from services.secretstore import new_key_text
from services.settings import Settings
from services.sink.consumer import Sink, build_sink
from tests.fakes.ledger import FakeLedger
from tests.objectstore import PrivateStore
from tests.sink.pg import private_schema

DEV_TOKEN = "tok-dev"
OTHER_TOKEN = "tok-other"
SECRETS_KEY = new_key_text()
"""The API's secrets key in these tests (agents' tokens derive from it)."""


@dataclass
class Api:
    settings: Settings
    ledger: LedgerPort
    pool: asyncpg.Pool
    sink: Sink
    client: TestClient

    @property
    def app(self) -> web.Application:
        """The application under test (TestClient types its server as the base class)."""
        server = self.client.server
        assert isinstance(server, TestServer)
        return server.app

    @staticmethod
    def auth(token: str = DEV_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def write_tokens(path: Path) -> Path:
    """A tokens file in the format the API reads: the two test tokens' hashes."""
    entries = (tokens.entry_for(DEV_TOKEN, "dev"), tokens.entry_for(OTHER_TOKEN, "other"))
    tokens.save(path, tokens.TokensFile(entries))
    return path


@contextlib.asynccontextmanager
async def running_api(
    settings: Settings, tmp_path: Path, object_store: PrivateStore, ledger_of: Any
) -> AsyncIterator[Api]:
    """The API and an in-process sink over the ledger ``ledger_of(settings)`` builds."""
    # The API signs download URLs with the object store's reader credentials.
    settings = object_store.service_settings(
        settings,
        tokens_file=write_tokens(tmp_path / "tokens.json"),
        log_follow_grace_s=0.5,
        secrets_key=SECRETS_KEY,
    )
    async with private_schema(settings) as (scoped, pool), ledger_of(scoped) as ledger:
        sink = await build_sink(scoped, ledger, pool)
        task = asyncio.create_task(sink.run())
        client = TestClient(TestServer(build_app(scoped, ledger, pool)))
        await client.start_server()
        try:
            yield Api(scoped, ledger, pool, sink, client)
        finally:
            await client.close()
            sink.stop()
            try:
                await asyncio.wait_for(task, 10)
            except TimeoutError:
                task.cancel()


@pytest_asyncio.fixture
async def api(topics: Settings, tmp_path: Path, object_store: PrivateStore) -> AsyncIterator[Api]:
    """The API on the Kafka ledger (its own topics on the local broker)."""
    async with running_api(topics, tmp_path, object_store, lambda s: Ledger(s, "test")) as up:
        yield up


@pytest_asyncio.fixture
async def fake_api(
    settings: Settings, tmp_path: Path, object_store: PrivateStore
) -> AsyncIterator[Api]:
    """The API on the FakeLedger (it takes the port): no broker, the real Postgres."""
    isolated = settings.model_copy(update={"topic_prefix": f"fake-{uuid.uuid4().hex[:8]}."})
    async with running_api(isolated, tmp_path, object_store, FakeLedger) as up:
        yield up
