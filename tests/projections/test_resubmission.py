"""A second JobSubmitted for an existing job id (a collision, a forged record of another
tenant) changes nothing of the first job: the fold notes it, accounting never sees it."""

from __future__ import annotations

from projections.accounting import DEFAULT_POLICY, account
from projections.job_state import project, resubmission
from schemas.events import JobSubmitted
from schemas.spec import JobSpec
from tests.sink.scenario import at, run_facts

OTHER_SPEC = JobSpec(image="gridledger/python:latest", name="intruder", env={"STOLEN": "1"})


def intruder(job_id: str, t: float = 1.5) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id, occurred_at=at(t), producer="api/x", tenant="other", spec=OTHER_SPEC
    )


def test_the_fold_keeps_the_first_job_and_notes_the_second_submission() -> None:
    script = run_facts("job-1")
    events = script.job_events
    second = intruder("job-1")
    clean = project(events)
    attacked = project([events[0], second, *events[1:], second])
    assert attacked.spec == clean.spec and attacked.tenant == clean.tenant == "dev"
    assert (attacked.status, attacked.name, attacked.attempts) == (
        clean.status,
        clean.name,
        clean.attempts,
    )
    assert (attacked.event_count, attacked.updated_at) == (clean.event_count, clean.updated_at)
    (note,) = [a for a in attacked.anomalies if second.event_id in a]
    assert "second JobSubmitted" in note and "other" not in note and "STOLEN" not in note
    assert resubmission(clean, second) and not resubmission(clean, events[0])
    assert not resubmission(None, second)


def test_accounting_is_the_same_with_or_without_the_second_submission() -> None:
    script = run_facts("job-2", exit_code=1)
    events = script.job_events
    ticks = script.meter_ticks
    attacked = [events[0], intruder("job-2"), *events[1:]]
    assert account(attacked, ticks, DEFAULT_POLICY) == account(events, ticks, DEFAULT_POLICY)
