"""Replay every committed golden history through the current reducers and deciders."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.accounting import account
from projections.decisions import DECISION_PRODUCERS, react_all, settle, verify
from projections.job_state import project
from schemas import codec
from schemas.events import TERMINAL_EVENTS
from tests.golden.golden import fixture_paths, load, summarize

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
