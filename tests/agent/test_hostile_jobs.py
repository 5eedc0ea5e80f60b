"""Hostile jobs on the real Docker daemon, broker and object store: what a job writes into its
output folder (links to the host, to the agent's home and to another job, a checkpoint
folder replaced by a link, a FIFO, /dev/zero, a sparse petabyte, files over the caps, a
declared '.') is refused with a user-side class naming the path and the rule, billed; nothing
of the host is stored; a fork bomb stops at the pids limit; the agent runs the next job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from projections.accounting import account
from projections.decisions import settle
from projections.job_state import project
from schemas.events import (
    AttemptScheduled,
    CheckpointStored,
    Event,
    FailureClassified,
    JobSubmitted,
    MeterTick,
    OutputFailed,
    OutputStored,
    ProcessExited,
)
from schemas.spec import JobSpec, OutputSpec, Resources
from schemas.views import AccountingRecord, JobView
from services import s3client
from services.objectstore import job_prefix
from tests.agent.conftest import PYTHON, TENANT, Harness, make_agent_settings, only, sh
from tests.hostile import FORK_BOMB
from tests.objectstore import PrivateStore

pytestmark = pytest.mark.integration

KIB = 1024
HOST_SECRET = "the node's own secret\n"


@pytest_asyncio.fixture
async def hostile_node(idle_node: Harness, tmp_path: Path) -> AsyncIterator[Harness]:
    """An agent with small caps and a small pids limit, so each attack stays cheap."""
    idle_node.agent_settings = make_agent_settings(
        tmp_path,
        node_id=idle_node.node_id,
        max_output_file_bytes=64 * KIB,
        max_output_job_bytes=128 * KIB,
        pids_limit=64,
        max_checkpoint_files=3,
    )
    (tmp_path / "host-secret.txt").write_text(HOST_SECRET)
    await idle_node.start()
    yield idle_node


async def settled(node: Harness, scheduled: AttemptScheduled, facts: list[Event]):
    """What the processors make of the agent's facts: the job's view, its accounting record
    and its classification (None for a clean success)."""
    submitted = JobSubmitted(
        job_id=scheduled.job_id,
        occurred_at=scheduled.occurred_at - timedelta(seconds=1),
        producer="test/api",
        tenant=TENANT,
        spec=scheduled.spec,
    )
    history = settle([submitted, scheduled, *facts])
    ticks = only(await node.facts(scheduled.job_id, "meter-ticks"), MeterTick)
    view: JobView = project(history)
    record: AccountingRecord = account(history, ticks)
    classified = only(history, FailureClassified)
    return view, record, classified[0] if classified else None


def stored_keys(store: PrivateStore, job_id: str) -> list[str]:
    """Every object under the job's prefix, read with the store's admin credential."""
    admin = store.credentials.admin
    assert admin is not None
    client = s3client.make_client(store.settings, admin)
    prefix = job_prefix(TENANT, job_id)
    listed = client.list_objects_v2(Bucket=store.settings.s3_bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix) :] for o in listed.get("Contents", []))


def billed(record: AccountingRecord) -> None:
    assert record.gpu_seconds > 0
    assert record.billable_gpu_seconds == record.gpu_seconds
    assert record.credited_gpu_seconds == 0


async def test_every_hostile_file_is_refused_named_and_billed_and_nothing_of_the_host_is_stored(
    hostile_node: Harness, object_store: PrivateStore
):
    node = hostile_node
    # A victim job of the same node, running: its folder is next to the attacker's.
    victim = await node.schedule(
        sh('echo "victim weights" > "$GRIDLEDGER_OUTPUT_DIR/secret.pt"; sleep 120'),
        gpu_count=0,
    )
    await node.wait_for(victim.job_id, "ContainerStarted")
    victim_dir = f"{victim.job_id}.{victim.attempt}"
    # Links are resolved by the agent on the host, where the victim's folder is ../../{victim_dir}
    # and the agent's home ../../../.. of the attacker's output folder.
    script = f"""
        cd "$GRIDLEDGER_OUTPUT_DIR" || exit 3
        echo weights > model.pt
        ln -s /etc/passwd passwd
        ln -s ../../../.. home
        ln -s ../../{victim_dir}/output/secret.pt victim.pt
        ln -s /dev/zero zero
        mkfifo fifo
        for n in {1024**5} {15 * 1024**4} {1024**4}; do
            truncate -s $n sparse 2>/dev/null && break
        done
        dd if=/dev/zero of=big bs=1024 count=100 2>/dev/null
        for n in 1 2 3; do dd if=/dev/zero of=part$n bs=1024 count=50 2>/dev/null; done
        rm -rf ckpt && ln -s /etc ckpt
        sleep 1
        echo hostile done
    """
    optional = [
        "passwd",
        "home/host-secret.txt",
        "victim.pt",
        "zero",
        "fifo",
        "sparse",
        "big",
        "part1",
        "part2",
        "part3",
        ".",
    ]
    spec = sh(
        script,
        checkpoints="ckpt",
        outputs=[OutputSpec(path="model.pt")]
        + [OutputSpec(path=p, required=False) for p in optional],
    )
    scheduled = await node.schedule(spec)
    facts = await node.wait_for(scheduled.job_id, "ComputeReleased", timeout=120)
    assert only(facts, ProcessExited)[0].exit_code == 0
    reasons = {e.path: e.reason for e in only(facts, OutputFailed)}
    assert reasons == {
        "passwd": "refused_link",
        "home/host-secret.txt": "refused_link",
        "victim.pt": "refused_link",
        "zero": "refused_link",
        "fifo": "refused_special_file",
        "sparse": "over_file_cap",
        "big": "over_file_cap",
        "part3": "over_job_cap",
        ".": "refused_folder",
        "ckpt": "refused_link",
    }
    assert [e.path for e in only(facts, OutputStored)] == ["model.pt", "part1", "part2"]
    # Nothing of the host, the agent's home or the victim is in the store: only the job's files.
    assert stored_keys(object_store, scheduled.job_id) == [
        "attempts/1/model.pt",
        "attempts/1/part1",
        "attempts/1/part2",
    ]
    view, record, c = await settled(node, scheduled, facts)
    assert c is not None
    assert (c.failure_class, c.attribution) == ("optional_output_refused", "user")
    for path, reason in reasons.items():
        assert f"'{path}' ({reason})" in c.summary
    assert "never followed" in c.summary and "per-file cap" in c.summary
    assert view.status == "succeeded_with_errors"
    billed(record)

    # The agent is alive and runs the next job; the victim was untouched.
    await node.cancel(victim)
    await node.wait_for(victim.job_id, "ComputeReleased")
    after = await node.run(
        sh('echo fine > "$GRIDLEDGER_OUTPUT_DIR/model.pt"', outputs=[OutputSpec(path="model.pt")]),
        gpu_count=0,
    )
    (stored,) = only(after, OutputStored)
    assert object_store.read(stored.uri) == b"fine\n"


async def test_a_required_output_linked_to_the_host_fails_the_job_as_the_users(
    hostile_node: Harness, object_store: PrivateStore
):
    spec = sh(
        'ln -s /etc/passwd "$GRIDLEDGER_OUTPUT_DIR/model.pt"',
        outputs=[OutputSpec(path="model.pt")],
    )
    scheduled = await hostile_node.schedule(spec)
    facts = await hostile_node.wait_for(scheduled.job_id, "ComputeReleased")
    view, record, c = await settled(hostile_node, scheduled, facts)
    assert c is not None
    assert (c.failure_class, c.attribution, c.retryable) == ("output_refused", "user", False)
    assert "'model.pt' (refused_link)" in c.summary and "regular files" in c.advice
    assert view.status == "failed"
    billed(record)
    assert stored_keys(object_store, scheduled.job_id) == []


async def test_checkpoints_past_the_attempts_count_are_refused_once_and_billed(
    hostile_node: Harness, object_store: PrivateStore
):
    """A job that writes checkpoint after checkpoint cannot flood the ledger (an event each)
    nor grow its view past the record limit, which would end it record_refused on the
    platform's side, credited: past max_checkpoint_files the folder is refused, once."""
    spec = sh(
        'cd "$GRIDLEDGER_OUTPUT_DIR" && mkdir -p ckpt && '
        "for n in 1 2 3 4 5 6 7 8; do echo $n > ckpt/step_$n.pt; done",
        checkpoints="ckpt",
    )
    scheduled = await hostile_node.schedule(spec)
    facts = await hostile_node.wait_for(scheduled.job_id, "ComputeReleased")
    (refused,) = only(facts, OutputFailed)
    assert (refused.path, refused.reason) == ("ckpt", "over_checkpoint_count")
    assert "max_checkpoint_files" in refused.message
    assert len(only(facts, CheckpointStored)) == 3
    assert len(stored_keys(object_store, scheduled.job_id)) == 3
    view, record, c = await settled(hostile_node, scheduled, facts)
    assert c is not None
    assert (c.failure_class, c.attribution) == ("optional_output_refused", "user")
    assert "'ckpt' (over_checkpoint_count)" in c.summary
    assert view.status == "succeeded_with_errors"
    billed(record)


async def test_a_fork_bomb_stops_at_the_pids_limit_and_the_agent_carries_on(
    hostile_node: Harness,
):
    spec = JobSpec(
        image=PYTHON,
        command=["python3", "-c", FORK_BOMB],
        resources=Resources(gpus=1, memory_gb=0.5, cpus=0.5),
    )
    scheduled = await hostile_node.schedule(spec)
    facts = await hostile_node.wait_for(scheduled.job_id, "ComputeReleased", timeout=120)
    exited = only(facts, ProcessExited)[0]
    assert exited.exit_code == 0, exited.last_log_lines
    (line,) = [x for x in exited.last_log_lines if x.startswith("forked ")]
    assert "Resource temporarily unavailable" in line
    assert 8 <= int(line.split()[1].rstrip(":")) < 64  # it forked, and it stopped at the limit
    view, record, c = await settled(hostile_node, scheduled, facts)
    assert c is None and view.status == "succeeded"  # the job's own choice: exit 0
    billed(record)
    after = await hostile_node.run(sh("echo still here"), gpu_count=0)
    assert only(after, ProcessExited)[0].exit_code == 0
