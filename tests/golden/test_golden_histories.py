"""Replay every committed golden history through the current reducers and deciders."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS, react_all, settle, verify
from projections.job_state import project
from schemas import codec
from schemas.events import TERMINAL_EVENTS
from tests.golden.golden import HERE, fixture_paths, is_recorded, load, summarize
from tests.golden.record import PREFIX, RECORDED

PATHS = fixture_paths()


def test_there_are_golden_histories() -> None:
    assert len(PATHS) >= 18


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_golden_history(path: Path) -> None:
    events, ticks, expected = load(path)
    recorded = [e for e in events if e.producer in DECISION_PRODUCERS]
    # The decisions recomputed from the history equal the ones it holds ...
    assert react_all(events) == recorded
    assert verify(events) == []
    # ... and the facts alone lead to exactly this history.
    assert settle([e for e in events if e.producer not in DECISION_PRODUCERS]) == events
    # The reducers give the committed answer (regenerate.py rewrites it; review the diff).
    assert summarize(events, ticks) == expected
    assert sum(isinstance(e, TERMINAL_EVENTS) for e in events) == 1


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_golden_history_survives_the_wire(path: Path) -> None:
    events, ticks, _ = load(path)
    wire = [codec.decode_event(codec.encode(e)) for e in events]
    assert wire == events
    view, record = project(events), account(events, ticks)
    assert codec.decode(codec.encode(view)) == view
    assert codec.decode(codec.encode(record)) == record


STORIES = {
    # name: (status, failure class, attribution, billed)
    "success": ("succeeded", None, None, True),
    "user_exit_1": ("failed", "user_process_error", "user", True),
    "does_not_fit": ("rejected", "does_not_fit", "user", False),
    "cuda_oom": ("failed", "gpu_out_of_memory", "user", True),
}


@pytest.mark.parametrize("name", sorted(STORIES))
def test_goldens_recorded_from_real_runs_tell_the_users_story(name: str) -> None:
    """The recorded histories (``python -m tests.golden.record --demo``) are real runs of
    each story, and the folds still read them as the user saw them."""
    assert set(RECORDED.values()) == set(STORIES)
    path = HERE / f"{PREFIX}{name}.json"
    assert path.exists() and is_recorded(path), "record it: python -m tests.golden.record --demo"
    events, ticks, _ = load(path)
    view, record = project(events), account(events, ticks)
    status, failure_class, attribution, billed = STORIES[name]
    assert view.status == status
    failure = view.failure
    assert (failure.failure_class if failure else None) == failure_class
    assert (failure.attribution if failure else None) == attribution
    assert record.final and record.reconciled
    assert (record.billable_gpu_seconds > 0) is billed
    assert record.billable_gpu_seconds + record.credited_gpu_seconds == pytest.approx(
        record.gpu_seconds, abs=1e-6
    )
    if billed:  # it ran on a real agent: its meter ticked and its node is named
        assert ticks and all(a.node_id for a in record.attempts)
    else:
        assert record.held_seconds == 0 and ticks == []
