"""Meter arithmetic: deterministic tick indices; ticks sum to exactly the held time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.agent.meter import due_ticks, final_ticks, next_boundary

HELD = datetime(2026, 11, 30, 12, 0, 0, 250_000, tzinfo=UTC)


def test_due_ticks_are_the_complete_intervals_only():
    ticks = due_ticks(HELD, HELD + timedelta(seconds=12.3), 5.0, 2, 0)
    assert [t.index for t in ticks] == [0, 1]
    assert [t.interval_start for t in ticks] == [HELD, HELD + timedelta(seconds=5)]
    assert all(t.gpu_seconds == 10.0 and not t.final for t in ticks)
    assert due_ticks(HELD, HELD + timedelta(seconds=12.3), 5.0, 2, 2) == []


@pytest.mark.parametrize("held_s", [0.0, 0.4, 5.0, 12.345678, 3600.000001])
def test_ticks_sum_to_the_held_time_times_gpus(held_s: float):
    released = HELD + timedelta(seconds=held_s)
    emitted = due_ticks(HELD, HELD + timedelta(seconds=held_s / 2), 5.0, 4, 0)
    rest = final_ticks(HELD, released, 5.0, 4, len(emitted))
    ticks = emitted + rest
    assert [t.index for t in ticks] == list(range(len(ticks)))
    assert [t.final for t in ticks].count(True) == 1 and ticks[-1].final
    assert sum(t.gpu_seconds for t in ticks) == pytest.approx(held_s * 4, abs=1e-6)
    assert sum(t.interval_s for t in ticks) == pytest.approx(held_s, abs=1e-6)
    assert ticks[-1].interval_start + timedelta(seconds=ticks[-1].interval_s) == released


def test_a_restarted_meter_emits_the_same_ticks():
    later = HELD + timedelta(seconds=23)
    assert due_ticks(HELD, later, 5.0, 1, 0) == due_ticks(HELD, later, 5.0, 1, 0)
    assert final_ticks(HELD, later, 5.0, 1, 2)[0].index == 2


def test_next_boundary():
    assert next_boundary(HELD, 0, 5.0) == HELD + timedelta(seconds=5)
    assert next_boundary(HELD, 3, 2.5) == HELD + timedelta(seconds=10)
