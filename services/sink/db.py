"""Postgres connections for the read models: one schema, chosen by settings or by the caller."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from schemas.errors import GridledgerError
from services.backoff import Outage, outage_of, retrying, route_client_logs
from services.ledger.errors import broker_unavailable
from services.settings import Settings
from services.transport import pg_options

_T = TypeVar("_T")

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class ReadModelError(GridledgerError):
    """The read-model database could not be reached or is not in the expected shape."""


def check_schema(name: str) -> str:
    """Return ``name`` if it is a safe, unquoted Postgres schema name."""
    if not _SCHEMA_RE.match(name):
        raise ReadModelError(
            f"schema name {name!r} is not allowed; use lower-case letters, digits and '_'"
        )
    return name


class ConnectionLostError(ReadModelError):
    """An operation failed and its connection no longer answers: the server went away.

    asyncpg reports a connection cut under it in several ways (a closed connection,
    a proxy the pool took back, a protocol left mid-operation); the caller that saw
    the failure checks the connection and raises this when it is gone.
    """


async def connection_lost(conn: asyncpg.Connection, timeout: float = 5.0) -> bool:
    """True when ``conn`` no longer answers a trivial query."""
    try:
        async with asyncio.timeout(timeout):
            await conn.fetchval("SELECT 1")
    except Exception:  # noqa: BLE001 - any failure here means the connection is gone
        return True
    return False


POSTGRES_UNAVAILABLE: tuple[type[BaseException], ...] = (
    ConnectionLostError,
    OSError,  # refused, reset: the server is not listening (yet)
    TimeoutError,
    asyncpg.PostgresConnectionError,  # class 08, e.g. closed in the middle of an operation
    asyncpg.CannotConnectNowError,  # "the database system is starting up"
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    asyncpg.InterfaceError,  # an operation on a connection that the outage closed
)
"""Errors that mean "Postgres is not reachable now": retried, never fatal."""

_NOT_AN_OUTAGE = (
    asyncpg.InvalidAuthorizationSpecificationError,  # wrong role or password
    asyncpg.InvalidCatalogNameError,  # no such database
)
"""Connection errors that a retry cannot fix: a bad configuration, told and fatal."""


ROW_REFUSED: tuple[type[BaseException], ...] = (
    asyncpg.DataError,  # class 22: a value the column cannot hold (a NUL, a huge number)
    asyncpg.ProgramLimitExceededError,  # class 54: a value over a size limit
    OverflowError,  # an integer wider than its column, caught while encoding for COPY
    UnicodeError,  # text the encoding for COPY cannot take
)
"""Errors with which Postgres (or the encoding for it) refuses a record's rows: the sink
parks that record (reason ``unstorable``) and commits the rest of the batch. A bug of the
sink's own code (any other error) still ends the run: parking every record it touches
would hide it."""


def row_refused(exc: BaseException) -> bool:
    """True when ``exc`` refuses a record's rows rather than meaning an outage or a bug."""
    return isinstance(exc, ROW_REFUSED) and not postgres_unavailable(exc)


def postgres_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` (or the error it wraps) means Postgres is away for now."""
    while exc is not None:
        if isinstance(exc, _NOT_AN_OUTAGE):
            return False
        if isinstance(exc, asyncpg.InterfaceError):
            # asyncpg's misuse errors share the class; only a lost connection is an outage:
            # "connection is closed", or a pooled connection that the pool took back
            # ("released back to the pool") because the server closed it under its holder.
            return "closed" in str(exc) or "released back to the pool" in str(exc)
        if isinstance(exc, POSTGRES_UNAVAILABLE):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def note_outage(exc: BaseException, postgres: Outage, broker: Outage) -> bool:
    """Record ``exc`` as an outage of Postgres or of the broker, for a service that rides
    out both; False when it is neither (a bug, for the caller to raise)."""
    if postgres_unavailable(exc):
        postgres.down(exc)
    elif broker_unavailable(exc):
        broker.down(exc)
    else:
        return False
    return True


async def take_lock(conn: asyncpg.Connection, lock: str, wait_s: float) -> bool:
    """Take the session advisory lock ``lock`` on ``conn``, waiting up to ``wait_s`` for it.

    A service restarted right after a crash can find its predecessor's Postgres session
    still open (and its lock held) until the server notices the dead client; waiting a
    bounded time lets the restart go through, while one that is really running still
    makes the newcomer refuse (the sink per schema, the webhooks service per schema).
    """
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        if await conn.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", lock):
            return True
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.2)


async def when_reachable(settings: Settings, operation: Callable[[], Awaitable[_T]]) -> _T:
    """``await operation()``, retried with the shared backoff while Postgres is away."""
    return await retrying(
        operation,
        outage=outage_of(f"Postgres at {settings.dsn_redacted}"),
        transient=postgres_unavailable,
        backoff=settings.reconnect_backoff(),
    )


async def create_pool(
    settings: Settings,
    schema: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 5,
    wait: bool = False,
) -> asyncpg.Pool:
    """A pool whose connections see ``schema`` (default ``settings.pg_schema``) first.

    ``wait=True`` (long-running services) retries until Postgres answers; otherwise
    an unreachable server raises at once. Either way a wrong role, password or
    database is a :class:`ReadModelError` at once: no retry would fix it.
    """
    schema = check_schema(schema or settings.pg_schema)
    # The pool reconnects by itself and logs a traceback per failed try; the outage's
    # two lines say it once.
    route_client_logs("asyncpg", outage_of(f"Postgres at {settings.dsn_redacted}"))

    async def connect() -> asyncpg.Pool:
        try:
            pool = await asyncpg.create_pool(
                settings.dsn,
                min_size=min_size,
                max_size=max_size,
                server_settings={"search_path": schema, "timezone": "UTC"},
                **pg_options(settings),
            )
        except (OSError, asyncpg.PostgresError) as exc:
            if postgres_unavailable(exc):
                raise ReadModelError(
                    f"cannot reach Postgres at {settings.dsn_redacted}: {exc}. "
                    "Start the local stack with `gridledger dev up`"
                ) from exc
            raise ReadModelError(
                f"Postgres at {settings.dsn_redacted} refused the connection: {exc}. "
                "Check the role, password and database in GRIDLEDGER_PG_DSN (or GRIDLEDGER_PG_PORT)"
            ) from exc
        assert pool is not None
        return pool

    return await (when_reachable(settings, connect) if wait else connect())


async def drop_schema(settings: Settings, schema: str) -> None:
    """Drop a schema and everything in it (tests, replay scratch schemas)."""
    conn = await asyncpg.connect(settings.dsn, **pg_options(settings))
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {check_schema(schema)} CASCADE")
    finally:
        await conn.close()
