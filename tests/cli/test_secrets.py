"""``gridledger secret set|list|rm`` and the credential warning of ``submit``, against a real
API over HTTP (its own topics and Postgres schema)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from services.cli.exits import Exit
from tests.api.conftest import Api
from tests.cli.conftest import gridledger

pytestmark = pytest.mark.integration

VALUE = "hf_cli-value-Yt83-never-printed"


async def test_set_list_rm_never_print_the_value(
    cli_env: Api,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(f"{VALUE}\n".encode())))
    assert await gridledger("secret", "set", "hf-token") == 0
    value_file = tmp_path / "db.txt"
    value_file.write_text("db-pass")
    assert await gridledger("secret", "set", "db", "--from-file", str(value_file)) == 0
    stored = capsys.readouterr()
    assert stored.out == "secret hf-token stored (31 bytes)\nsecret db stored (7 bytes)\n"
    assert await gridledger("secret", "list", "--json") == 0
    out, err = capsys.readouterr()
    listed = json.loads(out)
    assert [(s["name"], s["bytes"]) for s in listed] == [("db", 7), ("hf-token", len(VALUE))]
    assert VALUE not in out + err

    assert await gridledger("secret", "rm", "db") == 0
    assert await gridledger("secret", "rm", "db") == Exit.NOT_FOUND
    assert "no secret 'db'" in capsys.readouterr().err
    assert await gridledger("secret", "set", "-bad", "--from-file", str(value_file)) == Exit.USAGE


async def test_submit_warns_about_a_credential_in_env_and_points_at_secrets(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "image: gridledger/busybox:latest\nenv: {HF_TOKEN: hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123}\n"
    )
    assert await gridledger("submit", str(spec), "--dry-run") == 0
    assert "warning: env.HF_TOKEN" in capsys.readouterr().err
    assert await gridledger("submit", str(spec), "--json") == 0
    out, err = capsys.readouterr()
    (warning,) = json.loads(out)["warnings"]
    assert warning["field"] == "env.HF_TOKEN" and warning["rule"] == "value.huggingface_token"
    assert "warning: env.HF_TOKEN" in err and "secrets: {HF_TOKEN: hf-token}" in err
    assert "hf_AbCd" not in err
