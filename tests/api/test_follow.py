"""Live log follow: lines arrive while chunks are appended, and the stream closes at the end."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from schemas.events import LogChunk
from tests.api.conftest import Api
from tests.api.test_jobs import submit
from tests.sink.scenario import at, run_facts, terminal

pytestmark = pytest.mark.integration


def chunk(job_id: str, seq: int) -> LogChunk:
    return LogChunk(
        job_id=job_id,
        attempt=1,
        occurred_at=at(10 + seq),
        producer="agent/node-a",
        stream="stdout",
        seq=seq,
        first_line=seq + 1,
        line_count=1,
        data=f"line {seq}\n",
    )


async def test_follow_streams_lines_live_and_closes_when_the_job_ends(api: Api) -> None:
    job_id = await submit(api)
    facts = run_facts(job_id, submit=False, lines=0, ticks=1)
    await api.ledger.append_many(facts.job_events[:6])  # scheduled ... container started
    await api.ledger.append(chunk(job_id, 0))
    await api.sink.catch_up()

    received: list[dict] = []
    arrived: dict[int, float] = {}

    async def read() -> None:
        response = await api.client.get(
            f"/v1/jobs/{job_id}/logs?follow=true&format=ndjson", headers=api.auth()
        )
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/x-ndjson"
        async for line in response.content:
            item = json.loads(line)
            received.append(item)
            if "seq" in item:
                arrived[item["seq"]] = time.monotonic()

    reader = asyncio.create_task(read())
    appended: dict[int, float] = {}
    for seq in range(1, 5):
        await asyncio.sleep(0.3)
        appended[seq] = time.monotonic()
        await api.ledger.append(chunk(job_id, seq))
        # Each line reaches the client before the next one is even appended.
        for _ in range(100):
            if seq in arrived:
                break
            await asyncio.sleep(0.02)
        assert seq in arrived, f"line {seq} did not arrive while the job was running"
    assert not reader.done(), "the stream must stay open while the job runs"

    ended = time.monotonic()
    await api.ledger.append_many([*facts.job_events[6:], *terminal(job_id, 0, 60)])
    await asyncio.wait_for(reader, 15)
    assert time.monotonic() - ended < 10
    assert [r["data"] for r in received if "data" in r] == [f"line {i}\n" for i in range(5)]
    assert received[-1] == {"end": True, "status": "succeeded"}


async def test_follow_of_a_finished_job_returns_everything_and_closes(api: Api) -> None:
    job_id = await submit(api)
    await api.ledger.append_many(run_facts(job_id, submit=False, lines=3).all())
    await api.sink.catch_up()
    response = await asyncio.wait_for(
        api.client.get(f"/v1/jobs/{job_id}/logs?follow=true", headers=api.auth()), 10
    )
    assert await asyncio.wait_for(response.text(), 10) == "step 0\nstep 1\nstep 2\n"
