"""The subscriber client on the real broker: decode, schema resolution, dedupe, groups."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import fastavro
import pytest
from gridledger_client import Subscriber, Undecodable, wire

from schemas import codec
from schemas.events import JobQueued, ProcessExited
from schemas.views import JobView
from services.ledger import Ledger
from services.settings import Settings
from services.transport import subscriber
from tests.sink.scenario import at, run_facts, submitted

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def job_id() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


async def drain(sub: Subscriber, idle_s: float = 2.0) -> list:
    return [d async for d in sub.deliveries(idle_timeout_s=idle_s)]


def v1_process_exited(job: str) -> bytes:
    """ProcessExited as an old producer wrote it (schema v1, without memory_limit_bytes)."""
    v1 = json.loads((wire.AVRO_DIR / "ProcessExited.v1.avsc").read_text())
    record = {
        "envelope": {
            "event_id": f"{job}-old-exit",
            "job_id": job,
            "attempt": 1,
            "type": "ProcessExited",
            "occurred_at": at(50),
            "producer": "agent/old",
            "causation_id": None,
            "schema_version": 1,
        },
        "exit_code": 1,
        "signal": None,
        "oom_killed": False,
        "runtime_s": 3.0,
        "last_log_lines": ["boom"],
        "runtime_exceeded": False,
    }
    buf = io.BytesIO()
    buf.write(codec.MAGIC + codec.fingerprint(v1).to_bytes(8, "little"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(v1), record)
    return buf.getvalue()


async def test_each_event_once_old_schemas_resolved_and_bad_records_reported(
    topics: Settings,
) -> None:
    job = job_id()
    first = submitted(job)
    queued = JobQueued(job_id=job, occurred_at=at(1), producer="scheduler/test",
                       queue_deadline=at(600))  # fmt: skip
    view = JobView(job_id=job, tenant="dev", status="queued", event_count=2)
    bad: list[Undecodable] = []
    async with Ledger(topics, "test") as ledger:
        await ledger.append(first)
        await ledger.append(first)  # a producer retry: same event id
        await ledger.append(queued)
        await ledger.publish("job-state", job, view)
        await ledger.publish("job-state", job, view)  # a processor restarted and republished
        topic = topics.topic("job-events")
        await ledger.send_raw(topic, job.encode(), b"not avro at all", [])
        await ledger.send_raw(topic, job.encode(), v1_process_exited(job), [])

    async with subscriber(topics, ["job-events", "job-state"], on_undecodable=bad.append) as sub:
        got = await drain(sub)
    events = [d for d in got if d.topic == "job-events"]
    assert [d.type for d in events] == ["JobSubmitted", "JobQueued", "ProcessExited"]
    assert [d.value.event_id for d in events][:2] == [first.event_id, queued.event_id]
    old = events[2].value
    assert isinstance(old, ProcessExited) and old.schema_version == 1
    assert old.memory_limit_bytes == 0, "the v2 field takes its default"
    views = [d for d in got if d.topic == "job-state"]
    assert len(views) == 1 and views[0].value == view and views[0].key == job
    assert sub.duplicates == 2
    (undecodable,) = bad
    assert undecodable.topic == "job-events" and undecodable.key == job
    assert "c301" in undecodable.error


async def test_type_and_key_filters(topics: Settings) -> None:
    mine, other = job_id(), job_id()
    async with Ledger(topics, "test") as ledger:
        await ledger.append_many([*run_facts(mine).job_events, *run_facts(other).job_events])
    async with subscriber(topics, types={"JobSucceeded", "JobQueued"}, keys={mine}) as sub:
        got = await drain(sub)
    assert [(d.key, d.type) for d in got] == [(mine, "JobQueued"), (mine, "JobSucceeded")]


async def test_a_group_resumes_after_what_it_committed(topics: Settings) -> None:
    group = f"test-{uuid.uuid4().hex[:8]}"
    before, after = job_id(), job_id()
    async with Ledger(topics, "test") as ledger:
        await ledger.append(submitted(before))
        async with subscriber(topics, group_id=group) as sub:
            assert [d.key for d in await drain(sub, 3.0)] == [before]
            await sub.commit()
        await ledger.append(submitted(after))
    async with subscriber(topics, group_id=group) as sub:
        assert [d.key for d in await drain(sub, 3.0)] == [after]


def test_unknown_topics_are_refused_with_the_list() -> None:
    with pytest.raises(ValueError, match="node-commands.*job-events"):
        Subscriber("127.0.0.1:9092", ["node-commands"])
