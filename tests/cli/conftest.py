"""The CLI tests drive a real API (own topics and schema, sink in-process) over HTTP.

Every test gets its own config-file path (nothing of the user's
``~/.config/gridledger`` is read or written) and ``TZ=UTC`` unless it sets
another zone; ``cli_env`` points the CLI at the test's API with the dev token.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.cli.main import main
from tests.api.conftest import (
    DEV_TOKEN,
    Api,
    api,  # noqa: F401 - re-exported fixture
)


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config" / "gridledger" / "config.toml"
    monkeypatch.setenv("GRIDLEDGER_CONFIG", str(path))
    monkeypatch.setenv("TZ", "UTC")
    for name in (
        "GRIDLEDGER_PROFILE",
        "GRIDLEDGER_TOKEN",
        "GRIDLEDGER_API_URL",
        "GRIDLEDGER_INSECURE_HTTP",
    ):
        monkeypatch.delenv(name, raising=False)
    return path


def api_url(server: Api) -> str:
    return str(server.client.make_url("")).rstrip("/")


@pytest.fixture
def cli_env(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:  # noqa: F811 - the fixture
    monkeypatch.setenv("GRIDLEDGER_API_URL", api_url(api))
    monkeypatch.setenv("GRIDLEDGER_TOKEN", DEV_TOKEN)
    return api


async def gridledger(*args: str) -> int:
    """Run the CLI in a thread (the API's test server runs on this loop)."""
    return await asyncio.to_thread(main, list(args))
