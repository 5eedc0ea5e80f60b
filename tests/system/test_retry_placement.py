"""Retries land where they can: avoidance is a preference, never a reason to starve.

Real sink, api, scheduler and processors processes and real agents on Docker.
"""

from __future__ import annotations

import pytest

from services.demo.scenarios import RESUMABLE
from tests.system.conftest import PYTHON, System, bound_s, sh

pytestmark = pytest.mark.integration


def scheduled_events(system: System, job_id: str) -> list[dict]:
    return [e for e in system.events(job_id) if e["type"] == "AttemptScheduled"]


def test_a_lost_node_s_job_resumes_on_the_same_provider_s_spare(system: System) -> None:
    system.start_agent("node-a", provider="acme", count=1)
    system.start_agent("node-b", provider="acme", count=1)
    spec = {
        "name": "resumable",
        "image": PYTHON,
        "command": ["python3", "-c", RESUMABLE],
        "checkpoints": "ckpt",
        "outputs": [{"path": "model.pt"}],
        "resources": {"gpus": 1, "memory_gb": 0.5},
        "retry": {"backoff_s": 1},
        "limits": {"queue_timeout_s": 120, "max_runtime_s": 900},
    }
    job_id = system.submit(spec)
    system.wait_for(
        lambda: bool(system.job(job_id).get("checkpoints")), 120, "the first checkpoint"
    )
    first = system.job(job_id)["attempts"][0]["node_id"]
    spare = "node-b" if first == "node-a" else "node-a"
    system.kill_node(first)  # the agent process and its container, SIGKILL
    system.wait_terminal([job_id], 180)

    doc = system.job(job_id)
    assert doc["status"] == "succeeded", doc.get("failure")
    one, two = doc["attempts"]
    assert (one["node_id"], one["failure_class"]) == (first, "node_lost")
    assert two["node_id"] == spare
    assert two["resume_from"]["name"].endswith("step-1.pt")
    retry = scheduled_events(system, job_id)[-1]
    assert retry["avoidance"]["fell_back_to"] == "provider"
    assert retry["avoidance"]["providers"] == ["acme"] and retry["avoidance"]["nodes"] == [first]
    assert f"fell back to provider acme on node {spare}" in retry["reason"]

    record = system.check_invariants(job_id, bound_s(spec, system.settings))
    lines = {a["attempt"]: a for a in record["attempts"]}
    assert lines[1]["credited_gpu_seconds"] > 0 and lines[1]["billable_gpu_seconds"] == 0
    assert lines[2]["billable_gpu_seconds"] > 0 and lines[2]["credited_gpu_seconds"] == 0


def test_exit_137_without_an_oom_kill_on_a_one_node_fleet_ends_long_before_the_queue_timeout(
    system: System,
) -> None:
    system.start_agent("only-node", provider="acme", count=1)
    spec = sh("echo killed by something; exit 137", retry={"backoff_s": 1})
    job_id = system.submit(spec)
    system.wait_terminal([job_id], 120)  # the queue timeout is 600 s

    doc = system.job(job_id)
    assert doc["status"] == "failed"
    assert doc["failure"]["failure_class"] == "unknown"
    assert [a["node_id"] for a in doc["attempts"]] == ["only-node", "only-node"]
    assert all(a["exit_code"] == 137 and not a["oom_killed"] for a in doc["attempts"])
    retry = scheduled_events(system, job_id)[-1]
    assert retry["avoidance"]["fell_back_to"] == "node"
    assert "fell back to the same node only-node" in retry["reason"]
    record = system.check_invariants(job_id, bound_s(spec, system.settings))
    assert record["credited_gpu_seconds"] > 0  # unknown: the platform's, not billed
    assert record["billable_gpu_seconds"] == 0
