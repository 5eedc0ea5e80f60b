"""The object store dies while a job runs: the job ends succeeded_with_errors, honestly.

Nothing in the agent is told to fail: the test SIGKILLs its private SeaweedFS
between the job's checkpoint (stored) and its exit (the output cannot be).
The agent's real facts are then folded by the same pure functions the
processors run, to check what the user sees: the status, a message naming the
store's error, and a meter that stopped at the release.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio

from projections.accounting import account
from projections.decisions import settle
from projections.job_state import project
from schemas.events import (
    AttemptScheduled,
    CheckpointStored,
    ComputeReleased,
    Event,
    JobSubmitted,
    MeterTick,
    OutputFailed,
)
from schemas.spec import OutputSpec
from services.settings import Settings
from tests.agent.conftest import (
    Harness,
    only,
    sh,
    types,
)
from tests.objectstore import PrivateStore, started_store

pytestmark = pytest.mark.integration

# Writes a checkpoint, waits for the test's go-ahead (a file the test drops into the
# output folder), then writes its output and exits 0.
WAIT_THEN_WRITE = (
    'mkdir -p "$GRIDLEDGER_OUTPUT_DIR/ckpt"; echo 1 > "$GRIDLEDGER_OUTPUT_DIR/ckpt/step_1.pt"; '
    'while [ ! -e "$GRIDLEDGER_OUTPUT_DIR/go" ]; do sleep 0.2; done; '
    'echo weights > "$GRIDLEDGER_OUTPUT_DIR/model.pt"; echo trained'
)


@pytest_asyncio.fixture
async def store(settings: Settings) -> AsyncIterator[PrivateStore]:
    own = await started_store(settings)
    try:
        yield own
    finally:
        await asyncio.to_thread(own.stop)


@pytest.fixture
def object_store(store: PrivateStore) -> PrivateStore:
    """This module's agents write to the store it kills, not the session's shared one;
    the ``node`` fixture of tests/agent/conftest.py then runs on it."""
    return store


def _as_processed(scheduled: AttemptScheduled, facts: list[Event]) -> list[Event]:
    """The job's whole history as the processors would write it around the agent's facts."""
    submitted = JobSubmitted(
        job_id=scheduled.job_id,
        occurred_at=scheduled.occurred_at - timedelta(seconds=1),
        producer="test/api",
        tenant=scheduled.tenant,
        spec=scheduled.spec,
    )
    return settle([submitted, scheduled, *facts])


async def test_a_store_that_dies_before_the_outputs_gives_succeeded_with_errors(
    node: Harness, store: PrivateStore
):
    spec = sh(WAIT_THEN_WRITE, checkpoints="ckpt", outputs=[OutputSpec(path="model.pt")])
    scheduled = await node.schedule(spec, gpu_count=1)
    await node.wait_for(scheduled.job_id, "CheckpointStored")

    store.kill()
    output = node.settings.home / "work" / node.node_id / f"{scheduled.job_id}.1" / "output"
    (output / "go").write_text("")

    facts = await node.wait_for(scheduled.job_id, "ComputeReleased", timeout=120)
    assert only(facts, CheckpointStored)[0].name == "step_1.pt"
    failed = only(facts, OutputFailed)[0]
    assert (failed.path, failed.reason, failed.required) == ("model.pt", "store_failed", True)
    # The message names the store's own error: nothing answers at its address any more.
    assert "Could not connect to the endpoint URL" in failed.message
    assert f"127.0.0.1:{node.settings.s3_port}" in failed.message
    assert types(facts)[-1] == "ComputeReleased"

    history = _as_processed(scheduled, facts)
    view = project(history)
    assert view.status == "succeeded_with_errors"
    assert view.failure is not None
    assert (view.failure.failure_class, view.failure.attribution) == (
        "output_upload_failed",
        "platform",
    )
    assert "model.pt" in view.failure.summary
    assert "Could not connect to the endpoint URL" in view.failure.summary

    # The meter stopped at the release: one final tick, ending at ComputeReleased.
    released = only(facts, ComputeReleased)[0]
    ticks = only(await node.facts(scheduled.job_id, "meter-ticks"), MeterTick)
    assert [t.final for t in ticks].count(True) == 1 and ticks[-1].final
    last = ticks[-1]
    end = last.interval_start + timedelta(seconds=last.interval_s)
    assert abs((end - released.occurred_at).total_seconds()) < 1e-3
    record = account(history, ticks)
    assert record.final
    assert record.billable_gpu_seconds == 0
    assert record.credited_gpu_seconds == pytest.approx(record.gpu_seconds)
    assert record.credited_gpu_seconds > 0
