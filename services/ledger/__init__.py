"""The ledger: append events to Kafka, read a job's history, subscribe, dead-letter.

:class:`LedgerPort` is what services take; :class:`Ledger` is the Kafka one their
composition roots build (see :mod:`services.ledger.port`). Only this package imports
the Kafka client; a service that consumes live subscribes
(:meth:`LedgerPort.subscribe`), and partitions are named with :class:`TopicPartition`
from here.
"""

from aiokafka import TopicPartition

from services.ledger.client import Ledger, partition_for
from services.ledger.errors import BrokerUnavailableError, LedgerRefusedError, broker_unavailable
from services.ledger.port import Appended, LedgerPort, LedgerRecord

__all__ = [
    "Appended",
    "BrokerUnavailableError",
    "Ledger",
    "LedgerPort",
    "LedgerRecord",
    "LedgerRefusedError",
    "TopicPartition",
    "broker_unavailable",
    "partition_for",
]
