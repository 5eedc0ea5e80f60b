"""Sealing and the key: what a wrong, missing or altered key or row gives (no services needed)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from services.secretstore import (
    SecretOpenError,
    SecretsKey,
    SecretsKeyError,
    ensure_key,
    key_path,
    load_key,
    new_key_text,
)
from services.settings import Settings


def key() -> SecretsKey:
    return SecretsKey(base64.urlsafe_b64decode(new_key_text()), "test")


def test_a_sealed_value_opens_only_for_its_tenant_and_name_with_its_key() -> None:
    k = key()
    blob = k.seal("dev", "hf-token", b"v4lue")
    assert b"v4lue" not in blob and k.open("dev", "hf-token", blob) == b"v4lue"
    for tenant, name in (("other", "hf-token"), ("dev", "db")):
        with pytest.raises(SecretOpenError, match="altered"):
            k.open(tenant, name, blob)
    with pytest.raises(SecretOpenError, match="another key"):
        key().open("dev", "hf-token", blob)
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(SecretOpenError, match="altered"):
        k.open("dev", "hf-token", flipped)


def test_agent_tokens_are_per_node() -> None:
    k = key()
    assert k.agent_token_valid("node-a", k.agent_token("node-a"))
    assert not k.agent_token_valid("node-b", k.agent_token("node-a"))
    assert not key().agent_token_valid("node-a", k.agent_token("node-a"))


def test_a_missing_or_malformed_key_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    with pytest.raises(SecretsKeyError, match="GRIDLEDGER_SECRETS_KEY is not set"):
        load_key(settings)
    with pytest.raises(SecretsKeyError, match="not 32 bytes"):
        load_key(Settings(home=tmp_path, secrets_key="c2hvcnQ="))


def test_dev_up_writes_a_private_key_once(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert ensure_key(settings) is True
    path = key_path(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = load_key(settings)
    assert ensure_key(settings) is False and load_key(settings).raw == first.raw
