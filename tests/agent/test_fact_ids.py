"""The fleet simulator gives an attempt's facts exactly the ids the real agent gives them.

A real agent runs a job on the Docker daemon; the simulator then builds the same attempt
(same placement, same node) and every fact both produce must carry the same id, cause and
producer, so simulated load exercises the dedup paths the real fleet does.
"""

from __future__ import annotations

import pytest

from schemas.events import (
    AttemptHeartbeat,
    ComputeHeld,
    ComputeReleased,
    Event,
    LogChunk,
    MeterTick,
)
from schemas.spec import OutputSpec
from services.simulator.facts import AttemptFacts, Outcome
from tests.agent.conftest import Harness, only, sh
from tests.objectstore import PrivateStore

pytestmark = pytest.mark.integration


def envelope(e: Event) -> tuple[str, str, str, int, str, str | None]:
    return (e.type, e.event_id, e.job_id, e.attempt, e.producer, e.causation_id)


async def test_the_simulator_and_the_agent_give_the_same_fact_the_same_id(
    node: Harness, object_store: PrivateStore
) -> None:
    spec = sh(
        'echo hello; echo weights > "$GRIDLEDGER_OUTPUT_DIR/model.pt"; sleep 2.5',
        outputs=[OutputSpec(path="model.pt")],
    )
    scheduled = await node.schedule(spec)
    job = scheduled.job_id
    events = await node.wait_for(job, "ComputeReleased")
    beats = only(await node.facts(job, "heartbeats"), AttemptHeartbeat)
    ticks = only(await node.facts(job, "meter-ticks"), MeterTick)
    chunks = only(await node.facts(job, "log-chunks"), LogChunk)
    assert len(beats) >= 2 and len(ticks) >= 2 and chunks

    # The simulator, handed the same placement, builds the same attempt.
    sim = AttemptFacts(scheduled, node.node_id, tick_s=node.agent_settings.meter_interval_s)
    held = only(events, ComputeHeld)[0]
    released = only(events, ComputeReleased)[0]
    simulated = sim.start(held.occurred_at)
    simulated += [sim.heartbeat(b.occurred_at) for b in beats]
    simulated.append(sim.log(chunks[0].occurred_at, ["hello"]))
    simulated += sim.finish(released.occurred_at, Outcome.SUCCESS)

    real = {(e.type, getattr(e, "seq", None), getattr(e, "tick_index", None)): e for e in events}
    real |= {(e.type, e.seq, None): e for e in [*beats, chunks[0]]}
    real |= {(e.type, None, e.tick_index): e for e in ticks}
    for fact in simulated:
        key = (fact.type, getattr(fact, "seq", None), getattr(fact, "tick_index", None))
        assert key in real, f"the agent made no {key}"
        assert envelope(fact) == envelope(real[key]), key
    # ... and the agent made no fact of the attempt's lifecycle the simulator did not.
    lifecycle = {e.type for e in events}
    assert lifecycle == {f.type for f in simulated if f.TOPIC == "job-events"}
    # Every lifecycle fact, every heartbeat, the first log chunk and every meter tick
    # (the same held time in the same intervals) was compared.
    assert len(simulated) == len(lifecycle) + len(beats) + 1 + len(ticks)
