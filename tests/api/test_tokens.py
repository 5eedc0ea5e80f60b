"""API tokens: stored hashed, issued and revoked by `gridledger tokens`, re-read on change,
and a broken file never locks every tenant out."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from infra import tokens as dev_tokens
from services import tokens
from services.api.auth import Tokens
from services.cli.main import main
from services.settings import Settings
from tests.api.conftest import DEV_TOKEN, Api

ERRORS = "services.api.auth"


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ERRORS and r.levelname == "ERROR"]


def test_the_file_holds_hashes_and_tenants_never_a_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token, entry = tokens.add(path, "dev")
    text = path.read_text()
    assert token not in text and tokens.digest_of(token) in text
    assert json.loads(text)["tokens"] == [entry.as_json()]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Tokens(path).tenant(token) == "dev"
    assert Tokens(path).tenant(token + "x") is None


def test_a_tenant_name_that_could_share_a_prefix_is_refused(tmp_path: Path) -> None:
    for bad in ("Dev", "a.b", "../x", "", "a" * 64):
        with pytest.raises(tokens.TokensFileError, match="not a valid name"):
            tokens.add(tmp_path / "tokens.json", bad)
    assert not (tmp_path / "tokens.json").exists()


def test_a_broken_file_keeps_the_last_good_tokens_with_one_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    token, _ = tokens.add(path, "dev")
    known = Tokens(path)
    caplog.set_level(logging.WARNING, ERRORS)
    for broken in ('{"version": 1, "tokens": [{"id": "tk-1"', '{"version": 1, "tokens": 3}'):
        path.write_text(broken)
        for _ in range(3):
            assert known.tenant(token) == "dev"
        (line,) = error_lines(caplog)
        assert str(path) in line and "keeping the 1 token(s)" in line
        caplog.clear()
    path.unlink()
    assert known.tenant(token) == "dev"
    assert "does not exist" in error_lines(caplog)[0]
    second, _ = tokens.add(path, "other")  # a good file again: it alone is in force
    assert known.tenant(second) == "other" and known.tenant(token) is None


def test_an_old_plaintext_file_is_read_then_migrated_with_every_token_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(home=tmp_path)
    path = settings.tokens_path
    old = {"gl_dev_old": "dev", "gl_other_old": "other", "gl_dev_second": "dev"}
    path.write_text(json.dumps(old))
    caplog.set_level(logging.WARNING, ERRORS)
    api = Tokens(path)
    assert [api.tenant(t) for t in old] == list(old.values())
    assert "in the clear" in caplog.text
    assert dev_tokens.token_for(settings, "dev") == "gl_dev_old"

    assert dev_tokens.ensure_tokens(settings) is False  # what `dev up` does: migrate
    assert "gl_dev_old" not in path.read_text() and tokens.load(path).plaintext is None
    assert [api.tenant(t) for t in old] == list(old.values())  # the API re-read it
    assert dev_tokens.token_for(settings, "dev") == "gl_dev_old"
    assert dev_tokens.token_for(settings, "other") == "gl_other_old"
    assert stat.S_IMODE(tokens.dev_tokens_path(path).stat().st_mode) == 0o600
    assert tokens.migrate(path) is False


def test_tokens_add_list_revoke_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "tokens.json"
    monkeypatch.setenv("GRIDLEDGER_TOKENS_FILE", str(path))
    assert main(["tokens", "add", "team-a", "-o", "json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["tenant"] == "team-a" and added["token"].startswith("gl_team-a_")
    assert Tokens(path).tenant(added["token"]) == "team-a"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    assert main(["tokens", "list"]) == 0
    listing = capsys.readouterr().out
    assert added["id"] in listing and "team-a" in listing and added["token"] not in listing

    assert main(["tokens", "revoke", added["id"]]) == 0
    assert f"revoked token {added['id']}" in capsys.readouterr().out
    assert Tokens(path).tenant(added["token"]) is None
    assert main(["tokens", "revoke", added["id"]]) == 4  # no such token: NOT_FOUND
    assert f"has no token {added['id']}" in capsys.readouterr().err
    assert main(["tokens", "add", "Team A"]) == 8
    assert "not a valid name" in capsys.readouterr().err


async def test_the_running_api_takes_added_and_revoked_tokens_and_survives_a_typo(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    path = api.settings.tokens_path
    token, entry = tokens.add(path, "dev")
    assert (await api.client.get("/v1/jobs", headers=api.auth(token))).status == 200
    tokens.revoke(path, entry.id)
    assert (await api.client.get("/v1/jobs", headers=api.auth(token))).status == 401

    caplog.set_level(logging.ERROR, ERRORS)
    good = path.read_text()
    path.write_text(good.replace('"tenant"', '"tenant', 1))  # a typo: not JSON any more
    for _ in range(3):
        assert (await api.client.get("/v1/jobs", headers=api.auth(DEV_TOKEN))).status == 200
    assert len(error_lines(caplog)) == 1
