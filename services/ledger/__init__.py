"""The ledger client: append events to Kafka, read a job's history, subscribe, dead-letter."""

from services.ledger.client import Appended, Ledger, LedgerRecord, partition_for

__all__ = ["Appended", "Ledger", "LedgerRecord", "partition_for"]
