"""The container an attempt asks Docker for: limits, labels, env, mounts, GPU requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.events import AttemptScheduled
from schemas.spec import JobSpec, Resources
from schemas.types import CheckpointRef, GpuDevice
from services.agent.attempt import AttemptRunner
from services.agent.context import AgentContext
from services.agent.inventory import Inventory
from services.agent.journal import Journal, JournalEntry
from services.agent.secrets import SecretsClient
from services.agent.settings import AgentSettings
from services.settings import Settings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _runner(
    tmp_path: Path,
    source: str,
    env: dict[str, str] | None = None,
    gpus: int = 2,
    **scheduled: Any,
) -> AttemptRunner:
    settings = Settings(home=tmp_path)
    agent = AgentSettings(node_id="node-a")
    devices = [GpuDevice(index=i, model="H100", memory_total_mb=81559) for i in range(4)]
    ctx = AgentContext(
        settings=settings,
        agent=agent,
        spool=None,  # type: ignore[arg-type]
        journal=Journal(tmp_path / "journal"),
        runtime=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        inventory=Inventory(source=source, gpus=devices),  # type: ignore[arg-type]
        executor=ThreadPoolExecutor(1),
        secrets=SecretsClient(settings, agent),
    )
    event = AttemptScheduled(
        event_id="sched-1",
        job_id="job-1",
        attempt=2,
        occurred_at=T0,
        node_id="node-a",
        gpu_count=gpus,
        dispatch_deadline=T0,
        # model_copy does not validate: the env as a record decoded on the trusted path
        # (or written by an older API) may carry it.
        spec=JobSpec(
            image="gridledger/python:latest",
            command=["python3", "train.py"],
            resources=Resources(gpus=gpus, memory_gb=1.5, cpus=2),
            checkpoints="ckpt",
        ).model_copy(update={"env": {"BATCH": "8"} if env is None else env}),
        **scheduled,
    )
    indices = [1, 3][:gpus]
    return AttemptRunner(ctx, JournalEntry(scheduled=event, gpu_indices=indices), lambda r: None)


def test_limits_labels_env_and_no_gpu_request_on_a_declared_inventory(tmp_path: Path):
    request = _runner(tmp_path, "declared")._container_request()
    assert request.memory_limit_bytes == int(1.5 * 1024**3)
    assert request.nano_cpus == 2_000_000_000
    assert request.labels == {
        "gridledger.job_id": "job-1",
        "gridledger.attempt": "2",
        "gridledger.node_id": "node-a",
    }
    assert request.env == {
        "BATCH": "8",
        "GRIDLEDGER_JOB_ID": "job-1",
        "GRIDLEDGER_ATTEMPT": "2",
        "GRIDLEDGER_OUTPUT_DIR": "/gridledger/output",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert request.gpu_indices is None
    assert request.output_dir.is_dir() and (request.output_dir / "ckpt").is_dir()
    assert request.resume_file is None


def test_resolved_secrets_join_the_environment_of_the_container_only(tmp_path: Path):
    runner = _runner(tmp_path, "declared")
    request = runner._container_request(None, {"HF_TOKEN": "v4lue"})
    assert request.env["HF_TOKEN"] == "v4lue" and request.env["BATCH"] == "8"
    assert "v4lue" not in runner.record.model_dump_json()


def test_gpus_are_requested_by_index_when_nvml_found_them(tmp_path: Path):
    request = _runner(tmp_path, "nvml")._container_request()
    assert request.gpu_indices == [1, 3]
    assert request.env["NVIDIA_VISIBLE_DEVICES"] == "1,3"


def test_a_job_without_gpus_never_gets_one(tmp_path: Path):
    request = _runner(tmp_path, "nvml", gpus=0)._container_request()
    assert request.gpu_indices is None
    assert request.env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_reserved_env_names_never_override_what_the_agent_sets(tmp_path: Path):
    hostile = {
        "GRIDLEDGER_JOB_ID": "job-of-another",
        "GRIDLEDGER_OUTPUT_DIR": "/etc",
        "gridledger_attempt": "9",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "all",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "BATCH": "8",
    }
    request = _runner(tmp_path, "nvml", env=hostile, gpus=0)._container_request()
    assert request.env == {
        "BATCH": "8",
        "GRIDLEDGER_JOB_ID": "job-1",
        "GRIDLEDGER_ATTEMPT": "2",
        "GRIDLEDGER_OUTPUT_DIR": "/gridledger/output",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }


def test_the_container_runs_as_a_non_root_user_in_a_folder_only_it_can_write(tmp_path: Path):
    request = _runner(tmp_path, "declared")._container_request()
    uid, gid = AgentSettings(node_id="node-a").user()
    assert request.user == f"{uid}:{gid}" and uid != 0
    assert request.pids_limit == 4096
    for folder in (request.output_dir, request.output_dir / "ckpt"):
        st = folder.stat()
        assert (st.st_uid, st.st_gid) == (uid, gid)
        assert st.st_mode & 0o777 == 0o750, oct(st.st_mode)


def test_the_resume_checkpoint_is_mounted_and_named_in_the_env(tmp_path: Path):
    downloaded = tmp_path / "work" / "job-1.2" / "resume" / "step_5.pt"
    ref = CheckpointRef(
        job_id="job-0",
        attempt=1,
        name="step_5.pt",
        uri="s3://gridledger/tenants/t/jobs/job-0/attempts/1/ckpt/step_5.pt",
        sha256="s",
        bytes=1,
    )
    request = _runner(tmp_path, "declared", resume_from=ref)._container_request(downloaded)
    assert request.resume_file == downloaded
    assert request.resume_target == "/gridledger/resume/step_5.pt"
    assert request.env["GRIDLEDGER_RESUME_FROM"] == "/gridledger/resume/step_5.pt"


def test_a_limit_never_rounds_to_no_limit(tmp_path: Path):
    runner = _runner(tmp_path, "declared")
    spec = runner.record.scheduled.spec
    tiny = spec.resources.model_copy(update={"memory_gb": 1e-10, "cpus": 1e-10})
    runner.record.scheduled = runner.record.scheduled.model_copy(
        update={"spec": spec.model_copy(update={"resources": tiny})}
    )
    request = runner._container_request()
    assert request.memory_limit_bytes == int(0.01 * 1024**3)
    assert request.nano_cpus == 10_000_000
