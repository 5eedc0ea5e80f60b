"""What ``submit -f`` exits with, from the job document the API serves."""

from __future__ import annotations

import pytest

from services.cli.jobs import job_exit_code


def job(status: str, **attempt: object) -> dict[str, object]:
    return {"status": status, "attempts": [attempt] if attempt else []}


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        (job("succeeded", exit_code=0), 0),
        (job("failed", exit_code=3), 3),
        (job("failed", exit_code=137, signal=9, oom_killed=True), 137),
        (job("failed", exit_code=None, signal=15), 143),
        (job("failed", exit_code=None, signal=None), 1),  # e.g. the image did not exist
        (job("rejected"), 1),
        (job("cancelled", exit_code=None, signal=15), 1),
        (job("succeeded_with_errors", exit_code=0), 1),
    ],
)
def test_the_exit_code_is_the_jobs_own_else_one(doc: dict[str, object], code: int) -> None:
    assert job_exit_code(doc) == code
