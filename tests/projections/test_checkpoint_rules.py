"""Resuming from a checkpoint that cannot be used: a platform failure, never a silent resume."""

from __future__ import annotations

from projections.decisions import settle
from projections.failures import classify
from projections.job_state import project
from schemas.events import Event
from tests.projections.histories import JobHistory

MISMATCH = (
    "checkpoint step_2.pt of job job-0 (attempt 1): s3://gridledger/tenants/acme/jobs/job-0/"
    "attempts/1/ckpt/step_2.pt has sha256 9f86d0 (4 bytes), the recorded checkpoint has "
    "sha256 2c26b4"
)


def _start_failed(kind: str, message: str) -> list[Event]:
    h = JobHistory(live=False)
    h.submit()
    h.queue()
    h.schedule()
    h.accept()
    h.hold()
    h.start_failed(kind, message)
    h.release("start_failed")
    return h.events


def test_a_checksum_mismatch_is_a_platform_failure_that_is_not_retried() -> None:
    c = classify(_start_failed("checkpoint_checksum_mismatch", MISMATCH), 1)
    assert (c.failure_class, c.attribution, c.retryable) == (
        "checkpoint_corrupt",
        "platform",
        False,
    )
    assert c.rule_id == "start.checkpoint_corrupt"
    assert "did not match its recorded sha256" in c.summary and "2c26b4" in c.summary
    assert "without resume_from" in c.advice and "credited" in c.advice

    view = project(settle(_start_failed("checkpoint_checksum_mismatch", MISMATCH)))
    assert view.status == "failed"
    assert view.failure is not None and view.failure.failure_class == "checkpoint_corrupt"


def test_a_checkpoint_the_node_could_not_download_is_retried_elsewhere() -> None:
    message = (
        "... could not be downloaded to node node-a: reading s3://... failed: Could not connect"
    )
    c = classify(_start_failed("resume_checkpoint_unavailable", message), 1)
    assert (c.failure_class, c.attribution, c.retryable) == (
        "container_start_failed",
        "platform",
        True,
    )
    assert c.rule_id == "start.checkpoint_unavailable"
    assert "could not download the checkpoint" in c.summary and "Could not connect" in c.summary
