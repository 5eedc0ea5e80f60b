"""The simulator's facts are valid: agent order, gapless seqs, ticks summing to held time,
and the real classifier and accounting read them as the intended outcome."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from projections.accounting import account
from projections.decisions import settle
from projections.job_state import project
from schemas.events import AttemptHeartbeat, AttemptScheduled, JobSubmitted, LogChunk, MeterTick
from services.simulator.facts import AttemptFacts, Outcome
from services.simulator.histories import job_history
from services.simulator.mix import JobMix

END = datetime(2026, 1, 1, 12, tzinfo=UTC)
EXPECTED = {
    Outcome.SUCCESS: ("succeeded", None),
    Outcome.USER_ERROR: ("failed", "missing_module"),
    Outcome.OOM: ("failed", "gpu_out_of_memory"),
}


@pytest.mark.parametrize("outcome", list(EXPECTED))
def test_history_is_classified_and_accounted(outcome: Outcome) -> None:
    mix = JobMix.parse(f"{outcome.value}=1", duration="3.3-3.3")
    history = job_history("job-1", END, mix, tick_s=1.0)
    job_events = settle([e for e in history if e.TOPIC == "job-events"])
    view = project(job_events)
    status, failure_class = EXPECTED[outcome]
    assert view is not None and view.status == status
    assert (view.failure.failure_class if view.failure else None) == failure_class
    assert not view.anomalies
    ticks = [e for e in history if isinstance(e, MeterTick)]
    record = account(job_events, ticks)
    assert record.final and record.reconciled
    assert record.metered_gpu_seconds == pytest.approx(record.held_seconds)
    assert [t.tick_index for t in ticks] == list(range(len(ticks)))
    assert ticks[-1].final and not any(t.final for t in ticks[:-1])


def test_sequences_have_no_gaps_and_follow_the_agent_order() -> None:
    history = job_history("job-2", END, JobMix.parse("user_error=1", duration="4-4"))
    beats = [e.seq for e in history if isinstance(e, AttemptHeartbeat)]
    assert beats == list(range(len(beats)))
    for stream in ("stdout", "stderr"):
        chunks = [e for e in history if isinstance(e, LogChunk) and e.stream == stream]
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        line = 1
        for c in chunks:
            assert c.first_line == line
            line += c.line_count
    lifecycle = [e.type for e in history if e.TOPIC == "job-events"]
    assert lifecycle[:7] == [
        "JobSubmitted",
        "JobQueued",
        "AttemptScheduled",
        "AttemptAccepted",
        "ComputeHeld",
        "ImageResolved",
        "ContainerStarted",
    ]
    assert lifecycle[-2:] == ["ProcessExited", "ComputeReleased"]
    # Re-building the same attempt yields the same ids (idempotent re-emission).
    scheduled = next(e for e in history if isinstance(e, AttemptScheduled))
    spec = next(e for e in history if isinstance(e, JobSubmitted)).spec
    again = AttemptFacts(scheduled.for_node(spec), scheduled.node_id).start(END)
    assert [e.event_id for e in again] == [e.event_id for e in history[3:7]]


def test_mix_parsing() -> None:
    mix = JobMix.parse("success=1,node_lost=1", duration="2-5", gpus="1,2")
    assert {o for o, _ in mix.weights} == {Outcome.SUCCESS, Outcome.NODE_LOST}
    assert 2 <= mix.duration_s("j", 1) <= 5
    assert mix.outcome("j", 2) == Outcome.SUCCESS  # retries succeed
    assert [mix.gpu_count(i) for i in range(3)] == [1, 2, 1]
    with pytest.raises(ValueError, match="bad mix entry"):
        JobMix.parse("explode=1")


async def test_a_node_lost_attempt_past_its_whole_duration_silences_the_node() -> None:
    # An overloaded simulator may wake up after the whole duration, before the halfway
    # check: the node must still go silent, not exit 1 (classified user_process_error).
    from schemas.spec import JobSpec
    from services.simulator.fleet import SimFleet

    mix = JobMix.parse("node_lost=1", duration="0-0")
    fleet = SimFleet(None, 1, mix, heartbeat_interval_s=0.01)  # type: ignore[arg-type]
    node = next(iter(fleet.nodes.values()))
    emitted: list[object] = []  # facts go here; no ledger is needed

    async def emit(events: list[object]) -> None:
        emitted.extend(events)

    fleet.emit = emit  # type: ignore[method-assign, assignment]
    scheduled = AttemptScheduled(
        job_id="job-3",
        attempt=1,
        occurred_at=END,
        node_id=node.node_id,
        gpu_count=1,
        dispatch_deadline=END,
        spec=JobSpec(image="x"),
    )
    await fleet._run(node, scheduled)
    assert node.lost and fleet.stats.lost_nodes == 1
    assert fleet.stats.finished == {Outcome.NODE_LOST: 1}
    assert [type(e).__name__ for e in emitted] == [
        "AttemptAccepted",
        "ComputeHeld",
        "ImageResolved",
        "ContainerStarted",
    ]
