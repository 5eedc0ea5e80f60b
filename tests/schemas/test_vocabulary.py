"""The closed vocabularies (job status, attempt status, release reason) refuse a typo."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import pytest
from pydantic import ValidationError

from projections.job_state import project
from schemas.events import ComputeReleased, ReleaseReason
from schemas.views import AttemptStatus, AttemptView, JobStatus, JobView
from tests.golden.golden import fixture_paths, load

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ComputeReleased(job_id="j", occurred_at=T0, node_id="n", reason="exit"), "reason"),
        (lambda: AttemptView(attempt=1, status="done"), "status"),
        (lambda: AttemptView(attempt=1, release_reason="exit"), "release_reason"),
        (lambda: JobView(job_id="j", status="success"), "status"),
    ],
)
def test_a_value_outside_the_vocabulary_is_refused_naming_the_field(build, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        build()
    assert raised.value.errors()[0]["loc"] == (field,)


def test_every_status_the_fold_reaches_is_in_the_vocabulary() -> None:
    # model_copy(update=...) does not validate: the fold's statuses are checked here instead.
    views = [project(load(path)[0]) for path in fixture_paths()]
    assert len(views) >= 18
    assert {v.status for v in views} <= set(get_args(JobStatus))
    attempts = [a for v in views for a in v.attempts]
    assert {a.status for a in attempts} <= set(get_args(AttemptStatus))
    assert {a.release_reason for a in attempts} <= set(get_args(ReleaseReason))
