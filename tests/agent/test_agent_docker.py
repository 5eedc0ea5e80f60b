"""The agent on the real Docker daemon and broker: the facts each kind of run produces."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from schemas.events import (
    AttemptHeartbeat,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStartFailed,
    ImageUnavailable,
    LogChunk,
    MeterTick,
    NodeRegistered,
    OutputFailed,
    OutputStored,
    ProcessExited,
)
from schemas.spec import JobSpec, Limits, OutputSpec, Resources
from schemas.types import CheckpointRef
from services.agent.artifacts import S3Store
from services.objectstore import Credential, CredentialsFile, job_prefix
from tests.agent.conftest import (
    BUSYBOX,
    PYTHON,
    TENANT,
    Harness,
    only,
    sh,
    stream_text,
    types,
)
from tests.objectstore import PrivateStore
from tests.waiting import eventually

pytestmark = pytest.mark.integration


async def test_a_job_that_prints_and_exits_0_reports_every_line_in_order(
    node: Harness, object_store: PrivateStore
):
    script = (
        'for i in $(seq 1 2000); do echo "line $i"; done; echo "to stderr" >&2; '
        'echo weights > "$GRIDLEDGER_OUTPUT_DIR/model.pt"; '
        'echo "$GRIDLEDGER_JOB_ID/$GRIDLEDGER_ATTEMPT"; sleep 1.5'
    )
    spec = sh(
        script,
        outputs=[OutputSpec(path="model.pt"), OutputSpec(path="metrics.json", required=False)],
    )
    scheduled = await node.schedule(spec)
    job = scheduled.job_id
    events = await node.wait_for(job, "ComputeReleased")
    assert types(events) == [
        "AttemptAccepted",
        "ComputeHeld",
        "ImageResolved",
        "ContainerStarted",
        "ProcessExited",
        "OutputStored",
        "OutputFailed",
        "ComputeReleased",
    ]
    assert all(e.causation_id == scheduled.event_id and e.attempt == 1 for e in events)
    exited = only(events, ProcessExited)[0]
    assert (exited.exit_code, exited.signal, exited.oom_killed) == (0, None, False)
    assert exited.memory_limit_bytes == 256 * 1024 * 1024
    assert f"{job}/1" in exited.last_log_lines  # stdout and stderr interleave by time
    stored = only(events, OutputStored)[0]
    assert stored.path == "model.pt" and object_store.read(stored.uri) == b"weights\n"
    assert stored.uri == f"s3://gridledger/{job_prefix(TENANT, job)}attempts/1/model.pt"
    assert stored.sha256 == hashlib.sha256(b"weights\n").hexdigest()
    missing = only(events, OutputFailed)[0]
    assert (missing.path, missing.reason, missing.required) == ("metrics.json", "missing", False)
    assert only(events, ComputeReleased)[0].reason == "exited"

    chunks = only(await node.facts(job, "log-chunks"), LogChunk)
    expected = "".join(f"line {i}\n" for i in range(1, 2001)) + f"{job}/1\n"
    assert stream_text(chunks, "stdout") == expected
    assert stream_text(chunks, "stderr") == "to stderr\n"
    assert not any(c.truncated for c in chunks)

    held = only(events, ComputeHeld)[0]
    released = only(events, ComputeReleased)[0]
    ticks = only(await node.facts(job, "meter-ticks"), MeterTick)
    assert [t.tick_index for t in ticks] == list(range(len(ticks)))
    assert [t.final for t in ticks].count(True) == 1 and ticks[-1].final
    held_s = (released.occurred_at - held.occurred_at).total_seconds()
    assert sum(t.gpu_seconds for t in ticks) == pytest.approx(held_s * 1, abs=1e-5)

    beats = only(await node.facts(job, "heartbeats"), AttemptHeartbeat)
    assert [b.seq for b in beats] == list(range(len(beats))) and len(beats) >= 2

    registered = only(await node.facts(node.node_id, "node-events"), NodeRegistered)[0]
    assert registered.inventory_source == "declared"
    assert (
        "NVMLError" in registered.inventory_note and "inventory.json" in registered.inventory_note
    )
    assert [g.index for g in registered.gpus] == [0, 1]


async def test_failures_produce_the_facts_docker_reports(node: Harness):
    """exit 1, a missing entrypoint (start fails), a missing command (sh exits 127), OOM."""
    jobs = {
        "exit1": sh("echo failing; exit 1"),
        "entrypoint": JobSpec(image=BUSYBOX, command=["/nonexistent"]),
        "command": sh("no-such-command"),
        "oom": sh(
            'x=a; while true; do x="$x$x"; done', resources=Resources(gpus=1, memory_gb=24 / 1024)
        ),
        "image": JobSpec(image="gridledger/does-not-exist:latest", command=["true"]),
        "module": JobSpec(image=PYTHON, command=["python3", "-c", "import torchvision_nope"]),
    }
    scheduled = {name: await node.schedule(spec, gpu_count=0) for name, spec in jobs.items()}
    results = {
        name: await node.wait_for(s.job_id, "ComputeReleased", 20) for name, s in scheduled.items()
    }

    exit1 = only(results["exit1"], ProcessExited)[0]
    assert (exit1.exit_code, exit1.oom_killed, exit1.last_log_lines) == (1, False, ["failing"])

    failed = only(results["entrypoint"], ContainerStartFailed)[0]
    assert failed.error_kind == "entrypoint_not_found"
    assert "/nonexistent" in failed.message and "no such file or directory" in failed.message
    assert "ProcessExited" not in types(results["entrypoint"])
    assert only(results["entrypoint"], ComputeReleased)[0].reason == "start_failed"

    command = only(results["command"], ProcessExited)[0]
    assert command.exit_code == 127 and command.signal is None
    assert any("not found" in line for line in command.last_log_lines)

    oom = only(results["oom"], ProcessExited)[0]
    assert (oom.exit_code, oom.signal, oom.oom_killed) == (137, 9, True)
    assert oom.memory_limit_bytes == 24 * 1024 * 1024

    image = only(results["image"], ImageUnavailable)[0]
    assert (image.reason, image.image) == ("not_found", "gridledger/does-not-exist:latest")
    assert types(results["image"]) == [
        "AttemptAccepted",
        "ComputeHeld",
        "ImageUnavailable",
        "ComputeReleased",
    ]
    assert only(results["image"], ComputeReleased)[0].reason == "image_unavailable"

    module = only(results["module"], ProcessExited)[0]
    assert module.exit_code == 1
    assert any("ModuleNotFoundError" in line for line in module.last_log_lines)


async def test_a_2mb_line_and_a_50mb_flood_neither_crash_nor_delay_heartbeats(node: Harness):
    script = (
        "head -c 2000000 /dev/zero | tr '\\0' a; echo; "
        "head -c 50000000 /dev/zero | tr '\\0' x | fold -w 999; echo done"
    )
    scheduled = await node.schedule(sh(script), gpu_count=0)
    events = await node.wait_for(scheduled.job_id, "ComputeReleased", 120)
    exited = only(events, ProcessExited)[0]
    assert exited.exit_code == 0
    assert all(len(line) <= 2001 for line in exited.last_log_lines)

    chunks = only(await node.facts(scheduled.job_id, "log-chunks"), LogChunk)
    text = stream_text(chunks, "stdout")
    assert text.startswith("a" * 2_000_000 + "\n")
    assert all(len(c.data.encode()) <= 64 * 1024 for c in chunks)
    quota = node.agent_settings.log_quota_bytes
    assert len(text.encode()) == quota
    (marker,) = [c for c in chunks if c.truncated]
    assert (marker.stream, marker.seq, marker.line_count) == ("system", 0, 1)
    assert "log quota of 10 MiB reached" in marker.data
    total = 2_000_001 + 50_000_000 + 50_000_000 // 999 + 5
    assert f"{(total - quota) / 2**20:.1f} MiB dropped" in marker.data

    beats = only(await node.facts(scheduled.job_id, "heartbeats"), AttemptHeartbeat)
    assert [b.seq for b in beats] == list(range(len(beats)))
    times = [b.occurred_at for b in beats]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    interval = node.agent_settings.heartbeat_interval_s
    print(f"flood: {len(beats)} heartbeats, max gap {max(gaps):.3f} s (interval {interval} s)")
    assert max(gaps) <= 2 * interval, f"a heartbeat waited more than one interval: {gaps}"


async def test_checkpoints_written_during_the_run_are_stored_with_checksums(
    node: Harness, object_store: PrivateStore
):
    script = (
        'mkdir -p "$GRIDLEDGER_OUTPUT_DIR/ckpt"; '
        'echo one > "$GRIDLEDGER_OUTPUT_DIR/ckpt/step_100.pt"; sleep 1.5; '
        'echo two > "$GRIDLEDGER_OUTPUT_DIR/ckpt/.tmp-write"; '
        'mv "$GRIDLEDGER_OUTPUT_DIR/ckpt/.tmp-write" "$GRIDLEDGER_OUTPUT_DIR/ckpt/step_200.pt"; '
        "sleep 1.5"
    )
    scheduled = await node.schedule(sh(script, checkpoints="ckpt"), gpu_count=0)
    events = await node.wait_for(scheduled.job_id, "ComputeReleased")
    stored = only(events, CheckpointStored)
    assert [(c.name, c.step) for c in stored] == [("step_100.pt", 100), ("step_200.pt", 200)]
    exited_at = only(events, ProcessExited)[0].occurred_at
    assert stored[0].occurred_at < exited_at, "stored while the job ran"
    for checkpoint, content in zip(stored, (b"one\n", b"two\n"), strict=True):
        assert checkpoint.sha256 == hashlib.sha256(content).hexdigest()
        assert checkpoint.bytes == len(content)
        assert object_store.read(checkpoint.uri) == content
        prefix = f"s3://gridledger/{job_prefix(TENANT, scheduled.job_id)}attempts/1/ckpt/"
        assert checkpoint.uri == prefix + checkpoint.name


async def test_cancel_stops_the_container_and_releases_compute(node: Harness):
    scheduled = await node.schedule(sh("echo started; sleep 60"))
    await node.wait_for(scheduled.job_id, "ContainerStarted")
    await node.cancel(scheduled)
    events = await node.wait_for(scheduled.job_id, "ComputeReleased", 30)
    assert types(events)[-2:] == ["AttemptCancelled", "ComputeReleased"]
    assert "ProcessExited" not in types(events)
    assert only(events, ComputeReleased)[0].reason == "cancelled"
    assert node.agent is not None and await node.agent.wait_idle(5)
    assert node.agent.gpus.free() == [0, 1]
    runtime = node.agent.ctx.runtime
    # Docker may still be removing it ("removing") when the release is reported.
    await eventually(
        lambda: runtime.list_own(node.node_id) == [], "the container removed after reporting"
    )


async def test_the_runtime_limit_stops_the_process(node: Harness):
    spec = sh("sleep 60", limits=Limits(max_runtime_s=2))
    events = await node.run(spec, gpu_count=0)
    exited = only(events, ProcessExited)[0]
    assert exited.runtime_exceeded and exited.exit_code in (137, 143)
    assert 2 <= exited.runtime_s < 10
    assert only(events, ComputeReleased)[0].reason == "runtime_exceeded"


def _stored_checkpoint(node: Harness, tmp_path: Path, content: bytes) -> CheckpointRef:
    """A checkpoint an earlier job of the tenant stored (through the store, as an agent does)."""
    stored = S3Store(node.settings).put(TENANT, "old-job", 1, "ckpt/step_7.pt", io.BytesIO(content))
    return CheckpointRef(
        job_id="old-job",
        attempt=1,
        name="step_7.pt",
        uri=stored.uri,
        sha256=stored.sha256,
        bytes=stored.bytes,
        step=7,
    )


async def test_resume_checkpoint_is_downloaded_verified_and_mounted_read_only(
    node: Harness, tmp_path: Path, object_store: PrivateStore
):
    ref = _stored_checkpoint(node, tmp_path, b"resume me\n")
    spec = sh('cat "$GRIDLEDGER_RESUME_FROM"; echo x >> "$GRIDLEDGER_RESUME_FROM" || echo ro')
    events = await node.run(spec, gpu_count=0, resume_from=ref)
    exited = only(events, ProcessExited)[0]
    assert "resume me" in exited.last_log_lines and "ro" in exited.last_log_lines
    assert object_store.read(ref.uri) == b"resume me\n"


async def test_a_checkpoint_whose_bytes_changed_is_never_resumed_from(
    node: Harness, tmp_path: Path, object_store: PrivateStore
):
    ref = _stored_checkpoint(node, tmp_path, b"step 7 weights\n")
    object_store.overwrite(ref.uri, b"step 7 weightz\n")
    events = await node.run(sh("echo must not run"), gpu_count=0, resume_from=ref)
    assert "ContainerStarted" not in types(events)
    failed = only(events, ContainerStartFailed)[0]
    assert failed.error_kind == "checkpoint_checksum_mismatch"
    assert ref.sha256 in failed.message and "step_7.pt" in failed.message
    assert only(events, ComputeReleased)[0].reason == "start_failed"


async def test_a_checkpoint_of_another_tenant_is_refused(node: Harness, tmp_path: Path):
    ref = _stored_checkpoint(node, tmp_path, b"dev's weights\n")
    events = await node.run(sh("echo must not run"), gpu_count=0, resume_from=ref, tenant="other")
    failed = only(events, ContainerStartFailed)[0]
    assert failed.error_kind == "resume_checkpoint_unavailable"
    assert "not an object of tenant 'other'" in failed.message


async def test_a_repeated_schedule_runs_once_and_a_denied_credential_reports_store_failed(
    idle_node: Harness, object_store: PrivateStore
):
    node = idle_node
    # The tenant's agent credential is revoked: the store answers, and refuses it.
    creds = object_store.credentials
    revoked = creds.tenants[TENANT].model_copy(
        update={"agent": Credential(access_key="glrevoked0000", secret_key="x" * 40)}
    )
    denied = node.settings.home / "denied-credentials.json"
    denied.write_text(CredentialsFile(tenants={**creds.tenants, TENANT: revoked}).model_dump_json())
    node.settings = node.settings.model_copy(update={"s3_credentials_file": denied})
    await node.start()
    spec = sh(
        'echo w > "$GRIDLEDGER_OUTPUT_DIR/model.pt"; echo m > "$GRIDLEDGER_OUTPUT_DIR/m.json"',
        outputs=[OutputSpec(path="model.pt"), OutputSpec(path="m.json")],
    )
    scheduled = await node.schedule(spec)
    await node.command(scheduled)  # at-least-once delivery: the same command again
    events = await node.wait_for(scheduled.job_id, "ComputeReleased")
    assert types(events).count("AttemptAccepted") == 1
    assert types(events).count("ContainerStarted") == 1
    failed = only(events, OutputFailed)
    assert [(f.path, f.reason) for f in failed] == [
        ("model.pt", "store_failed"),
        ("m.json", "store_failed"),
    ]
    assert "InvalidAccessKeyId" in failed[0].message
    assert f"s3://gridledger/{job_prefix(TENANT, scheduled.job_id)}" in failed[0].message
    assert only(events, ProcessExited)[0].exit_code == 0


async def test_shutdown_policy_stop_releases_running_attempts(idle_node: Harness):
    node = idle_node
    node.agent_settings = node.agent_settings.model_copy(update={"shutdown_policy": "stop"})
    await node.start()
    scheduled = await node.schedule(sh("sleep 60"))
    await node.wait_for(scheduled.job_id, "ContainerStarted")
    await node.stop()
    events = await node.facts(scheduled.job_id)
    assert types(events)[-1] == "ComputeReleased"
    assert only(events, ComputeReleased)[0].reason == "agent_shutdown"
    drained = [e.type for e in await node.facts(node.node_id, "node-events")]
    assert drained[0] == "NodeRegistered" and drained[-1] == "NodeDrained"
