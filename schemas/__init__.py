"""gridledger schemas: the job spec, the events, the views, their Avro schemas and the codec.

Imports only the standard library, pydantic and fastavro.
"""

from schemas.errors import (
    EventDecodeError,
    EventEncodeError,
    GridledgerError,
    LedgerError,
    SchemaRegistryError,
    SpecError,
    StackError,
)
from schemas.events import EVENT_TYPES, TERMINAL_EVENTS, Event, NodeEvent, derived_event_id
from schemas.spec import JobSpec
from schemas.views import AccountingRecord, JobView

__all__ = [
    "EVENT_TYPES",
    "TERMINAL_EVENTS",
    "AccountingRecord",
    "Event",
    "EventDecodeError",
    "EventEncodeError",
    "GridledgerError",
    "JobSpec",
    "JobView",
    "LedgerError",
    "NodeEvent",
    "SchemaRegistryError",
    "SpecError",
    "StackError",
    "derived_event_id",
]
