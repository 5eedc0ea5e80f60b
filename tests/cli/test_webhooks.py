"""``gridledger webhooks add|list|rotate|deliveries|enable|rm`` against a real API over HTTP
(its own topics and Postgres schema); loopback is refused, as by default."""

from __future__ import annotations

import json

import pytest

from services.cli.exits import Exit
from tests.api.conftest import Api
from tests.cli.conftest import gridledger

pytestmark = pytest.mark.integration

PUBLIC = "http://93.184.216.34/hooks/gridledger"
"""A public address, as a literal: nothing resolves it and nothing is sent to it here (no
webhooks service runs in these tests)."""


async def test_add_list_rotate_deliveries_enable_rm(
    cli_env: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = await gridledger("webhooks", "add", "http://127.0.0.1:8600/", "--events", "JobFailed")
    assert refused != 0
    assert "url: 127.0.0.1 is a loopback address" in capsys.readouterr().err

    assert await gridledger("webhooks", "add", PUBLIC, "--events", "JobFailed,JobSucceeded") == 0
    out = capsys.readouterr().out
    assert "added for JobFailed,JobSucceeded" in out and "secret (shown once" in out
    secret = out.rsplit(" ", 1)[1].strip()
    assert secret.startswith("whsec_")

    assert await gridledger("webhooks", "list", "-o", "json") == 0
    (hook,) = json.loads(capsys.readouterr().out)
    assert hook["url"] == PUBLIC and hook["enabled"] and hook["pending"] == 0
    assert await gridledger("webhooks", "list") == 0
    table = capsys.readouterr().out
    assert hook["id"] in table and "enabled" in table and secret not in table

    assert await gridledger("webhooks", "rotate", hook["id"]) == 0
    rotated = capsys.readouterr().out
    assert "new secret (shown once)" in rotated and secret not in rotated
    assert await gridledger("webhooks", "deliveries", hook["id"], "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == []
    assert await gridledger("webhooks", "enable", hook["id"]) == 0
    assert f"webhook {hook['id']} enabled" in capsys.readouterr().out

    assert await gridledger("webhooks", "rm", hook["id"]) == 0
    assert await gridledger("webhooks", "rm", hook["id"]) == Exit.NOT_FOUND
    assert "no webhook" in capsys.readouterr().err
