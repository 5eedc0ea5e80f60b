"""The services' Kafka settings against a real broker with a SASL_SSL listener (SCRAM-SHA-512
over TLS, a certificate of a CA made in the test): topics created, an event appended and read
back through it, a wrong password refused.

About 45 s on a loaded machine (the broker is a JVM), so it runs only with
``GRIDLEDGER_KAFKA_TLS=1``; ``tests/ledger/test_transport.py`` is the quick check
that runs by default.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import serialization
from pydantic import SecretStr

from infra import kafka, processes
from infra.private import link_jars, new_home, private_settings
from schemas.events import JobSucceeded
from services.ledger import Ledger, compose, topics
from services.ledger.errors import LedgerError
from services.ops.specs import free_ports
from services.settings import Settings
from tests.schemas.samples import T0
from tests.tls import make_pki
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("GRIDLEDGER_KAFKA_TLS") != "1",
        reason="a broker of its own, ~45 s: set GRIDLEDGER_KAFKA_TLS=1",
    ),
]

USER, PASSWORD = "alice", "s3cret-scram"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tls_broker(settings: Settings) -> AsyncIterator[Settings]:
    """Settings of a client of the SASL_SSL listener of a private broker."""
    home = new_home("gl-kafka-tls-")
    private = private_settings(settings, home)
    if not link_jars(settings, home):
        pytest.skip("the shared home has no Kafka jars (`gridledger dev up` fetches them)")
    (tls_port,) = free_ports(1)
    pki = make_pki(home / "pki")
    key = serialization.load_pem_private_key(pki.key.read_bytes(), None)
    keystore = home / "pki" / "broker.pem"  # Kafka's PEM keystore: PKCS#8 key, then chain
    keystore.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + pki.cert.read_bytes()
    )
    kafka.write_config(private)
    node = kafka.cluster_nodes(private)[0]
    plain = f"PLAINTEXT://{node.host}:{node.port}"
    secured = f"SASL_SSL://127.0.0.1:{tls_port}"
    config = node.paths.config.read_text()
    config = config.replace(f"listeners={plain},", f"listeners={plain},{secured},")
    config = config.replace(
        f"advertised.listeners={plain}\n", f"advertised.listeners={plain},{secured}\n"
    )
    config = config.replace("PLAINTEXT:PLAINTEXT", "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL")
    config += (
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n"
    )
    node.paths.config.write_text(config)
    subprocess.run(
        [
            *kafka._java(private, node.paths),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            kafka.new_cluster_id(),
            "-c",
            str(node.paths.config),
            "--add-scram",
            f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]",
        ],
        check=True,
        capture_output=True,
    )
    pid = kafka.start(private)
    try:
        await kafka.wait_ready(private, 180, pid)
        yield private.model_copy(
            update={
                "kafka_bootstrap": f"127.0.0.1:{tls_port}",
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_mechanism": "SCRAM-SHA-512",
                "kafka_sasl_username": USER,
                "kafka_sasl_password": SecretStr(PASSWORD),
                "kafka_ssl_cafile": pki.ca,
            }
        )
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not processes.is_alive(pid), "the TLS broker to stop", 60)
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.asyncio(loop_scope="module")
async def test_topics_appends_and_reads_go_over_sasl_ssl(tls_broker: Settings) -> None:
    await topics.ensure_topics(tls_broker)
    async with Ledger(tls_broker, "tls-test") as ledger:
        appended = await ledger.append(JobSucceeded(job_id="job-tls", attempt=1, occurred_at=T0))
        assert appended.offset >= 0
        assert [e.attempt for e in await compose.history(ledger, "job-tls")] == [1]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_wrong_password_is_refused(tls_broker: Settings) -> None:
    wrong = tls_broker.model_copy(update={"kafka_sasl_password": SecretStr("guess")})
    with pytest.raises(LedgerError):
        await Ledger(wrong, "tls-wrong").start()
