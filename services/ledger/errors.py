"""Which Kafka errors are an outage (wait it out) and which are a bug or bad configuration.

Every long-running service retries what the broker did not take, with the shared
backoff (:mod:`services.backoff`), for as long as the broker is away. That is only
right while waiting can help. A record larger than the topic takes, a producer the
broker does not authorise, a setting the broker refuses: retrying those waits
forever, with a log line that blames an outage. :data:`FATAL` lists them, each with
what it means and the fix, and :func:`append_failed` turns the client's error into
the one the ledger raises: :class:`LedgerRefusedError` (not retried: the service
stops with the cause and the fix) or :class:`BrokerUnavailableError` (retried).

Any other Kafka error counts as an outage: the connection, leadership, replica and
metadata errors a broker restart or a leader election produces (``KafkaConnectionError``,
``NotLeaderForPartitionError``, ``NotEnoughReplicasError``, ``UnknownTopicOrPartitionError``
while a restarted broker loads its logs, ``OutOfOrderSequenceNumber`` of an idempotent
session the restart reset, timeouts). A service that rides out an unknown error says
so in its outage line; one that exits on a transient one loses work.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import errors as kafka

from schemas.errors import LedgerError


class BrokerUnavailableError(LedgerError):
    """The broker could not be reached or did not acknowledge: worth retrying later.

    Its siblings (a missing topic, a record too large, a ledger not started, any
    :class:`LedgerRefusedError`) are bugs or bad configuration and are not retried.
    """


class LedgerRefusedError(LedgerError):
    """The broker (or the client) refused the append for a reason waiting cannot fix."""

    def __init__(self, message: str, refusal: Refusal) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class Refusal:
    """One kind of Kafka error that is never retried: what it means and what to change."""

    errors: tuple[type[kafka.KafkaError], ...]
    cause: str
    fix: str


FATAL: tuple[Refusal, ...] = (
    Refusal(
        (kafka.MessageSizeTooLargeError, kafka.RecordListTooLargeError),
        "the record is larger than the topic accepts (the topic's max.message.bytes, "
        "or the broker's message.max.bytes)",
        "raise max.message.bytes on the topic (kafka-configs.sh --alter --entity-type "
        "topics --entity-name TOPIC --add-config max.message.bytes=N) or keep the event "
        "smaller; gridledger's own events stay far below 1 MiB (log chunks are cut at "
        "64 KiB), so a larger one is a bug to report",
    ),
    Refusal(
        (kafka.RecordTooLargeError,),
        "the record is larger than this producer's max_request_size "
        "(GRIDLEDGER_KAFKA_MAX_MESSAGE_BYTES, 1 MiB by default)",
        "keep the event smaller: gridledger's own events stay far below 1 MiB, so a "
        "larger one is a bug to report",
    ),
    Refusal(
        (
            kafka.TopicAuthorizationFailedError,
            kafka.ClusterAuthorizationFailedError,
            kafka.GroupAuthorizationFailedError,
            kafka.TransactionalIdAuthorizationFailed,
            kafka.DelegationTokenAuthorizationFailed,
        ),
        "the broker does not authorise this client (a Kafka ACL)",
        "grant the service's principal Describe, Read and Write on the gridledger.* "
        "topics, Read on its consumer groups and IdempotentWrite on the cluster",
    ),
    Refusal(
        (
            kafka.AuthenticationFailedError,
            kafka.AuthenticationMethodNotSupported,
            kafka.SaslAuthenticationFailed,
            kafka.UnsupportedSaslMechanismError,
            kafka.IllegalSaslStateError,
        ),
        "the broker did not accept this client's credentials or mechanism",
        "check GRIDLEDGER_KAFKA_BOOTSTRAP points at the intended listener and that "
        "the listener's security protocol matches the client's",
    ),
    Refusal(
        (
            kafka.InvalidConfigurationError,
            kafka.KafkaConfigurationError,
            kafka.InvalidRequiredAcksError,
            kafka.InvalidReplicationFactorError,
            kafka.PolicyViolationError,
            kafka.InvalidTopicError,
        ),
        "the broker refused a setting or a topic name of this client",
        "fix the setting the error names (`gridledger dev up` creates the topics with "
        "the settings the services need; GRIDLEDGER_TOPIC_PREFIX must be a valid "
        "topic name prefix)",
    ),
    Refusal(
        (
            kafka.UnsupportedVersionError,
            kafka.IncompatibleBrokerVersion,
            kafka.UnsupportedForMessageFormatError,
            kafka.UnsupportedCodecError,
        ),
        "the broker does not support a request or record format this client uses",
        "run a Kafka broker of version 3.x or later (the local stack's is 3.9)",
    ),
    Refusal(
        (kafka.InvalidTimestampError,),
        "the record's timestamp is outside the topic's message.timestamp.*.max.ms "
        "window: the producing host's clock is far off",
        "synchronise the host's clock (NTP), or widen the topic's "
        "message.timestamp.before.max.ms / after.max.ms",
    ),
)
"""The Kafka errors that are never retried. Every other Kafka error is an outage."""


def refusal_of(exc: BaseException) -> Refusal | None:
    """The :data:`FATAL` row ``exc`` matches, or None when waiting may help."""
    if isinstance(exc, LedgerRefusedError):
        return exc.refusal
    for row in FATAL:
        if isinstance(exc, row.errors):
            return row
    return None


def broker_unavailable(exc: BaseException) -> bool:
    """True for an error that means "the broker is not reachable now" (retry it).

    Not a bare OSError: the ledger wraps the client's socket errors, and an OSError
    that reaches a caller unwrapped may be Postgres's (the API tells the two apart).
    A Kafka error of a :data:`FATAL` row is not an outage.
    """
    if isinstance(exc, BrokerUnavailableError):
        return True
    if isinstance(exc, kafka.CommitFailedError):
        return False  # the group rebalanced (the broker answered): the batch is read again
    return isinstance(exc, kafka.KafkaError) and refusal_of(exc) is None


def append_failed(exc: BaseException, what: str) -> LedgerError:
    """The error the ledger raises for a failed send: ``what`` went wrong, and why.

    ``what`` is the operation in the user's terms ("append to gridledger.job-events").
    A :data:`FATAL` error becomes a :class:`LedgerRefusedError` that names the cause
    and the fix; anything else a :class:`BrokerUnavailableError`, which callers retry.
    """
    detail = f"{type(exc).__name__}: {exc}"
    row = refusal_of(exc)
    if row is None:
        return BrokerUnavailableError(f"{what} failed: the broker did not acknowledge ({detail})")
    return LedgerRefusedError(
        f"{what} was refused, and waiting will not help: {row.cause} ({detail}). Fix: {row.fix}",
        row,
    )


def record_too_large(what: str, size: int, limit: int) -> LedgerError:
    """The error :func:`append_failed` gives for a record of ``size`` bytes over ``limit``
    (what the Kafka producer raises; the in-memory ledger raises the same)."""
    return append_failed(
        kafka.MessageSizeTooLargeError(f"the record is {size:,} bytes; the limit is {limit:,}"),
        what,
    )
