"""Fixtures of the webhook tests: the API app and the webhooks service on their own topics
and schema (the real broker and Postgres), and a real receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from services.api.app import build_app
from services.ledger import Ledger
from services.secretstore import load_key
from services.settings import Settings
from services.webhooks.service import WebhookService
from tests.api.conftest import DEV_TOKEN, SECRETS_KEY, write_tokens
from tests.sink.pg import private_schema
from tests.webhooks.receiver import Receiver


@dataclass
class Hooks:
    settings: Settings
    ledger: Ledger
    pool: asyncpg.Pool
    client: TestClient
    receiver: Receiver
    service: WebhookService | None = None
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    @staticmethod
    def auth(token: str = DEV_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def start_service(self, **overrides: Any) -> WebhookService:
        """Start (or restart) the webhooks service, with settings changed by ``overrides``."""
        await self.stop_service()
        settings = self.settings.model_copy(update=overrides)
        self.service = WebhookService(settings, self.ledger, self.pool, load_key(settings))
        self._task = asyncio.create_task(self.service.run())
        return self.service

    async def stop_service(self) -> None:
        if self.service is not None and self._task is not None:
            self.service.stop()
            await asyncio.wait_for(self._task, 10)
            self.service = self._task = None

    async def add(self, url: str, events: list[str], token: str = DEV_TOKEN) -> dict[str, Any]:
        """A webhook added through the API (201 asserted): its JSON, with the secret."""
        made = await self.client.post(
            "/v1/webhooks", json={"url": url, "events": events}, headers=self.auth(token)
        )
        assert made.status == 201, await made.text()
        return dict(await made.json())

    async def get(self, path: str, token: str = DEV_TOKEN) -> Any:
        answer = await self.client.get(path, headers=self.auth(token))
        assert answer.status == 200, await answer.text()
        return await answer.json()


@pytest_asyncio.fixture
async def hooks(topics: Settings, tmp_path: Path) -> AsyncIterator[Hooks]:
    settings = topics.model_copy(
        update={
            "tokens_file": write_tokens(tmp_path / "tokens.json"),
            "secrets_key": SECRETS_KEY,
            "webhooks_allow_loopback": True,
            "webhooks_timeout_s": 5.0,
            "webhooks_backoff_initial_s": 0.05,
            "webhooks_backoff_cap_s": 0.2,
        }
    )
    receiver = await Receiver().start()
    async with private_schema(settings) as (scoped, pool), Ledger(scoped, "test") as ledger:
        client = TestClient(TestServer(build_app(scoped, ledger, pool)))
        await client.start_server()
        found = Hooks(scoped, ledger, pool, client, receiver)
        try:
            yield found
        finally:
            await found.stop_service()
            await client.close()
            await receiver.stop()
