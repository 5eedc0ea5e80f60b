"""TLS and SASL settings reach every Kafka client the services make.

No TLS broker runs here, so each client dials a recording endpoint on 127.0.0.1
that speaks just enough of the Kafka protocol over real TLS (a certificate of a
CA made in the test): it answers ApiVersions and SaslHandshake and records each
request, so the test sees that the client verified the certificate, picked the
configured mechanism and sent the configured user.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import pytest
import pytest_asyncio
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from pydantic import ValidationError

from services.ledger import Ledger
from services.ledger.health import KafkaCheck, kafka_check
from services.ledger.topics import admin_client
from services.processors.app import faust_credentials
from services.settings import Settings
from services.transport import kafka_options, subscriber
from tests.tls import Pki, make_pki
from tests.waiting import eventually

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


def _string(body: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", body, at)
    return body[at + 2 : at + 2 + size].decode(), at + 2 + size


@dataclass
class Endpoint:
    """What the clients sent: (api key, client id, payload) per request."""

    port: int
    pki: Pki
    requests: list[tuple[int, str, bytes]] = field(default_factory=list)

    def settings(self, **update: Any) -> Settings:
        values: dict[str, Any] = {
            "kafka_bootstrap": f"127.0.0.1:{self.port}",
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_username": "alice",
            "kafka_sasl_password": "s3cret",
            "kafka_ssl_cafile": self.pki.ca,
        }
        return Settings(**{**values, **update})

    def authentications(self) -> list[bytes]:
        return [payload for key, _, payload in self.requests if key == SASL_AUTHENTICATE]

    def mechanisms(self) -> list[str]:
        return [_string(p, 0)[0] for key, _, p in self.requests if key == SASL_HANDSHAKE]


@pytest_asyncio.fixture
async def endpoint(tmp_path: Path) -> AsyncIterator[Endpoint]:
    pki = make_pki(tmp_path / "pki")
    found = Endpoint(0, pki)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                key, version, correlation = struct.unpack_from(">hhi", body)
                client, at = _string(body, 8)
                found.requests.append((key, client, body[at:]))
                if key == API_VERSIONS:
                    apis = b"".join(struct.pack(">hhh", k, 0, 2) for k in range(45))
                    answer = struct.pack(">ihi", correlation, 0, 45) + apis
                    answer += struct.pack(">i", 0) if version >= 1 else b""
                elif key == SASL_HANDSHAKE:
                    mechanism, _ = _string(body, at)
                    answer = struct.pack(">ihih", correlation, 0, 1, len(mechanism))
                    answer += mechanism.encode()
                else:
                    break  # the credentials are recorded; no broker goes further
                writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
        writer.close()

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.cert, pki.key)
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    found.port = server.sockets[0].getsockname()[1]
    try:
        yield found
    finally:
        server.close()


async def dials(endpoint: Endpoint, start: Awaitable[Any], stop: Callable[[], Awaitable[Any]]):
    """Run ``start`` until the endpoint saw the client authenticate, then stop the client."""
    task = asyncio.ensure_future(start)
    try:
        await eventually(endpoint.authentications, "the client to send its SASL credentials")
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        with contextlib.suppress(Exception):
            await stop()


async def test_every_kafka_client_dials_tls_and_sasl_as_configured(endpoint: Endpoint) -> None:
    settings = endpoint.settings()
    ledger = Ledger(settings, "svc")
    consumer = ledger.consumer(settings.topic("job-events"))
    check = kafka_check(settings, ["job-events"])
    sub = subscriber(settings)

    @contextlib.asynccontextmanager
    async def admin() -> AsyncIterator[None]:
        async with admin_client(settings):
            yield

    admin_session = admin()
    clients: list[tuple[str, Awaitable[Any], Callable[[], Awaitable[Any]]]] = [
        ("svc", ledger.start(), ledger.stop),  # the producer every service appends with
        ("svc-consumer", consumer.start(), consumer.stop),  # every reader's consumer
        ("gridledger-ops", check.probe(), check.close),  # /readyz's broker check
        ("gridledger-subscriber", sub.start(), sub.stop),
        ("", admin_session.__aenter__(), lambda: admin_session.__aexit__(None, None, None)),
    ]
    for client_id, start, stop in clients:
        endpoint.requests.clear()
        await dials(endpoint, start, stop)
        (first, *_) = endpoint.authentications()
        assert b"n=alice," in first, client_id  # SCRAM's first message names the user
        assert endpoint.mechanisms()[0] == "SCRAM-SHA-512"
        if client_id:
            assert {c for _, c, _ in endpoint.requests} == {client_id}


async def test_plain_sasl_sends_the_configured_user_and_password(endpoint: Endpoint) -> None:
    ledger = Ledger(endpoint.settings(kafka_sasl_mechanism="PLAIN"), "svc")
    await dials(endpoint, ledger.start(), ledger.stop)
    assert endpoint.mechanisms()[0] == "PLAIN"
    assert endpoint.authentications()[0].endswith(b"\x00alice\x00s3cret")


async def test_a_certificate_of_another_ca_is_refused_before_any_request(
    endpoint: Endpoint, tmp_path: Path
) -> None:
    stranger = make_pki(tmp_path / "other-ca")
    settings = endpoint.settings(kafka_ssl_cafile=stranger.ca)
    consumer = Ledger(settings, "svc").consumer(settings.topic("job-events"))
    with pytest.raises(Exception):  # noqa: B017 - aiokafka's own connection error
        await asyncio.wait_for(consumer.start(), 30)
    await consumer.stop()
    assert endpoint.requests == []


def test_the_faust_app_gets_the_same_credentials() -> None:
    pki_free = Settings(
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="bob",
        kafka_sasl_password="pw",
    )
    credentials = faust_credentials(pki_free)
    assert isinstance(credentials, faust.SASLCredentials)
    assert dict(credentials_to_aiokafka_auth(credentials)) == {
        **kafka_options(pki_free),
        "ssl_context": None,
    }
    assert faust_credentials(Settings()) is None
    assert kafka_options(Settings()) == {"security_protocol": "PLAINTEXT"}


def test_settings_that_would_not_do_what_they_say_are_refused(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"kafka_security_protocol": "SASL_SSL"}, "GRIDLEDGER_KAFKA_SASL_USERNAME"),
        ({"kafka_ssl_cafile": tmp_path / "ca.pem"}, "is PLAINTEXT"),
        (
            {"kafka_security_protocol": "SSL", "kafka_ssl_keyfile": tmp_path / "k"},
            "needs GRIDLEDGER_KAFKA_SSL_CERTFILE",
        ),
        ({"pg_sslrootcert": tmp_path / "ca.pem"}, "verify-ca or verify-full"),
    ]
    for values, message in cases:
        with pytest.raises(ValidationError, match=message):
            Settings(**values)
    assert "s3cret" not in repr(Settings(kafka_sasl_password="s3cret", pg_password="s3cret"))


def test_kafka_check_takes_the_options_unchanged() -> None:
    options = {"security_protocol": "SSL", "ssl_context": ssl.create_default_context()}
    assert KafkaCheck("127.0.0.1:1", (), options).client_options is options
