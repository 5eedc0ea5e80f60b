"""The one way to derive an event from its cause (agent facts: tests/agent/test_facts.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import (
    AttemptLost,
    AttemptUnresponsive,
    ComputeReleased,
    JobSucceeded,
    derived_event_id,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RELEASED = ComputeReleased(
    event_id="rel-1",
    job_id="job-1",
    attempt=2,
    occurred_at=T0 + timedelta(seconds=30),
    producer="agent/node-a",
    node_id="node-a",
    reason="exited",
)


def test_a_derived_event_takes_its_envelope_from_the_cause() -> None:
    ok = JobSucceeded.derived(RELEASED, "retry-decider")
    assert ok.event_id == derived_event_id("rel-1", "retry-decider", "")
    assert (ok.job_id, ok.attempt, ok.occurred_at) == ("job-1", 2, RELEASED.occurred_at)
    assert (ok.producer, ok.causation_id) == ("retry-decider", "rel-1")
    assert (ok.type, ok.schema_version) == ("JobSucceeded", JobSucceeded.SCHEMA_VERSION)


def test_the_same_cause_derives_the_same_event_and_a_suffix_another() -> None:
    fields = {"node_id": "node-a", "silence_s": 30.0, "lost_deadline": T0}
    first = AttemptUnresponsive.derived(RELEASED, "watchdog", "unresponsive", **fields)
    again = AttemptUnresponsive.derived(RELEASED, "watchdog", "unresponsive", **fields)
    assert first == again
    other = AttemptUnresponsive.derived(RELEASED, "watchdog", "other", **fields)
    assert other.event_id != first.event_id and other.causation_id == first.causation_id


def test_fields_override_the_envelope_but_never_the_id_or_the_cause() -> None:
    now = T0 + timedelta(minutes=1)
    lost = AttemptLost.derived(
        RELEASED, "watchdog", "lost", occurred_at=now, producer="watchdog/host-b", attempt=3,
        node_id="node-a",
    )  # fmt: skip
    # The instance name goes into producer only: the id stays the one any instance derives.
    assert lost.event_id == derived_event_id("rel-1", "watchdog", "lost")
    assert (lost.occurred_at, lost.producer, lost.attempt) == (now, "watchdog/host-b", 3)
    for own in ("event_id", "causation_id"):
        with pytest.raises(TypeError, match=f"{own} follows from the cause"):
            JobSucceeded.derived(RELEASED, "retry-decider", **{own: "x"})
