"""A node dies mid-run; another node, sharing no folder with it, resumes from its last checkpoint.

Two agents with separate homes (as on two hosts): the first runs as its own
process and is SIGKILLed with its container after its second checkpoint; the
retry on the second agent gets its checkpoint the way the retry decider picks
it (``latest_checkpoint`` of the folded history) and downloads it from the
object store. Nothing but the store connects the two homes.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from projections.job_state import project
from projections.retry import latest_checkpoint
from schemas.events import CheckpointStored, ComputeReleased, JobSubmitted, OutputStored
from schemas.events import ProcessExited as Exited
from schemas.spec import JobSpec, OutputSpec, Resources
from services.ledger import Ledger
from services.objectstore import job_prefix
from services.settings import Settings
from tests.agent.conftest import (
    PYTHON,
    TENANT,
    Harness,
    make_agent_settings,
    only,
    remove_node_containers,
)
from tests.agent.test_agent_recovery import _agent_process
from tests.objectstore import PrivateStore

pytestmark = pytest.mark.integration

TRAIN = """
import os, pathlib, sys, time
out = pathlib.Path(os.environ["GRIDLEDGER_OUTPUT_DIR"])
resume = os.environ.get("GRIDLEDGER_RESUME_FROM")
if resume:
    step = int(pathlib.Path(resume).read_text())
    print(f"resumed from {resume} at step {step}", flush=True)
    (out / "model.pt").write_text(f"trained from step {step}")
    sys.exit(0)
(out / "ckpt").mkdir(parents=True, exist_ok=True)
for step in (1, 2):
    (out / "ckpt" / f"step_{step}.pt").write_text(str(step))
    print(f"step {step} checkpointed", flush=True)
    time.sleep(1)
time.sleep(600)  # the node dies here
"""


@pytest_asyncio.fixture
async def hosts(
    topics: Settings, tmp_path: Path, object_store: PrivateStore
) -> AsyncIterator[tuple[Harness, Harness]]:
    pair = []
    for name in ("host-a", "host-b"):
        home = tmp_path / name
        home.mkdir()
        settings = object_store.service_settings(topics, home=home)
        pair.append(Harness(settings, make_agent_settings(home), Ledger(settings, name)))
    for harness in pair:
        await harness.ledger.start()
    try:
        yield pair[0], pair[1]
    finally:
        for harness in pair:
            try:
                await harness.stop()
            finally:
                await harness.ledger.stop()
                remove_node_containers(harness.node_id)


async def test_a_retry_on_another_host_resumes_from_the_last_checkpoint_in_the_store(
    hosts: tuple[Harness, Harness], object_store: PrivateStore
):
    a, b = hosts
    spec = JobSpec(
        image=PYTHON,
        command=["python3", "-c", TRAIN],
        resources=Resources(gpus=1, memory_gb=0.25),
        checkpoints="ckpt",
        outputs=[OutputSpec(path="model.pt")],
    )
    process = _agent_process(a)
    try:
        first = await a.schedule(spec)
        deadline = asyncio.get_running_loop().time() + 90
        while True:
            facts = await a.facts(first.job_id)
            if {c.name for c in only(facts, CheckpointStored)} >= {"step_1.pt", "step_2.pt"}:
                break
            assert asyncio.get_running_loop().time() < deadline, [e.type for e in facts]
            await asyncio.sleep(0.3)
        # Host A disappears: its agent and its container die, and its disk with them.
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    remove_node_containers(a.node_id)
    shutil.rmtree(a.settings.home)

    submitted = JobSubmitted(
        job_id=first.job_id,
        occurred_at=first.occurred_at - timedelta(seconds=1),
        producer="test/api",
        tenant=TENANT,
        spec=spec,
    )
    resume = latest_checkpoint(project([submitted, first, *facts]))
    assert resume is not None and resume.name == "step_2.pt" and resume.attempt == 1
    assert resume.uri.startswith(f"s3://gridledger/{job_prefix(TENANT, first.job_id)}attempts/1/")

    await b.start()
    await b.schedule(
        spec,
        job_id=first.job_id,
        attempt=2,
        resume_from=resume,
    )
    events = await b.wait_for(first.job_id, "ComputeReleased", 90)
    second = [e for e in events if e.attempt == 2]
    exited = only(second, Exited)[0]
    assert exited.exit_code == 0
    assert "resumed from /gridledger/resume/step_2.pt at step 2" in exited.last_log_lines
    stored = only(second, OutputStored)[0]
    assert object_store.read(stored.uri) == b"trained from step 2"
    assert "/attempts/2/" in stored.uri
    assert only(second, ComputeReleased)[0].reason == "exited"
    # Attempt 1 never released: its node died (the watchdog declares it lost).
    assert not [e for e in events if e.attempt == 1 and isinstance(e, ComputeReleased)]
