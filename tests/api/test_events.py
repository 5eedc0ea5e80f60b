"""GET /v1/events: the tenant's job events as SSE, each once, resumable after any id.

Real broker, sink and Postgres (the api fixture); the stream is read over HTTP as a
client would, and what it shows is compared with the job's stored history.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientResponse

from services.api.deps import EVENTS
from tests.api.conftest import OTHER_TOKEN, Api
from tests.sink.scenario import run_facts
from tests.sse import Frame, Parser
from tests.waiting import eventually

pytestmark = pytest.mark.integration


async def frames(response: ClientResponse) -> AsyncIterator[Frame]:
    """The response's SSE messages as they arrive."""
    parser = Parser()
    async for raw in response.content:
        frame = parser.feed(raw.decode())
        if frame is not None:
            yield frame


async def read_events(response: ClientResponse, until: Any, timeout: float = 30) -> list[Frame]:
    """Events (frames with data) until ``until(events)`` holds; the stream stays open."""
    got: list[Frame] = []

    async def read() -> None:
        async for frame in frames(response):
            if frame.data is not None:
                got.append(frame)
                if until(got):
                    return

    await asyncio.wait_for(read(), timeout)
    return got


def new_job() -> str:
    return f"job-{uuid.uuid4().hex}"


def terminal_of(job_id: str) -> Any:
    return lambda got: any(
        f.data and f.data["subject"] == job_id and f.data["type"] == "gridledger.JobSucceeded"
        for f in got
    )


async def stored_ids(api: Api, job_id: str) -> list[str]:
    response = await api.client.get(f"/v1/jobs/{job_id}/events", headers=api.auth())
    return [e["event_id"] for e in (await response.json())["events"]]


def tune(api: Api, **settings: Any) -> None:
    hub = api.app[EVENTS]
    hub.settings = hub.settings.model_copy(update=settings)


async def test_a_stream_shows_only_the_tenants_events_once_and_resumes_after_its_last_id(
    api: Api,
) -> None:
    stream = await api.client.get("/v1/events", headers=api.auth())
    assert stream.status == 200
    assert stream.headers["Content-Type"] == "text/event-stream"
    mine, theirs = new_job(), new_job()
    facts = run_facts(mine).job_events
    await api.ledger.append_many([*facts[:4], *run_facts(theirs, tenant="other").job_events])
    first = await read_events(stream, lambda got: len(got) == 4)
    stream.close()  # dropped mid-job

    await api.ledger.append_many(facts[4:])
    resumed = await api.client.get(
        "/v1/events", headers={**api.auth(), "Last-Event-ID": str(first[-1].id)}
    )
    assert resumed.status == 200
    rest = await read_events(resumed, terminal_of(mine))
    resumed.close()

    shown = [f.data for f in [*first, *rest] if f.data]
    # Every event of the job, once, in order; nothing of the other tenant.
    assert [d["id"] for d in shown] == await stored_ids(api, mine)
    assert {d["subject"] for d in shown} == {mine}
    ids = [int(str(f.id)) for f in [*first, *rest]]
    assert ids == sorted(set(ids))
    # CloudEvents 1.0, the attributes the Kafka records carry, the event as data.
    submitted = shown[0]
    assert submitted["specversion"] == "1.0"
    assert submitted["type"] == "gridledger.JobSubmitted"
    assert submitted["source"] == "/gridledger/api/test"
    assert submitted["datacontenttype"] == "application/json"
    assert submitted["time"].endswith("Z")
    assert submitted["data"]["event_id"] == submitted["id"]
    assert submitted["data"]["tenant"] == "dev"


async def test_filters_since_and_refusals_name_the_field(api: Api) -> None:
    job_id = new_job()
    await api.ledger.append_many(run_facts(job_id).job_events)
    await api.sink.catch_up()
    stream = await api.client.get(
        f"/v1/events?since=0&job={job_id}&type=JobSubmitted,JobSucceeded", headers=api.auth()
    )
    got = await read_events(stream, terminal_of(job_id))
    stream.close()
    assert [f.data["type"] for f in got if f.data] == [
        "gridledger.JobSubmitted",
        "gridledger.JobSucceeded",
    ]

    bad_type = await api.client.get("/v1/events?type=JobSubmitted,Nope", headers=api.auth())
    assert bad_type.status == 422
    assert bad_type.headers["Content-Type"].startswith("application/problem+json")
    problem = (await bad_type.json())["problems"][0]
    assert problem["field"] == "type" and "'Nope'" in problem["problem"]

    bad_id = await api.client.get("/v1/events", headers={**api.auth(), "Last-Event-ID": "x1"})
    assert bad_id.status == 400
    assert (await bad_id.json())["problems"][0]["field"] == "Last-Event-ID"

    ahead = await api.client.get("/v1/events?since=999999999999", headers=api.auth())
    assert ahead.status == 400
    problem = (await ahead.json())["problems"][0]
    assert problem["field"] == "since" and "since=0" in problem["fix"]

    # Another tenant's job is as unknown as one that does not exist.
    foreign = await api.client.get(f"/v1/events?job={job_id}", headers=api.auth(OTHER_TOKEN))
    assert foreign.status == 404


async def test_a_tenant_past_its_streams_gets_429_and_others_are_served(api: Api) -> None:
    tune(api, events_streams_per_tenant=2, events_heartbeat_s=0.2)
    held = [await api.client.get("/v1/events", headers=api.auth()) for _ in range(2)]
    assert [r.status for r in held] == [200, 200]
    refused = await api.client.get("/v1/events", headers=api.auth())
    assert refused.status == 429
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    assert int(refused.headers["Retry-After"]) > 0
    body = await refused.json()
    assert body["error"] == "too_many_streams"
    assert body["setting"] == "events_streams_per_tenant" and body["limit"] == 2
    other = await api.client.get("/v1/events", headers=api.auth(OTHER_TOKEN))
    assert other.status == 200
    other.close()

    # A quiet stream gets heartbeats; one the client left frees its place.
    async for frame in frames(held[0]):
        if "keepalive" in frame.comments:
            break
    held[0].close()

    async def place_again() -> bool:
        again = await api.client.get("/v1/events", headers=api.auth())
        again.close()
        return again.status == 200

    await eventually(place_again, "the place of the stream the client left to be free", 30, 0.1)
    held[1].close()


async def test_a_flood_of_streams_gets_429_past_the_tenants_bound_and_the_api_answers(
    api: Api,
) -> None:
    """The default bound, against a tenant that opens streams in a burst (100 at once)."""
    bound = api.settings.events_streams_per_tenant
    replies = await asyncio.gather(
        *(api.client.get("/v1/events", headers=api.auth()) for _ in range(100))
    )
    try:
        statuses = sorted(r.status for r in replies)
        assert statuses == [200] * bound + [429] * (100 - bound)
        assert api.app[EVENTS].open_streams == bound
        # Everything else still answers, for this tenant too.
        listing = await api.client.get("/v1/jobs", headers=api.auth())
        assert listing.status == 200
    finally:
        for reply in replies:
            reply.close()


async def test_a_stream_ends_after_its_time_and_the_client_resumes(api: Api) -> None:
    tune(api, events_stream_max_s=0.5)
    stream = await api.client.get("/v1/events?since=0", headers=api.auth())
    await asyncio.wait_for(stream.read(), 30)  # the server ends it
    assert stream.status == 200
