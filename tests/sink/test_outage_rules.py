"""Which errors are an outage (retried) and which are a bug or a bad configuration (fatal)."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from schemas.errors import LedgerError
from services.ledger.client import BrokerUnavailableError, broker_unavailable
from services.sink.db import ReadModelError, postgres_unavailable


def _wrapped(cause: BaseException) -> ReadModelError:
    """A ReadModelError as ``raise ... from cause`` leaves it."""
    error = ReadModelError("cannot reach Postgres")
    error.__cause__ = cause
    return error


POSTGRES_CASES = [
    (ConnectionRefusedError(111, "Connect call failed"), True),
    (asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"), True),
    (asyncpg.CannotConnectNowError("the database system is starting up"), True),
    (asyncpg.AdminShutdownError("terminating connection due to administrator command"), True),
    (asyncpg.InterfaceError("connection is closed"), True),
    (
        asyncpg.InterfaceError(
            "cannot call Connection.execute(): connection has been released back to the pool"
        ),
        True,
    ),
    (_wrapped(ConnectionRefusedError(111, "refused")), True),
    (asyncpg.InterfaceError("cannot perform operation: another operation is in progress"), False),
    (asyncpg.InvalidCatalogNameError('database "nope" does not exist'), False),
    (_wrapped(asyncpg.InvalidAuthorizationSpecificationError('role "x" does not exist')), False),
    (asyncpg.UndefinedTableError('relation "jobs" does not exist'), False),
    (ValueError("a bug"), False),
]


@pytest.mark.parametrize(("error", "outage"), POSTGRES_CASES, ids=lambda v: repr(v)[:60])
def test_postgres_errors_are_told_apart(error: BaseException, outage: bool) -> None:
    assert postgres_unavailable(error) is outage


BROKER_CASES = [
    (BrokerUnavailableError("the broker did not acknowledge the append"), True),
    (KafkaConnectionError("Unable to bootstrap from 127.0.0.1:1"), True),
    (KafkaTimeoutError(), True),
    (LedgerError("topic t.job-events does not exist: run `gridledger dev up`"), False),
    # A bare socket error may be Postgres's: the ledger wraps its own.
    (ConnectionRefusedError(111, "refused"), False),
]


@pytest.mark.parametrize(("error", "outage"), BROKER_CASES, ids=lambda v: repr(v)[:60])
def test_broker_errors_are_told_apart(error: BaseException, outage: bool) -> None:
    assert broker_unavailable(error) is outage
