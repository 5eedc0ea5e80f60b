"""Poison records never stop the sink: a NUL anywhere, a row Postgres refuses.

On the fake ledger (the sink takes the port) and the real Postgres. What a tenant sees
afterwards: the NUL-bearing job in the tables (a NUL in a text column as U+FFFD, every
log character kept), a refused record on the dead-letter topic with its reason and
counted in the metric, and another tenant's job finished in the tables as if nothing
had happened.
"""

from __future__ import annotations

import asyncpg
import pytest
from pydantic import ValidationError

from schemas.events import JobSubmitted, LogChunk
from services.api import queries
from services.ledger.client import DLQ_CONSUMER, DLQ_REASON, DLQ_SOURCE_OFFSET
from services.ops.metrics import REGISTRY
from services.settings import Settings
from services.sink.consumer import build_sink, stored_offsets
from services.sink.rows import event_from_payload, job_event_row
from services.sink.tables import json_safe, text_safe
from tests.fakes.ledger import FakeLedger
from tests.sink.pg import dump
from tests.sink.scenario import SPEC, run_facts
from tests.sink.test_sink import running

pytestmark = pytest.mark.integration


def parked_count(consumer: str, reason: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "gridledger_dead_letters_total", {"consumer": consumer, "reason": reason}
        )
        or 0.0
    )


async def test_a_nul_in_a_name_an_env_value_and_a_log_line_is_stored_and_never_stops_the_sink(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    hostile = run_facts("job-nul", tenant="other")
    first = hostile.job_events[0]
    assert isinstance(first, JobSubmitted)
    spec = SPEC.model_copy(update={"name": "nul\x00x", "env": {"A": "x\x00y"}})
    hostile.job_events[0] = first.model_copy(update={"spec": spec})
    line = "bell\x07 nul\x00 \\u0000 é 🚀\n"
    hostile.log_chunks[0] = hostile.log_chunks[0].model_copy(update={"data": line})
    victim = run_facts("job-victim", start=100)
    async with FakeLedger(settings) as ledger:
        await ledger.append_many([*hostile.all(), *victim.all()])
        sink = await build_sink(settings, ledger, pool)
        async with running(sink) as task:
            await sink.catch_up()
            assert not task.done()
    tables = await dump(pool)
    jobs = {j["job_id"]: j for j in tables["jobs"]}
    assert jobs["job-victim"]["status"] == "succeeded"
    assert jobs["job-nul"]["status"] == "succeeded"
    assert jobs["job-nul"]["name"] == "nul\ufffdx"
    chunks = await queries.log_chunks(pool, "job-nul", None, "stdout")
    assert chunks[0]["data"] == line  # every character, the NUL included
    stored = [e for e in tables["job_events"] if e["job_id"] == "job-nul"]
    assert len(stored) == len(hostile.job_events)


async def test_a_row_postgres_refuses_is_parked_and_the_rest_of_the_batch_is_committed(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    victim = run_facts("job-victim")
    # A valid event whose seq does not fit the integer column: Postgres refuses its row.
    refused = LogChunk(
        **{**victim.log_chunks[0].model_dump(), "event_id": "chunk-huge", "seq": 2**40}
    )
    before = parked_count("sink/sink", "unstorable")
    async with FakeLedger(settings) as ledger:
        await ledger.append_many([*victim.job_events[:4], refused, *victim.all()[4:]])
        sink = await build_sink(settings, ledger, pool)
        async with running(sink) as task:
            await sink.catch_up()
            assert not task.done()
        dead = [r async for r in ledger.read_raw(settings.topic("dead-letter"))]
        ends = await sink.end_offsets()
    assert len(dead) == 1
    headers = dict(dead[0].headers)
    assert headers[DLQ_REASON] == b"unstorable"
    assert headers[DLQ_CONSUMER] == b"sink/sink"
    assert int(headers[DLQ_SOURCE_OFFSET]) >= 0
    assert parked_count("sink/sink", "unstorable") == before + 1
    tables = await dump(pool)
    assert [j["status"] for j in tables["jobs"]] == ["succeeded"]
    assert len(tables["log_chunks"]) == len(victim.log_chunks)
    async with pool.acquire() as conn:
        assert await stored_offsets(conn, "sink") == {tp: n for tp, n in ends.items() if n}


def test_nul_stand_ins_are_deterministic_and_leave_escaped_backslashes_alone() -> None:
    assert text_safe("a\x00b") == "a\ufffdb"
    assert text_safe(["a", "\x00"]) == ["a", "\ufffd"]
    plain = ["a", "b"]
    assert text_safe(plain) is plain
    assert json_safe('{"a": "x\\u0000y"}') == '{"a": "x\\ufffdy"}'
    # An escaped backslash followed by the letters u0000 is no NUL; the one after it is.
    assert json_safe('"\\\\u0000 \\\\\\u0000"') == '"\\\\u0000 \\\\\\ufffd"'
    assert json_safe(json_safe('"\\u0000"')) == json_safe('"\\u0000"')


def test_a_stored_record_a_later_rule_refuses_reads_back_as_it_was_stored() -> None:
    """The API now refuses a control character in a name; a submission stored before it did
    still reads back (the sink's restart, the API's history), equal to what was written."""
    first = run_facts("job-old").job_events[0]
    assert isinstance(first, JobSubmitted)
    old = first.model_copy(update={"spec": SPEC.model_copy(update={"name": "bell\x07"})})
    payload = job_event_row(old, 1)["payload"]
    with pytest.raises(ValidationError):
        JobSubmitted.model_validate_json(payload)
    assert event_from_payload("JobSubmitted", payload) == old
    assert event_from_payload("JobSubmitted", job_event_row(first, 1)["payload"]) == first


async def test_a_restarted_sink_reads_back_a_job_stored_before_a_rule_and_goes_on(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    script = run_facts("job-old", tenant="other")
    first = script.job_events[0]
    assert isinstance(first, JobSubmitted)
    spec = SPEC.model_copy(update={"name": "bell\x07", "env": {"A": "v" * 40_000}})
    script.job_events[0] = first.model_copy(update={"spec": spec})
    async with FakeLedger(settings) as ledger:
        await ledger.append_many(script.job_events[:3])
        sink = await build_sink(settings, ledger, pool)
        async with running(sink):
            await sink.catch_up()
        await ledger.append_many([*script.job_events[3:], *script.log_chunks])
        restarted = await build_sink(settings, ledger, pool)  # an empty job cache
        async with running(restarted) as task:
            await restarted.catch_up()
            assert not task.done()
    jobs = {j["job_id"]: j for j in (await dump(pool))["jobs"]}
    assert jobs["job-old"]["status"] == "succeeded"
    assert jobs["job-old"]["name"] == "bell\x07"
