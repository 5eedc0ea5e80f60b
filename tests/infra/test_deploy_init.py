"""``dev init`` and ``dev bucket``: the first-start steps of a deployment `dev up` does not run."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from services.cli.main import main
from tests.objectstore import PrivateStore


def test_init_writes_tokens_credentials_key_and_identities_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRIDLEDGER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GRIDLEDGER_TOKENS_FILE", str(tmp_path / "etc" / "tokens.json"))
    monkeypatch.setenv("GRIDLEDGER_S3_CREDENTIALS_FILE", str(tmp_path / "etc" / "s3-creds.json"))
    monkeypatch.setenv("GRIDLEDGER_SECRETS_KEY_FILE", str(tmp_path / "etc" / "secrets.key"))
    monkeypatch.setenv("GRIDLEDGER_NOTARY_KEY_FILE", str(tmp_path / "etc" / "notary.key"))
    identities = tmp_path / "etc" / "s3.json"
    assert main(["dev", "init", "--s3-identities", str(identities)]) == 0
    assert "(created)" in capsys.readouterr().out
    creds = json.loads((tmp_path / "etc" / "s3-creds.json").read_text())
    assert set(creds["tenants"]) == {"dev", "other"} and creds["admin"]["secret_key"]
    for name in (
        "tokens.json",
        "dev-tokens.json",
        "s3-creds.json",
        "s3.json",
        "secrets.key",
        "notary.key",
    ):
        path = tmp_path / "etc" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    by_name = {i["name"]: i for i in json.loads(identities.read_text())["identities"]}
    assert by_name["agent-dev"]["actions"] == [
        "Write:gridledger/tenants/dev/*",
        "Read:gridledger/tenants/dev/*",
    ]
    assert by_name["reader-other"]["actions"] == ["Read:gridledger/tenants/other/*"]
    assert "anonymous" not in by_name
    key = by_name["agent-dev"]["credentials"][0]["accessKey"]
    assert key == creds["tenants"]["dev"]["agent"]["access_key"]

    before = {p.name: p.read_text() for p in (tmp_path / "etc").iterdir()}
    assert main(["dev", "init", "--s3-identities", str(identities)]) == 0
    out = capsys.readouterr().out
    assert "created" not in out and "written" not in out and out.count("(kept)") == 5
    assert {p.name: p.read_text() for p in (tmp_path / "etc").iterdir()} == before


@pytest.mark.integration
def test_bucket_is_ready_on_the_configured_endpoint(
    object_store: PrivateStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = object_store.settings
    monkeypatch.setenv("GRIDLEDGER_HOME", str(s.home))
    monkeypatch.setenv("GRIDLEDGER_S3_ENDPOINT", s.s3_url)
    monkeypatch.setenv("GRIDLEDGER_S3_CREDENTIALS_FILE", str(s.s3_credentials_path))
    assert main(["dev", "bucket"]) == 0
    assert f"bucket gridledger ready on {s.s3_url}" in capsys.readouterr().out
