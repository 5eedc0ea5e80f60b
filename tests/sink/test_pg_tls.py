"""The services' Postgres settings over a real TLS connection: a private Postgres started
for this module with a certificate of a CA made in the test, password authentication
required and plain connections refused."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from pydantic import SecretStr

from infra import postgres
from infra.private import new_home, private_settings
from services.settings import Settings
from services.sink import db
from tests.tls import Pki, make_pki
from tests.waiting import eventually

pytestmark = pytest.mark.integration

PASSWORD = "pg-test-password"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tls_postgres(settings: Settings) -> AsyncIterator[tuple[Settings, Pki]]:
    home = new_home("gl-pgtls-")
    private = private_settings(settings, home)
    try:
        postgres.init_cluster(private)
        postgres.start(private)
        await postgres.wait_ready(private)
        data = postgres.PostgresPaths.of(private).data
        pki = make_pki(home / "pki")
        for source, name in ((pki.cert, "server.pem"), (pki.key, "server.key")):
            shutil.copy(source, data / name)
            os.chmod(data / name, 0o600)
            if os.geteuid() == 0:
                shutil.chown(data / name, postgres.SERVER_USER, postgres.SERVER_USER)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n")
        (data / "pg_hba.conf").write_text(
            "hostssl all gridledger 127.0.0.1/32 scram-sha-256\n"
            "host    all postgres   127.0.0.1/32 trust\n"
        )
        admin = await asyncpg.connect(
            f"postgresql://postgres@127.0.0.1:{private.pg_port}/postgres", ssl=False
        )
        try:
            await admin.execute(f"ALTER ROLE gridledger PASSWORD '{PASSWORD}'")
            await admin.fetchval("SELECT pg_reload_conf()")
        finally:
            await admin.close()
        yield private, pki
    finally:
        postgres.down(private)
        shutil.rmtree(home, ignore_errors=True)


def tls(private: Settings, pki: Pki, **update: object) -> Settings:
    values: dict[str, object] = {
        "pg_sslmode": "verify-full",
        "pg_sslrootcert": pki.ca,
        "pg_password": PASSWORD,
        **update,
    }
    values["pg_password"] = SecretStr(str(values["pg_password"]))
    return private.model_copy(update=values)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_services_pool_speaks_verified_tls_with_a_password(
    tls_postgres: tuple[Settings, Pki],
) -> None:
    private, pki = tls_postgres
    settings = tls(private, pki)

    async def encrypted() -> bool | None:
        try:
            pool = await db.create_pool(settings, "public", min_size=1, max_size=1)
        except db.ReadModelError:
            return None  # the reload that turns TLS on may still be under way
        try:
            return await pool.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        finally:
            await pool.close()

    assert await eventually(encrypted, "a verified TLS connection to Postgres") is True
    await postgres.check(settings)  # what `dev up` asks of an external Postgres
    assert PASSWORD not in settings.dsn and PASSWORD not in repr(settings)


@pytest.mark.asyncio(loop_scope="module")
async def test_plain_a_wrong_password_or_another_ca_is_refused(
    tls_postgres: tuple[Settings, Pki], tmp_path: Path
) -> None:
    private, pki = tls_postgres
    stranger = make_pki(tmp_path / "other-ca")
    refused = {
        "plain": tls(private, pki, pg_sslmode="disable", pg_sslrootcert=None),
        "wrong password": tls(private, pki, pg_password="guess"),
        "another CA": tls(private, pki, pg_sslrootcert=stranger.ca),
    }
    for why, settings in refused.items():
        with pytest.raises(db.ReadModelError) as caught:
            await db.create_pool(settings, "public", min_size=1, max_size=1)
        assert PASSWORD not in str(caught.value), why
