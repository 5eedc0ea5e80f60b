"""The error hierarchy: one root, a few families.

Messages say what was wrong and what to do, in the user's terms.
"""

from __future__ import annotations


class GridledgerError(Exception):
    """Root of every error gridledger raises on purpose."""


class SpecError(GridledgerError):
    """A job spec is invalid. Carries one entry per offending field."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in problems))


class EventDecodeError(GridledgerError):
    """Bytes on a topic could not be turned back into an event."""


class EventEncodeError(GridledgerError):
    """An event could not be encoded (a bug in the producer, never user input)."""


class SchemaRegistryError(GridledgerError):
    """The stored Avro schemas and the pydantic models disagree."""


class LedgerError(GridledgerError):
    """Kafka could not be reached or refused a write."""


class StackError(GridledgerError):
    """A component of the local stack could not be started or reached."""
