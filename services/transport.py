"""How the services reach the broker and Postgres: TLS, SASL and passwords, in one place.

Every aiokafka client a service makes (the ledger's producer and consumers, the
processors' consumer and faust app, the ops health check, the client's
subscriber (:func:`subscriber`), the topic admin) takes :func:`kafka_options`; every
Postgres pool or connection takes :func:`pg_options`. The settings are in
``services/settings.py`` (``GRIDLEDGER_KAFKA_SECURITY_PROTOCOL``,
``GRIDLEDGER_KAFKA_SASL_*``, ``GRIDLEDGER_KAFKA_SSL_*``, ``GRIDLEDGER_PG_PASSWORD``,
``GRIDLEDGER_PG_SSLMODE``, ``GRIDLEDGER_PG_SSLROOTCERT``) and what each protects in
README's "Security model".
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.settings import Settings

if TYPE_CHECKING:
    from gridledger_client.subscriber import Subscriber
    from pydantic import BaseModel


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of the Kafka clients, or None when the protocol has no TLS."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    context = ssl.create_default_context(
        cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None
    )
    context.check_hostname = settings.kafka_ssl_check_hostname
    if settings.kafka_ssl_certfile:
        context.load_cert_chain(
            str(settings.kafka_ssl_certfile),
            str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
        )
    return context


def kafka_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for every aiokafka client (producer, consumer, admin, client)."""
    options: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    context = kafka_ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.kafka_security_protocol.startswith("SASL"):
        options |= {
            "sasl_mechanism": settings.kafka_sasl_mechanism,
            "sasl_plain_username": settings.kafka_sasl_username,
            "sasl_plain_password": settings.kafka_sasl_password.get_secret_value(),
        }
    return options


def pg_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``asyncpg.connect`` and ``asyncpg.create_pool``: the password
    and the TLS mode (a verifying context for ``verify-ca`` and ``verify-full``)."""
    options: dict[str, Any] = {}
    password = settings.pg_password.get_secret_value()
    if password:
        options["password"] = password
    mode = settings.pg_sslmode
    if mode == "disable":
        options["ssl"] = False
    elif mode in {"prefer", "require"}:
        options["ssl"] = mode
    elif mode in {"verify-ca", "verify-full"}:
        root = settings.pg_sslrootcert
        context = ssl.create_default_context(cafile=str(root) if root else None)
        context.check_hostname = mode == "verify-full"
        options["ssl"] = context
    return options


def subscriber(
    settings: Settings, topics: Sequence[str] = ("job-events",), **kw: Any
) -> Subscriber:
    """The client's ``Subscriber`` on this installation (bootstrap, prefix, TLS and SASL),
    delivering the server's models (``JobFailed``, ``JobView``) rather than dicts."""
    from gridledger_client.subscriber import Subscriber

    kw = {**kafka_options(settings), **kw}
    return Subscriber(
        settings.kafka_bootstrap, topics, prefix=settings.topic_prefix, decoder=_models, **kw
    )


def _models(data: bytes) -> tuple[str, BaseModel]:
    """A payload as the server's model (validated: whoever wrote it)."""
    from gridledger_client.wire import DecodeError

    from schemas import codec
    from schemas.errors import EventDecodeError, SchemaRegistryError

    try:
        value = codec.decode(data)
    except (EventDecodeError, SchemaRegistryError) as exc:
        raise DecodeError(str(exc)) from exc
    return type(value).__name__, value
