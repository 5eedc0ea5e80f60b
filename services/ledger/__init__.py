"""The ledger client: append events to Kafka, read a job's history, subscribe, dead-letter."""

from services.ledger.client import Appended, Ledger, LedgerRecord, partition_for
from services.ledger.errors import BrokerUnavailableError, LedgerRefusedError, broker_unavailable

__all__ = [
    "Appended",
    "BrokerUnavailableError",
    "Ledger",
    "LedgerRecord",
    "LedgerRefusedError",
    "broker_unavailable",
    "partition_for",
]
