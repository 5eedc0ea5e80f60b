"""Readiness checks that really ask each dependency, not a flag set at start-up.

A check is an object with a ``name`` and an async ``probe()`` that returns a
:class:`CheckResult` or raises; :func:`run_checks` runs a set of them
concurrently, each under a timeout, and turns an exception or a timeout into a
failed result that names the check and the error. A check never hides a
failure: ``ok`` is false whenever the dependency did not answer as it should.

- :class:`services.ledger.health.KafkaCheck` — cluster metadata fetched from a
  broker over a client of its own (it lives with the ledger: only services/ledger
  speaks Kafka), and the topics the service needs present.
- :class:`PostgresCheck` — ``SELECT 1`` over the service's pool, or over a fresh
  connection when it has none.
- :class:`DockerCheck` — the Docker daemon's ``/_ping``.
- :class:`LagCheck` — a consumer's lag against a threshold (also exported as
  the ``gridledger_consumer_lag`` gauge).
- :class:`StateCheck` — a fact only the service knows (rebuilt from the topics,
  consumer group joined, commands consumer positioned, worker not crashed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg

from services.ops import metrics
from services.settings import Settings

DEFAULT_TIMEOUT_S = 3.0
"""A dependency that takes longer than this to answer a probe is not ready."""


@dataclass(frozen=True)
class CheckResult:
    """One check's answer: ok or not, why, and whether the service's readiness depends on it."""

    name: str
    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)
    critical: bool = True
    """False: a failure degrades the service but leaves it ready (see :class:`Optional`)."""

    def to_json(self) -> dict[str, Any]:
        """The result as /readyz lists it."""
        return {
            "name": self.name,
            "ok": self.ok,
            "critical": self.critical,
            "detail": self.detail,
            **self.data,
        }


class Check(Protocol):
    """A readiness check: a name and a probe that answers, never raises (a failure is an answer)."""

    name: str

    async def probe(self) -> CheckResult:
        """Ask the dependency now; a failure is a result with ``ok`` false, not an exception."""
        ...


class Optional:
    """A check whose failure is reported (``ok: false``) without making the service unready.

    The API is the case: with Postgres away it still takes submissions (the
    ledger is Kafka), so a load balancer must keep sending it traffic; reads say
    they may lag.
    """

    def __init__(self, check: Check) -> None:
        self.check = check
        self.name = check.name

    async def probe(self) -> CheckResult:
        """The wrapped check's result, marked not critical."""
        result = await self.check.probe()
        return CheckResult(result.name, result.ok, result.detail, result.data, critical=False)

    async def close(self) -> None:
        """Close the wrapped check's connection, if it holds one."""
        close = getattr(self.check, "close", None)
        if close is not None:
            await close()


