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


def _runner(tmp_path: Path, source: str, **scheduled: Any) -> AttemptRunner:
    settings = Settings(home=tmp_path)
    agent = AgentSettings(node_id="node-a")
    gpus = [GpuDevice(index=i, model="H100", memory_total_mb=81559) for i in range(4)]
    ctx = AgentContext(
        settings=settings,
        agent=agent,
        spool=None,  # type: ignore[arg-type]
        journal=Journal(tmp_path / "journal"),
        runtime=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        inventory=Inventory(source=source, gpus=gpus),  # type: ignore[arg-type]
        executor=ThreadPoolExecutor(1),
        secrets=SecretsClient(settings, agent),
    )
    event = AttemptScheduled(
        event_id="sched-1",
        job_id="job-1",
        attempt=2,
        occurred_at=T0,
        node_id="node-a",
        gpu_count=2,
        dispatch_deadline=T0,
        spec=JobSpec(
            image="gridledger/python:latest",
            command=["python3", "train.py"],
            env={"BATCH": "8"},
            resources=Resources(gpus=2, memory_gb=1.5, cpus=2),
            checkpoints="ckpt",
        ),
        **scheduled,
    )
    return AttemptRunner(ctx, JournalEntry(scheduled=event, gpu_indices=[1, 3]), lambda r: None)


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
    assert _runner(tmp_path, "nvml")._container_request().gpu_indices == [1, 3]


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
