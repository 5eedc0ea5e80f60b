"""Derived event ids: deterministic, and exactly what ``uuid.uuid5`` gives for the same name."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from schemas.events import derived_event_id


@given(st.text(), st.text(min_size=1), st.text())
def test_derived_id_is_uuid5_of_the_processor_cause_and_suffix(
    cause: str, processor: str, suffix: str
) -> None:
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"gridledger:{processor}:{cause}:{suffix}")
    assert derived_event_id(cause, processor, suffix) == str(expected)


def test_the_same_cause_gives_the_same_id_and_another_processor_another() -> None:
    cause = "6f1c0a3e-0000-4000-8000-000000000001"
    assert derived_event_id(cause, "classifier") == derived_event_id(cause, "classifier")
    assert derived_event_id(cause, "classifier") != derived_event_id(cause, "retry")
    assert derived_event_id(cause, "scheduler", "1") != derived_event_id(cause, "scheduler", "2")