async def run_checks(
    checks: Sequence[Check], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[CheckResult]:
    """Run every check concurrently; a raised error or a timeout is a failed result."""

    async def one(check: Check) -> CheckResult:
        critical = not isinstance(check, Optional)
        try:
            async with asyncio.timeout(timeout_s):
                result = await check.probe()
        except TimeoutError:
            result = CheckResult(
                check.name, False, f"no answer within {timeout_s:g} s", critical=critical
            )
        except Exception as exc:  # noqa: BLE001 - a failed probe is the answer, not a crash
            result = CheckResult(
                check.name, False, f"{type(exc).__name__}: {exc}", critical=critical
            )
        metrics.CHECK_OK.labels(check=check.name).set(1 if result.ok else 0)
        return result

    return list(await asyncio.gather(*(one(c) for c in checks)))


async def close_checks(checks: Iterable[Check]) -> None:
    """Close every check that holds a connection, at the service's stop."""
    for check in checks:
        close = getattr(check, "close", None)
        if close is not None:
            await close()


class PostgresCheck:
    """``SELECT 1`` over the service's pool, or a fresh connection to ``dsn``."""

    name = "postgres"

    def __init__(self, *, pool: asyncpg.Pool | None = None, dsn: str = "") -> None:
        if pool is None and not dsn:
            raise ValueError("PostgresCheck needs a pool or a dsn")
        self.pool = pool
        self.dsn = dsn

    async def probe(self) -> CheckResult:
        """``SELECT 1`` on the pool, or on a fresh connection when the check has only a DSN."""
        if self.pool is not None:
            value = await self.pool.fetchval("SELECT 1")
        else:
            conn = await asyncpg.connect(self.dsn, timeout=DEFAULT_TIMEOUT_S)
            try:
                value = await conn.fetchval("SELECT 1")
            finally:
                await conn.close()
        return CheckResult(self.name, value == 1, "SELECT 1 answered")


class DockerCheck:
    """The Docker daemon answers its ping (run in a thread: the SDK is blocking)."""

    name = "docker"

    def __init__(self, ping: Callable[[], Any]) -> None:
        self._ping = ping

    async def probe(self) -> CheckResult:
        """Ping the Docker daemon (on a thread: the SDK blocks)."""
        answer = await asyncio.to_thread(self._ping)
        return CheckResult(self.name, bool(answer), "the daemon answered /_ping")


Offsets = Mapping[tuple[str, int], int]
LagSource = Callable[[], Awaitable[dict[tuple[str, int], int | None]]]


class LagCheck:
    """Records behind the end of each consumed partition, against ``max_lag`` in total."""

    name = "lag"

    def __init__(self, source: LagSource, max_lag: int) -> None:
        self.source = source
        self.max_lag = max_lag

    async def probe(self) -> CheckResult:
        """Record each partition's lag as a metric; ok while the total is at most ``max_lag``."""
        lags = await self.source()
        known = {tp: lag for tp, lag in lags.items() if lag is not None}
        for (topic, partition), lag in known.items():
            metrics.CONSUMER_LAG.labels(topic=topic, partition=str(partition)).set(lag)
        total = sum(known.values())
        unknown = len(lags) - len(known)
        data: dict[str, Any] = {"lag": total, "max_lag": self.max_lag, "partitions": len(lags)}
        note = f" ({unknown} partition(s) not fetched yet)" if unknown else ""
        if total > self.max_lag:
            worst = max(known.items(), key=lambda item: item[1])
            return CheckResult(
                self.name,
                False,
                f"{total} records behind, above the threshold {self.max_lag} "
                f"(worst {worst[0][0]}/{worst[0][1]}: {worst[1]}){note}",
                data,
            )
        return CheckResult(self.name, True, f"{total} records behind{note}", data)


async def consumer_lag(
    consumer: Any, positions: Offsets | None = None
) -> dict[tuple[str, int], int | None]:
    """Lag per assigned partition of an aiokafka (or faust) consumer.

    The end is the high watermark the consumer learnt from its last fetch (no
    broker round trip); the position is ``positions[tp]`` when the service keeps
    its own committed offsets (the sink), else the consumer's. None: no fetch yet.
    """
    lags: dict[tuple[str, int], int | None] = {}
    for tp in consumer.assignment():
        end = consumer.highwater(tp)
        if positions is not None:
            # TopicPartition is a named tuple: it finds a (topic, partition) key and back.
            position = positions.get((tp.topic, tp.partition), 0)
        else:
            position = await consumer.position(tp)
        key = (tp.topic, tp.partition)
        lags[key] = None if end is None or position is None else max(0, end - position)
    return lags


class StateCheck:
    """A fact the service itself knows: ``state()`` returns (ok, detail)."""

    def __init__(self, name: str, state: Callable[[], tuple[bool, str]]) -> None:
        self.name = name
        self._state = state

    async def probe(self) -> CheckResult:
        """What the service itself says of its state."""
        ok, detail = self._state()
        return CheckResult(self.name, ok, detail)


def lag_check(settings: Settings, consumer_of: Any, positions_of: Any = None) -> LagCheck:
    """The lag of the consumer ``consumer_of()`` returns (none yet: no partitions), from
    the offsets ``positions_of()`` returns when the service stores its own."""

    async def source() -> dict[tuple[str, int], int | None]:
        consumer = consumer_of()
        if consumer is None:
            return {}
        return await consumer_lag(consumer, positions_of() if positions_of else None)

    return LagCheck(source, settings.ops_max_lag)


def consuming_checks(settings: Settings, service: Any, waiting_for: str) -> list[Check]:
    """A consumer that stores its offsets in Postgres (``consumer``, ``positions``): whether
    it consumes, and its lag from the offsets it stored."""

    def consuming() -> tuple[bool, str]:
        consumer = getattr(service, "consumer", None)
        if consumer is None:
            return False, f"not consuming yet (waiting for {waiting_for})"
        return True, f"assigned {len(consumer.assignment())} partition(s)"

    lag = lag_check(settings, lambda: getattr(service, "consumer", None), lambda: service.positions)
    return [StateCheck("consumer", consuming), lag]


def probe_hook(check: Check) -> Callable[[], Awaitable[None]]:
    """A scrape hook that probes ``check`` (its metrics are fresh on every ``/metrics``)."""

    async def hook() -> None:
        await check.probe()

    return hook
