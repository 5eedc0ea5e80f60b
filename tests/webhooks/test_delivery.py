"""Webhooks end to end: subscriptions through the API, the webhooks service on the real
broker and Postgres, deliveries to a real receiver on 127.0.0.1, verified with the
``standardwebhooks`` package as a tenant's receiver would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from schemas.events import Event, JobSubmitted
from services.webhooks.service import CONSUMER_NAME, WebhooksBusyError, WebhookService
from services.webhooks.store import EVENT_NAMES
from tests.api.conftest import OTHER_TOKEN
from tests.sink.scenario import SPEC, at, run_facts
from tests.waiting import eventually
from tests.webhooks.conftest import Hooks
from tests.webhooks.receiver import Received

pytestmark = pytest.mark.integration


async def settled(hooks: Hooks) -> None:
    """Wait until the service has queued everything on job-events and delivered its queue."""
    topic = hooks.settings.topic("job-events")
    count = await hooks.ledger.partitions(topic)
    ends = await hooks.ledger.end_offsets(topic, range(count))

    async def done() -> bool:
        stored = {
            r["partition"]: r["next_offset"]
            for r in await hooks.pool.fetch(
                "SELECT partition, next_offset FROM consumer_offsets WHERE consumer = $1",
                CONSUMER_NAME,
            )
        }
        behind = any(stored.get(p, 0) < end for p, end in ends.items())
        return not behind and not await hooks.pool.fetchval("SELECT count(*) FROM webhook_outbox")

    await eventually(done, "the webhooks service to queue and deliver everything")


def verified(secret: str, got: Received) -> dict[str, Any]:
    payload = Webhook(secret).verify(got.body, got.headers)
    assert isinstance(payload, dict)
    return payload


def ids(events: list[Event], types: set[str]) -> set[str]:
    return {e.event_id for e in events if e.type in types}


async def test_a_jobs_events_arrive_signed_as_cloudevents_and_only_at_its_tenant(
    hooks: Hooks,
) -> None:
    wanted = ["JobSubmitted", "JobSucceeded", "JobFailed"]
    mine = await hooks.add(hooks.receiver.url("/dev"), wanted)
    theirs = await hooks.add(hooks.receiver.url("/other"), wanted, OTHER_TOKEN)
    await hooks.start_service()
    job = run_facts("job-wh-mine").job_events
    other = run_facts("job-wh-theirs", tenant="other", exit_code=1).job_events
    # Another tenant's JobSubmitted under my job's id (a forged or colliding record).
    forged = JobSubmitted(
        job_id="job-wh-mine", occurred_at=at(1), producer="api/x", tenant="other", spec=SPEC
    )
    await hooks.ledger.append_many([*job, forged, *other])
    await settled(hooks)

    got = hooks.receiver.bodies("/dev")
    assert {r.headers["webhook-id"] for r in got} == ids(job, set(wanted))
    for received in got:
        event = verified(mine["secret"], received)
        assert event["id"] == received.headers["webhook-id"]
        assert event["specversion"] == "1.0" and event["subject"] == "job-wh-mine"
        assert event["type"] == "gridledger." + event["data"]["type"]
        assert received.headers["content-type"] == "application/cloudevents+json"
        with pytest.raises(WebhookVerificationError):  # another secret: detected
            verified(theirs["secret"], received)
        with pytest.raises(WebhookVerificationError):  # an altered body: detected
            Webhook(mine["secret"]).verify(
                received.body.replace("job-wh", "job-xx"), received.headers
            )
    submitted = next(json.loads(r.body) for r in got if "JobSubmitted" in r.body)
    assert submitted["data"]["tenant"] == "dev" and submitted["id"] == job[0].event_id

    theirs_got = hooks.receiver.bodies("/other")
    assert {r.headers["webhook-id"] for r in theirs_got} == ids(other, set(wanted))
    assert forged.event_id not in {r.headers["webhook-id"] for r in hooks.receiver.received}

    log = await hooks.get(f"/v1/webhooks/{mine['id']}/deliveries")
    assert len(log["deliveries"]) == 2
    assert all(d["ok"] and d["status_code"] == 200 and d["error"] == "" for d in log["deliveries"])
    # Nothing of mine is the other tenant's to see or touch.
    listed = await hooks.get("/v1/webhooks", OTHER_TOKEN)
    assert [w["id"] for w in listed["webhooks"]] == [theirs["id"]]
    assert "secret" not in json.dumps(listed)
    for method, tail in (("GET", "/deliveries"), ("DELETE", ""), ("POST", "/rotate")):
        answer = await hooks.client.request(
            method, f"/v1/webhooks/{mine['id']}{tail}", headers=hooks.auth(OTHER_TOKEN)
        )
        assert answer.status == 404, (method, tail)


async def test_a_receiver_killed_mid_stream_gets_every_event_with_stable_ids(
    hooks: Hooks,
) -> None:
    hook = await hooks.add(hooks.receiver.url(), list(EVENT_NAMES))
    await hooks.start_service()
    first, second, third = (run_facts(f"job-wh-{n}").job_events for n in (1, 2, 3))
    await hooks.ledger.append_many(first)
    await eventually(lambda: len(hooks.receiver.received) >= 3, "the first deliveries")

    hooks.receiver.hanging = {"/hook"}  # the next request stays open ...
    in_flight = len(hooks.receiver.received) + 1
    await hooks.ledger.append_many(second)  # (there is a next one even if the first are done)
    await eventually(lambda: len(hooks.receiver.received) >= in_flight, "a request in flight")
    await hooks.receiver.stop()  # ... and the receiver dies with it unanswered

    async def refused() -> bool:
        log = (await hooks.get(f"/v1/webhooks/{hook['id']}/deliveries"))["deliveries"]
        return sum(not d["ok"] for d in log) >= 3

    await eventually(refused, "deliveries failing while the receiver is down")
    await hooks.start_service()  # the service restarts too: its queue is in Postgres
    hooks.receiver.hanging = set()
    await hooks.receiver.start()  # back, on the same port
    await hooks.ledger.append_many(third)
    await settled(hooks)

    by_id: dict[str, list[Received]] = {}
    for received in hooks.receiver.received:
        by_id.setdefault(received.headers["webhook-id"], []).append(received)
    assert set(by_id) == ids([*first, *second, *third], set(EVENT_NAMES))
    repeated = {i: got for i, got in by_id.items() if len(got) > 1}
    assert repeated, "the request that was in flight is delivered again"
    for copies in by_id.values():  # every copy verifies and is the same event
        assert len({json.dumps(verified(hook["secret"], c), sort_keys=True) for c in copies}) == 1
    listed = (await hooks.get("/v1/webhooks"))["webhooks"][0]
    assert listed["enabled"] and listed["pending"] == 0 and listed["consecutive_failures"] == 0


async def test_a_hanging_receiver_holds_up_only_its_own_webhook_and_a_bounded_queue(
    hooks: Hooks,
) -> None:
    hooks.receiver.hanging = {"/slow"}
    slow = await hooks.add(hooks.receiver.url("/slow"), ["JobSubmitted"], OTHER_TOKEN)
    await hooks.add(hooks.receiver.url("/dev"), ["JobSubmitted", "JobSucceeded"])
    await hooks.start_service(webhooks_timeout_s=60, webhooks_max_pending=2)
    theirs = [run_facts(f"job-wh-slow-{n}", tenant="other").job_events[0] for n in range(3)]
    mine = run_facts("job-wh-fast").job_events
    await hooks.ledger.append(theirs[0])
    await eventually(lambda: hooks.receiver.bodies("/slow"), "the other's first request")
    await hooks.ledger.append_many([*theirs[1:], *mine])

    expected = ids(mine, {"JobSubmitted", "JobSucceeded"})
    await eventually(
        lambda: {r.headers["webhook-id"] for r in hooks.receiver.bodies("/dev")} == expected,
        "my deliveries while the other tenant's receiver hangs",
    )
    assert len(hooks.receiver.bodies("/slow")) == 1  # its first request, still open
    still = await hooks.get(f"/v1/webhooks/{slow['id']}/deliveries", OTHER_TOKEN)
    assert still["deliveries"] == []

    # Its queue is bounded: the third event would pass webhooks_max_pending (2).
    async def bounded() -> dict[str, Any] | None:
        (found,) = (await hooks.get("/v1/webhooks", OTHER_TOKEN))["webhooks"]
        return None if found["enabled"] else dict(found)

    listed = await eventually(bounded, "the other's webhook disabled by its queue's bound")
    assert listed["pending"] == 2
    assert "2 events were waiting for it" in listed["disabled_reason"]


async def test_a_failing_subscription_is_disabled_with_its_reason_and_enabled_again(
    hooks: Hooks,
) -> None:
    hooks.receiver.status = 500
    hook = await hooks.add(hooks.receiver.url(), ["JobSubmitted", "JobSucceeded"])
    await hooks.start_service(webhooks_disable_after=3)
    job = run_facts("job-wh-failing").job_events
    await hooks.ledger.append_many(job)

    async def disabled() -> dict[str, Any] | None:
        found = (await hooks.get("/v1/webhooks"))["webhooks"][0]
        return None if found["enabled"] else dict(found)

    found = await eventually(disabled, "the webhook to be disabled")
    assert "3 deliveries in a row failed" in found["disabled_reason"]
    assert "HTTP 500: broken" in found["disabled_reason"]
    assert f"gridledger webhooks enable {hook['id']}" in found["disabled_reason"]
    assert found["pending"] == 2 and len(hooks.receiver.received) == 3
    log = (await hooks.get(f"/v1/webhooks/{hook['id']}/deliveries"))["deliveries"]
    assert [(d["attempt"], d["status_code"], d["ok"]) for d in log] == [
        (3, 500, False),
        (2, 500, False),
        (1, 500, False),
    ]
    assert {d["event_id"] for d in log} == {job[0].event_id}  # in order: the first, retried

    hooks.receiver.status = 200
    enabled = await hooks.client.post(f"/v1/webhooks/{hook['id']}/enable", headers=hooks.auth())
    assert enabled.status == 200
    await settled(hooks)
    delivered = {r.headers["webhook-id"] for r in hooks.receiver.received}
    assert delivered == ids(job, {"JobSubmitted", "JobSucceeded"})


async def test_a_rotated_secret_signs_beside_the_previous_one_and_one_service_runs(
    hooks: Hooks,
) -> None:
    hook = await hooks.add(hooks.receiver.url(), ["JobSubmitted"])
    rotated = await hooks.client.post(f"/v1/webhooks/{hook['id']}/rotate", headers=hooks.auth())
    assert rotated.status == 200
    new = (await rotated.json())["secret"]
    assert new != hook["secret"] and new.startswith("whsec_")
    running = await hooks.start_service()
    await eventually(lambda: running.consumer, "the service to run (holding the lock)")
    second = WebhookService(
        running.settings.model_copy(update={"sink_lock_wait_s": 0}), hooks.ledger, hooks.pool,
        running.key,
    )  # fmt: skip
    with pytest.raises(WebhooksBusyError, match="run one per schema"):
        await second.run()  # it would deliver every event twice
    await hooks.ledger.append_many(run_facts("job-wh-rotated").job_events[:1])
    await settled(hooks)
    (got,) = hooks.receiver.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    assert verified(new, got) == verified(hook["secret"], got)


REFUSED: list[tuple[dict[str, Any], str, str]] = [
    ({"url": "http://169.254.169.254/latest/meta-data/", "events": ["JobFailed"]}, "url",
     "not a public address"),
    ({"url": "http://10.1.2.3/hook", "events": ["JobFailed"]}, "url", "not a public"),
    ({"url": "https://a:b@example.com/", "events": ["JobFailed"]}, "url", "credentials"),
    ({"url": "gopher://example.com/", "events": ["JobFailed"]}, "url", "scheme"),
    ({"url": "http://127.0.0.1:1/", "events": ["LogChunk"]}, "events", "'LogChunk'"),
    ({"url": "http://127.0.0.1:1/", "events": []}, "events", "no event type"),
    ({"url": "http://127.0.0.1:1/"}, "events", "required"),
]  # fmt: skip


async def test_a_webhook_the_rules_refuse_is_a_422_naming_the_field(hooks: Hooks) -> None:
    for body, field, fragment in REFUSED:
        answer = await hooks.client.post("/v1/webhooks", json=body, headers=hooks.auth())
        assert answer.status == 422 and answer.content_type == "application/problem+json"
        problem = (await answer.json())["problems"][0]
        assert problem["field"] == field and fragment in problem["problem"], (body, problem)
    assert not await hooks.pool.fetchval("SELECT count(*) FROM webhook_subscriptions")
