"""The collector settings of the rebuild and the sink hold only while they run."""

from __future__ import annotations

import gc

import pytest

from services.gc_tuning import GC_THRESHOLDS, tuned_gc


def test_tuned_gc_applies_during_the_rebuild_and_restores_the_collector() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with tuned_gc():
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > frozen  # what existed before is not scanned again
        assert gc.isenabled()  # rarer collections, not none: cycles are still freed
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


def test_tuned_gc_restores_the_collector_when_the_rebuild_fails() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(RuntimeError), tuned_gc():
        raise RuntimeError("a worker's read failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen
