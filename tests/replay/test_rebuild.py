"""The in-memory rebuild: parallel workers give exactly the serial results, which are the
processors' own functions applied to each job's history."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition

from projections.accounting import account
from projections.decisions import settle
from projections.job_state import project
from schemas.events import Event, JobFailed, MeterTick
from services.ledger import Ledger, compose
from services.replay.rebuild import Options, Rebuilt, rebuild
from services.settings import Settings
from services.simulator.histories import job_history
from services.simulator.mix import JobMix

pytestmark = pytest.mark.integration

MIX = JobMix.parse("success=60,user_error=20,oom=20", duration="1-3")
FULL = Options(decisions=True, compare_published=True)


def ledger_events() -> list[Event]:
    """30 settled jobs (facts, decisions, streams), some events twice, one hand-made decision."""
    end = datetime(2026, 11, 1, tzinfo=UTC)
    out: list[Event] = []
    for i in range(30):
        history = job_history(f"job-{i:03d}", end + timedelta(seconds=i), MIX)
        facts = [e for e in history if type(e).TOPIC == "job-events"]
        out += settle(facts) + [e for e in history if type(e).TOPIC != "job-events"]
    out += out[5:15]  # at-least-once: redelivered events the folds must drop
    hand = JobFailed(
        job_id="job-000",
        attempt=1,
        occurred_at=end + timedelta(seconds=60),
        producer="someone",
        failure_class="unknown",
    )
    return [*out, hand]


def same_results(a: Rebuilt, b: Rebuilt) -> bool:
    """Equal except for how it ran (workers, CPU time, memory)."""
    ran: dict[str, Any] = {"workers": 0, "cpu_s": 0.0, "peak_rss_mb": 0.0}
    return dataclasses.replace(a, **ran) == dataclasses.replace(b, **ran)


async def dead_letters(ledger: Ledger) -> int:
    consumer = ledger.consumer()
    await consumer.start()
    try:
        tp = TopicPartition(ledger.settings.topic("dead-letter"), 0)
        return (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()


async def test_parallel_rebuild_equals_serial_and_the_processors_functions(
    topics: Settings,
) -> None:
    async with Ledger(topics, "test") as ledger:
        await ledger.append_many(ledger_events())
        # An undecodable record: readers skip it without dead-lettering it (again).
        await ledger.send_raw(topics.topic("job-events"), b"job-001", b"\xc3\x01garbage", [])
        histories = {
            f"job-{i:03d}": await compose.history(ledger, f"job-{i:03d}") for i in range(30)
        }
        ticks = {
            job_id: [
                t
                for t in await compose.history(ledger, job_id, "meter-ticks")
                if isinstance(t, MeterTick)
            ]
            for job_id in histories
        }
        published = {
            "job-003": project(histories["job-003"]),
            "job-004": project(histories["job-004"][:-2]),
            "job-005": project(histories["job-005"]).model_copy(update={"status": "running"}),
            "job-999": project(histories["job-006"]).model_copy(update={"job_id": "job-999"}),
        }
        for job_id, view in published.items():
            await ledger.publish("job-state", job_id, view)

        serial = await rebuild(topics, FULL, workers=1)
        two = await rebuild(topics, FULL, workers=2)
        four = await rebuild(topics, FULL, workers=4)  # uneven shares of 6 partitions
        summary = await rebuild(topics, dataclasses.replace(FULL, keep_models=False), workers=2)
        assert await dead_letters(ledger) == 0

    assert (serial.workers, two.workers, four.workers) == (1, 2, 4)
    assert same_results(serial, two) and same_results(serial, four)
    assert list(serial.views) == sorted(histories)
    for job_id, history in histories.items():
        view = project(history)
        assert serial.views[job_id] == view
        assert serial.statuses[job_id] == view.status
        assert serial.accounting[job_id] == account(history, ticks[job_id], view=view)
    expected_events = sum(len(h) for h in histories.values()) + sum(len(t) for t in ticks.values())
    assert serial.events == expected_events  # duplicates read, the undecodable one skipped
    assert set(serial.drift) == {"job-000"}
    assert [(d.kind, d.event_type) for d in serial.drift["job-000"]] == [
        ("unexpected", "JobFailed")
    ]
    assert serial.published["job-003"] == "equal"
    assert serial.published["job-004"] == "behind"
    assert "status" in serial.published["job-005"]
    assert serial.published["job-999"] == "a view without any job event"
    assert serial.records["job-state"] == 4

    assert summary.views == {} and summary.accounting == {}
    assert (summary.statuses, summary.drift, summary.published, summary.records) == (
        serial.statuses,
        serial.drift,
        serial.published,
        serial.records,
    )
