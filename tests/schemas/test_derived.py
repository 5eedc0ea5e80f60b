"""The one way to derive an event from its cause, and the one agent fact builder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import (
    AttemptHeartbeat,
    AttemptLost,
    AttemptScheduled,
    AttemptUnresponsive,
    CheckpointStored,
    ComputeReleased,
    JobSucceeded,
    LogChunk,
    MeterTick,
    NodeHeartbeat,
    OutputFailed,
    OutputStored,
    agent_fact,
    derived_event_id,
    fact_key,
    node_fact,
)
from schemas.spec import JobSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEDULED = AttemptScheduled(
    event_id="sched-1",
    job_id="job-1",
    attempt=2,
    occurred_at=T0,
    producer="scheduler/host-a",
    node_id="node-a",
    gpu_count=1,
    dispatch_deadline=T0 + timedelta(minutes=5),
    spec=JobSpec(image="x"),
)
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


def test_fact_keys_are_the_ones_agent_journals_already_list() -> None:
    # A journal written by a running agent lists these keys; an agent restarted onto
    # it must find them unchanged, or it would emit a second fact instead of a duplicate.
    assert fact_key(ComputeReleased, {"reason": "exited"}) == "ComputeReleased"
    assert fact_key(AttemptHeartbeat, {"seq": 7}) == "AttemptHeartbeat:7"
    assert fact_key(MeterTick, {"tick_index": 0}) == "MeterTick:0"
    assert fact_key(LogChunk, {"stream": "stderr", "seq": 3}) == "LogChunk:stderr:3"
    # One outcome per output: stored and failed share the key.
    assert fact_key(OutputStored, {"path": "model.pt"}) == "Output:model.pt"
    assert fact_key(OutputFailed, {"path": "model.pt"}) == "Output:model.pt"
    checkpoint = fact_key(CheckpointStored, {"name": "step-10.pt"}, revision=1700000000)
    assert checkpoint == "CheckpointStored:step-10.pt:1700000000"


def test_a_fact_key_names_what_is_missing() -> None:
    with pytest.raises(TypeError, match="CheckpointStored fact needs a revision"):
        fact_key(CheckpointStored, {"name": "a"})
    with pytest.raises(TypeError, match="ComputeReleased fact takes no revision"):
        fact_key(ComputeReleased, {}, revision=1)
    with pytest.raises(TypeError, match="keyed by seq"):
        fact_key(AttemptHeartbeat, {})


def test_an_agent_fact_derives_from_the_placement_by_the_node() -> None:
    at = T0 + timedelta(seconds=5)
    beat = agent_fact(AttemptHeartbeat, SCHEDULED, "node-a", at, node_id="node-a", seq=4)
    assert beat.event_id == derived_event_id("sched-1", "agent/node-a", "AttemptHeartbeat:4")
    assert (beat.job_id, beat.attempt, beat.occurred_at) == ("job-1", 2, at)
    assert (beat.producer, beat.causation_id) == ("agent/node-a", "sched-1")
    # Another node reporting the same fact is another fact.
    other = agent_fact(AttemptHeartbeat, SCHEDULED, "node-b", at, node_id="node-b", seq=4)
    assert other.event_id != beat.event_id


def test_a_node_fact_is_the_node_agents_and_new() -> None:
    first = node_fact(NodeHeartbeat, "node-a", T0, seq=1)
    again = node_fact(NodeHeartbeat, "node-a", T0, seq=1)
    assert (first.node_id, first.key, first.producer, first.attempt) == (
        "node-a",
        "node-a",
        "agent/node-a",
        0,
    )
    assert first.causation_id is None and first.event_id != again.event_id
