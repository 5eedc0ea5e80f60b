"""A record the ledger refuses ends the job ``record_refused``, and views keep a budget.

Pure: the decider on a RecordRefused, the fold's budget on what an attempt reports.
"""

from __future__ import annotations

from projections.accounting import account
from projections.decisions import react_all
from projections.failures import classify_refusal
from projections.job_state import VIEW_BUDGET, project
from projections.retry import latest_checkpoint
from schemas import codec
from schemas.events import AttemptSuperseded, JobFailed, RecordRefused
from tests.projections.histories import JobHistory, job_spec


def refused(job: JobHistory) -> RecordRefused:
    return job.emit(
        RecordRefused,
        "processors",
        record_topic="job-state",
        record_type="JobView",
        size_bytes=1_200_000,
        limit_bytes=1_048_576,
    )


def test_a_refused_record_ends_a_running_job_platform_side_and_credits_its_compute() -> None:
    job = JobHistory()
    job.submit()
    job.start()
    job.wait(60)
    refused(job)
    view = project(job.events)
    assert view.status == "failed"
    assert view.failure is not None
    assert (view.failure.failure_class, view.failure.attribution) == ("record_refused", "platform")
    assert "JobView on job-state" in view.failure.summary
    assert "1,200,000 bytes is over the topic's limit of 1,048,576 bytes" in view.failure.summary
    assert view.failure.attempt == 1
    assert "dead-letter topic" in view.failure.advice
    # The attempt still running is stopped, and replay derives exactly what was decided.
    assert [type(e) for e in job.events[-2:]] == [JobFailed, AttemptSuperseded]
    assert [e.event_id for e in react_all(job.events)] == [
        e.event_id for e in job.events if e.producer in ("classifier", "retry-decider")
    ]
    job.wait(5).release("cancelled")
    record = account(job.events, job.ticks)
    assert record.billable_gpu_seconds == 0.0
    assert record.credited_gpu_seconds == record.gpu_seconds > 0


def test_a_refusal_is_classified_on_the_job_s_attempt_when_it_came() -> None:
    job = JobHistory()
    job.submit()
    job.start()
    event = refused(job.wait(30))
    c = classify_refusal(event, 2)
    assert (c.failure_class, c.attempt, c.occurred_at) == ("record_refused", 2, event.occurred_at)


def test_a_second_refusal_after_the_end_decides_nothing() -> None:
    job = JobHistory()
    job.submit()
    refused(job)
    ended = len(job.events)
    refused(job)
    assert len(job.events) == ended + 1  # the fact only
    assert project(job.events).status == "failed"


def test_ten_attempts_of_long_lines_keep_the_view_within_its_budget() -> None:
    job = JobHistory(spec=job_spec(retry={"max_attempts": 10, "retry_user_errors": True}))
    job.submit()
    line = "x" * 5000
    for _ in range(10):
        job.start()
        job.wait(10).exit(1, logs=tuple(f"{i} {line}" for i in range(50)))
        job.wait(1).release()
    view = project(job.events)
    assert (view.status, len(view.attempts)) == ("failed", 10)
    for attempt in view.attempts:
        kept = attempt.last_log_lines
        assert kept and kept[-1].startswith("49 ")  # the latest lines are the ones kept
        assert sum(len(x.encode()) + 1 for x in kept) <= VIEW_BUDGET.log_bytes
        assert all(len(x) <= VIEW_BUDGET.line_chars + 1 for x in kept)
    assert len(codec.encode(view)) < 200_000


def test_a_view_lists_only_the_latest_checkpoints_and_a_retry_still_resumes_from_the_latest() -> (
    None
):
    job = JobHistory()
    job.submit()
    job.start()
    count = VIEW_BUDGET.checkpoints * 3
    for step in range(count):
        job.wait(1)
        job.checkpoint(f"step_{step}.pt", step)
    view = project(job.events)
    assert [c.step for c in view.checkpoints] == list(range(count - VIEW_BUDGET.checkpoints, count))
    latest = latest_checkpoint(view)
    assert latest is not None and latest.step == count - 1
