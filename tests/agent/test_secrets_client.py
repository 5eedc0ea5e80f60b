"""The agent's side of fetching secrets when it cannot: no credential, or no API answering."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.agent.errors import ContainerStartError
from services.agent.secrets import SecretsClient
from services.agent.settings import AgentSettings
from services.ops.specs import free_port
from services.secretstore import ensure_key
from services.settings import Settings


async def test_a_node_without_a_credential_says_how_to_get_one(tmp_path: Path) -> None:
    client = SecretsClient(Settings(home=tmp_path), AgentSettings(node_id="node-x"))
    with pytest.raises(ContainerStartError) as caught:
        await client.resolve("job-1", 1)
    assert caught.value.error_kind == "secrets_unavailable"
    assert "gridledger secret agent-token node-x" in caught.value.message


async def test_an_api_that_never_answers_is_a_platform_failure_within_the_bound(
    tmp_path: Path,
) -> None:
    settings = Settings(home=tmp_path, api_port=free_port())  # nothing listens there
    ensure_key(settings)
    agent = AgentSettings(node_id="node-x", secrets_timeout_s=1.0)
    with pytest.raises(ContainerStartError) as caught:
        await SecretsClient(settings, agent).resolve("job-1", 1)
    assert caught.value.error_kind == "secrets_unavailable"
    assert "no answer from the API" in caught.value.message


async def test_a_redirect_is_not_followed_with_the_node_credential(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append((request.path, request.headers.get("Authorization")))
        if request.path == "/elsewhere":
            return web.json_response({"secrets": {}})
        raise web.HTTPTemporaryRedirect("/elsewhere")  # 307: a POST would be repeated

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        settings = Settings(home=tmp_path, api_port=server.port)
        ensure_key(settings)
        agent = AgentSettings(node_id="node-x", secrets_timeout_s=1.0)
        with pytest.raises(ContainerStartError) as caught:
            await SecretsClient(settings, agent).resolve("job-1", 1)
    finally:
        await server.close()
    assert caught.value.error_kind == "secrets_unavailable"
    assert "HTTP 307" in caught.value.message
    assert seen and all(path != "/elsewhere" for path, _ in seen)
