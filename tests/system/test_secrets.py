"""Secrets off the ledger, end to end: real services, a real agent, a real busybox container.

A tenant's secret reaches its job's container (the job prints its sha256 and length, never
the value) and nowhere else: not on any topic, in any table of the read models, in the
services' logs, nor in the agent's journal, spool or work folders. Another tenant's job that
names a secret it does not hold fails ``secret_missing`` at dispatch, naming it, even though
a secret of that name exists for the first tenant.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from infra.tokens import token_for
from schemas.topics import TOPIC_NAMES
from services.cli.client import ApiClient, base_url
from services.ledger import Ledger
from services.secretstore import ensure_key
from services.settings import Settings, load_settings
from tests.system.conftest import System, run_system, sh, system_settings, workdir

pytestmark = pytest.mark.integration

VALUE = "hf_9dK2-secret-of-dev-Zq71"
OTHER_VALUE = "hf_other-tenant-secret-Lm40"
DB_VALUE = "db-password-of-dev-Xr55"


@pytest.fixture
def system() -> Iterator[System]:
    """The installation with a secrets key in its home (``dev up`` writes one likewise)."""
    work = workdir()
    settings = system_settings(load_settings(), work)
    ensure_key(settings)
    yield from run_system(settings, work)


def put_secret(client: ApiClient, name: str, value: str) -> None:
    client.send("PUT", f"/v1/secrets/{name}", json.dumps({"value": value}).encode())


async def topic_bytes(settings: Settings) -> bytes:
    """Every record's key, value and headers on every topic of the installation."""
    out = bytearray()
    async with Ledger(settings, "secrets-test") as ledger:
        for name in TOPIC_NAMES:
            async for raw in ledger.read_raw(settings.topic(name)):
                out += (raw.key or b"") + (raw.value or b"")
                for _, header in raw.headers or ():
                    out += header or b""
    return bytes(out)


async def table_text(settings: Settings) -> str:
    """Every row of every table of the installation's schema but the sealed secrets, as
    text."""
    conn = await asyncpg.connect(settings.dsn)
    try:
        tables = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
            settings.pg_schema,
        )
        assert {"jobs", "job_events", "log_chunks", "tenant_secrets"} <= {
            t["table_name"] for t in tables
        }
        rows = []
        for table in tables:
            name = table["table_name"]
            if name == "tenant_secrets":
                continue
            rows += await conn.fetch(f"SELECT t::text AS row FROM {settings.pg_schema}.{name} t")
        return "\n".join(r["row"] for r in rows)
    finally:
        await conn.close()


def files_bytes(home: Path) -> bytes:
    """Every file under the installation's home: journal, spool, work folders, service logs."""
    return b"".join(p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file())


def test_a_secret_reaches_its_job_and_nothing_else_and_a_missing_one_is_named(
    system: System,
) -> None:
    settings = system.settings
    other = ApiClient(base_url(settings, None), token_for(settings, "other"))
    put_secret(system.api, "hf-token", VALUE)
    put_secret(system.api, "db", DB_VALUE)
    put_secret(other, "hf-token", OTHER_VALUE)
    system.start_agent("node-s", count=1)

    used = system.submit(
        sh(
            'printf %s "$HF_TOKEN" | sha256sum; echo "chars=${#HF_TOKEN}"',
            secrets={"HF_TOKEN": "hf-token"},
        )
    )
    missing = str(
        other.post(
            "/v1/jobs",
            json.dumps(sh("echo never", secrets={"DB_PASSWORD": "db"})).encode(),
        )["job_id"]
    )
    system.wait_terminal([used], 120)
    system.wait_for(
        lambda: other.get(f"/v1/jobs/{missing}")["status"] == "failed", 120, "the other's job"
    )

    doc = system.job(used)
    assert doc["status"] == "succeeded", doc.get("failure")
    assert doc["spec"]["secrets"] == {"HF_TOKEN": "hf-token"}
    logs = json.dumps(list(system.api.stream(f"/v1/jobs/{used}/logs?format=ndjson")))
    assert hashlib.sha256(VALUE.encode()).hexdigest() in logs, logs
    assert f"chars={len(VALUE)}" in logs

    failure = other.get(f"/v1/jobs/{missing}")["failure"]
    assert failure["failure_class"] == "secret_missing"
    assert failure["attribution"] == "user" and failure["retryable"] is False
    assert "db (for DB_PASSWORD)" in failure["summary"]
    assert "gridledger secret set" in failure["advice"]

    recorded = [
        asyncio.run(topic_bytes(settings)),
        asyncio.run(table_text(settings)).encode(),
        files_bytes(settings.home),
    ]
    assert recorded[0] and recorded[1] and recorded[2]
    for where, data in zip(("topics", "tables", "files"), recorded, strict=True):
        for value in (VALUE, OTHER_VALUE, DB_VALUE):
            assert value.encode() not in data, f"{value} found in the {where}"
    assert b"hf-token" in recorded[0]  # the names are there: the search looked at the records
