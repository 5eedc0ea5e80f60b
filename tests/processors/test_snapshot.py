"""Which jobs a restart may skip: settled ones, judged on the views the processors publish."""

from __future__ import annotations

from datetime import UTC, datetime

from projections.accounting import account
from projections.decisions import settle
from projections.job_state import project
from schemas.events import MeterTick
from schemas.views import AccountingRecord, JobView
from services.processors.snapshot import Snapshot, is_settled
from services.simulator.histories import job_history
from services.simulator.mix import JobMix

END = datetime(2026, 11, 1, tzinfo=UTC)


def published(mix: str, job_id: str = "job-1") -> tuple[JobView, AccountingRecord]:
    """The view and record the processors publish once a simulated job has settled."""
    history = job_history(job_id, END, JobMix.parse(mix, duration="1-3"))
    events = settle([e for e in history if type(e).TOPIC == "job-events"])
    ticks = [e for e in history if isinstance(e, MeterTick)]
    view = project(events)
    return view, account(events, ticks, view=view)


def test_a_succeeded_or_failed_job_that_is_accounted_for_is_settled() -> None:
    for mix in ("success=100", "user_error=100", "oom=100"):
        view, record = published(mix)
        assert view.status in ("succeeded", "failed")
        assert is_settled(view, record), mix


def test_an_open_job_an_unfinished_record_or_an_unreconciled_attempt_is_not() -> None:
    view, record = published("success=100")
    first = record.attempts[0]
    assert not is_settled(view.model_copy(update={"status": "running"}), record)
    assert not is_settled(view, None)  # no accounting record published yet
    assert not is_settled(view, record.model_copy(update={"final": False}))
    assert not is_settled(view, record.model_copy(update={"status": "running"}))
    unreconciled = first.model_copy(update={"reconciled": False})
    assert not is_settled(view, record.model_copy(update={"attempts": [unreconciled]}))


def test_the_snapshot_names_the_settled_jobs_only() -> None:
    done, done_record = published("success=100", "job-done")
    running = done.model_copy(update={"job_id": "job-open", "status": "running"})
    snapshot = Snapshot(
        views={"job-done": done, "job-open": running, "job-bare": done},
        accounting={"job-done": done_record, "job-open": done_record},
    )
    assert snapshot.settled() == {"job-done"}
