"""The broker's readiness check: Kafka client code, so it lives with the ledger.

See :mod:`services.ops.checks` for what a check is and how the ops server runs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaClient

from services.ops.checks import DEFAULT_TIMEOUT_S, CheckResult
from services.settings import Settings
from services.transport import kafka_options


class KafkaCheck:
    """Broker metadata fetched now, and the service's topics present in it.

    Over a client of its own, not the service's producer, whose cached metadata would
    answer even with the broker gone.
    """

    name = "kafka"

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str] = (),
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = tuple(topics)
        self.client_options = client_options or {}
        """TLS and SASL of the connection (services.transport.kafka_options)."""
        self._client: AIOKafkaClient | None = None

    async def probe(self) -> CheckResult:
        """Ask the cluster for its metadata, on a client kept between probes."""
        if self._client is None:
            client = AIOKafkaClient(
                bootstrap_servers=self.bootstrap,
                client_id="gridledger-ops",
                request_timeout_ms=int(DEFAULT_TIMEOUT_S * 1000),
                **self.client_options,
            )
            try:
                await client.bootstrap()  # fetches the metadata from a bootstrap broker
            except BaseException:
                await client.close()
                raise
            self._client = client
        cluster = await self._client.fetch_all_metadata()
        brokers = cluster.brokers()
        present = cluster.topics()
        missing = [t for t in self.topics if t not in present]
        data = {"brokers": len(brokers), "bootstrap": self.bootstrap}
        if missing:
            return CheckResult(
                self.name,
                False,
                f"{len(brokers)} broker(s) answer but topics {', '.join(missing)} are missing; "
                "create them with `gridledger dev up`",
                data,
            )
        return CheckResult(
            self.name, True, f"{len(brokers)} broker(s), {len(self.topics)} topic(s) present", data
        )

    async def close(self) -> None:
        """Close the probe's client."""
        if self._client is not None:
            await self._client.close()
            self._client = None


def kafka_check(settings: Settings, topics: Iterable[str]) -> KafkaCheck:
    """Broker metadata with the service's topics (full names or suffixes) present."""
    names = [t if t.startswith(settings.topic_prefix) else settings.topic(t) for t in topics]
    return KafkaCheck(settings.kafka_bootstrap, names, kafka_options(settings))
