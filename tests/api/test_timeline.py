"""The console's timeline: the states the fold implies, per lane, and the bounded waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.job_state import project
from schemas.views import JOB_STATUSES, TERMINAL_STATUSES
from services.api.timeline import timeline
from tests.golden.golden import HERE, fixture_paths, load


def build(name: str):
    events, _, _ = load(HERE / f"{name}.json")
    return events, timeline(list(enumerate(events, 1)), TERMINAL_STATUSES)


def states(lane) -> list[str]:
    return [s.state for s in lane.segments]


def test_a_lost_node_then_a_retry_shows_both_attempts_and_each_wait() -> None:
    events, tl = build("node_lost_then_resume")
    job, first, second = tl.lanes
    assert job.key == "job" and [first.key, second.key] == ["attempt-1", "attempt-2"]
    assert first.node_id != second.node_id, "the retry ran on another node"
    assert states(job)[:6] == ["submitted", "queued", "scheduled", "starting", "running",
                               "lost_contact"]  # fmt: skip
    assert "retrying" in states(job) and states(job)[-1] == "succeeded"
    assert states(first)[-1] == "lost"
    assert states(second)[-1] == "ended"
    kinds = [(w.kind, w.attempt, w.outcome) for w in tl.windows]
    assert ("lost_contact", 1, "lost") in kinds
    assert ("backoff", 1, "retried") in kinds or ("backoff", 2, "retried") in kinds
    assert any(k == "finishing" and outcome == "released" for k, _, outcome in kinds)
    # every event is listed once, in order, with the state the fold reached after it
    assert [e.event_id for e in tl.events] == [e.event_id for e in events]
    assert tl.events[-1].job_status == project(events).status


def test_contact_that_comes_back_is_a_recovered_window() -> None:
    _, tl = build("lost_contact_recovers")
    lost = [w for w in tl.windows if w.kind == "lost_contact"]
    assert len(lost) == 1 and lost[0].outcome == "recovered"
    assert lost[0].end is not None and lost[0].end > lost[0].start


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: Path(p).stem)
def test_every_golden_history_gives_contiguous_lanes_ending_in_its_final_state(path) -> None:
    events, _, _ = load(path)
    tl = timeline(list(enumerate(events, 1)), TERMINAL_STATUSES)
    view = project(events)
    assert tl.terminal == (view.status in TERMINAL_STATUSES)
    assert states(tl.lanes[0])[-1] == view.status
    assert all(s.state in JOB_STATUSES for s in tl.lanes[0].segments)
    for lane in tl.lanes:
        assert all(s.state for s in lane.segments)
        for before, after in zip(lane.segments, lane.segments[1:], strict=False):
            assert before.end == after.start, f"{lane.key}: a gap between states"
            assert before.state != after.state
    assert [len(tl.lanes) - 1] == [len(view.attempts)]
