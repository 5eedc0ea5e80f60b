"""Agent facts (services/agent/facts.py): the key of each within its attempt, and the one
builder the agent, the fleet simulator and the test node share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import (
    AttemptHeartbeat,
    AttemptScheduled,
    CheckpointStored,
    ComputeReleased,
    LogChunk,
    MeterTick,
    NodeHeartbeat,
    OutputFailed,
    OutputStored,
    derived_event_id,
)
from schemas.spec import JobSpec
from services.agent.facts import agent_fact, fact_key, node_fact

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
