"""The credential-looking env rules, row by row: what warns, what does not (no services)."""

from __future__ import annotations

import pytest

from services.api.credentials import RULES, warnings

WARNED = [
    ("value.private_key", "CERT", "-----BEGIN RSA PRIVATE KEY-----\nMIIE"),
    ("value.aws_access_key_id", "ID", "AKIAIOSFODNN7EXAMPLE"),
    ("value.github_token", "GH", "ghp_" + "a1B2c3D4e5" * 4),
    ("value.huggingface_token", "HF", "hf_" + "AbCdEfGhIj" * 3 + "kl"),
    ("value.slack_token", "SLACK", "xoxb-1234567890-abcdef"),
    ("value.api_key", "OPENAI", "sk-" + "x1Y2z3" * 5),
    ("value.jwt", "BEARER", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig"),
    ("value.url_password", "DATABASE_URL", "postgresql://app:hunter2@db:5432/app"),
    ("name.aws_secret", "AWS_SECRET_ACCESS_KEY", "short"),
    ("name.credential_word", "WANDB_API_KEY", "q9-local"),
    ("name.credential_word", "HF_TOKEN", "q9-local"),
    ("name.credential_word", "PASSWORD", "q9-local"),
    ("name.credential_word", "db_password", "q9-local"),
    ("name.key_suffix", "STRIPE_KEY", "q9-local"),
    ("value.random", "SEED", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA9xQ"),
]

QUIET = [
    ("BATCH", "8"),
    ("MODEL", "meta-llama/Llama-3.1-8B-Instruct"),
    ("COMMIT", "3f786850e387550fdab836ed7e6dc881de23001b"),  # hex: a hash, not a secret
    ("RUN_ID", "123e4567-e89b-12d3-a456-426614174000"),
    ("DATA", "/data/train/shard-00001-of-00128.jsonl"),
    ("HF_TOKEN", ""),  # empty: nothing to leak
    ("TOKENIZERS_PARALLELISM", "false"),
    ("MESSAGE", "a long sentence with spaces in it and digits 12345"),
]


@pytest.mark.parametrize(("rule", "name", "value"), WARNED, ids=[w[0] + ":" + w[1] for w in WARNED])
def test_a_credential_is_warned_about_by_its_rule_never_quoting_it(
    rule: str, name: str, value: str
) -> None:
    (warning,) = warnings({name: value})
    assert warning["rule"] == rule and warning["field"] == f"env.{name}"
    assert "secrets:" in warning["fix"] and "gridledger secret set" in warning["fix"]
    assert value not in str(warning)


@pytest.mark.parametrize(("name", "value"), QUIET, ids=[q[0] for q in QUIET])
def test_ordinary_settings_are_not_warned_about(name: str, value: str) -> None:
    assert warnings({name: value}) == []


def test_every_rule_has_a_case() -> None:
    assert {r.id for r in RULES} == {w[0] for w in WARNED}
