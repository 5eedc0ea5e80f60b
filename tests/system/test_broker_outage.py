"""The broker SIGKILLed while the API runs: 503 problem+json, nothing recorded, then 202 again.

The API, the sink, the scheduler and a Docker agent run as real processes on a
private stack. While the broker is dead a submission (and a cancel) must fail
fast and cleanly (503, ``application/problem+json``, ``Retry-After``) and leave
nothing behind: after the restart the same Idempotency-Key is a first
submission (202, not 200) and the ledger holds exactly one JobSubmitted for it.
Every service is still up, the scheduler places the new job on the agent's node
and the sink records it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from schemas.events import AttemptScheduled, CancelRequested, Event, JobSubmitted
from services.api.idempotency import id_key, job_id_for
from services.ledger import Ledger, compose
from services.ops.specs import LOCAL_AGENT_ENV, ServiceSpec
from tests.system.outage_stack import SPEC_OK, PrivateStack, Reply, write_inventory

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[PrivateStack]:
    stack = PrivateStack().up()
    try:
        inventory = write_inventory(stack, "kafka-node")
        for spec in (
            ServiceSpec("sink", ["sink"]),
            ServiceSpec("api", ["api"]),
            ServiceSpec("scheduler", ["scheduler"]),
            ServiceSpec(
                "agent",
                ["agent", "--node-id", "kafka-node", "--inventory", str(inventory)],
                LOCAL_AGENT_ENV,
            ),
        ):
            stack.services.start(spec)
        stack.services.wait_for_api(120)
        yield stack
    finally:
        stack.down()


def post(stack: PrivateStack, key: str) -> Reply:
    return stack.call("POST", "/v1/jobs", SPEC_OK, {"Idempotency-Key": key})


def history(stack: PrivateStack, job_id: str) -> list[Event]:
    async def read() -> list[Event]:
        async with Ledger(stack.settings, "broker-outage-test") as ledger:
            return await compose.history(ledger, job_id)

    return asyncio.run(read())


def submissions(stack: PrivateStack, job_id: str) -> list[JobSubmitted]:
    return [e for e in history(stack, job_id) if isinstance(e, JobSubmitted)]


def assert_unavailable(reply: Reply) -> None:
    assert reply.status == 503, reply.body
    assert reply.headers["Content-Type"].startswith("application/problem+json")
    assert int(reply.headers["Retry-After"]) > 0
    assert reply.body["error"] == "ledger_unavailable"
    assert "nothing was recorded" in reply.body["detail"]


def test_a_dead_broker_is_a_clean_503_and_a_restarted_one_takes_submissions(
    stack: PrivateStack,
) -> None:
    first = post(stack, "before")
    assert first.status == 202
    before = first.body["job_id"]
    stack.wait(lambda: stack.status_of(before), 60, f"{before} to be recorded")

    stack.kill_kafka()
    assert_unavailable(post(stack, "during"))
    # A cancel is a write too: the same clean refusal.
    assert_unavailable(stack.call("POST", f"/v1/jobs/{before}/cancel", {"reason": "test"}))
    stack.services.check_alive()

    stack.start_kafka()

    def accepted() -> bool:
        reply = post(stack, "after")
        if reply.status != 202:
            assert_unavailable(reply)  # until the API's producer is reconnected
        return reply.status == 202

    stack.wait(accepted, 120, "a submission to be accepted after the broker's restart")
    stack.services.check_alive()

    # The failed submission left nothing: its key is new to the API and to the ledger.
    again = post(stack, "during")
    assert again.status == 202, again.body
    secret = id_key(stack.settings)  # the key file the stack's API made in its home
    during = job_id_for(secret, "dev", "during")
    assert again.body["job_id"] == during
    assert len(submissions(stack, during)) == 1
    assert len(submissions(stack, job_id_for(secret, "dev", "after"))) == 1
    assert not [e for e in history(stack, before) if isinstance(e, CancelRequested)]

    # The scheduler and the agent rode the outage out too: a new job is placed on the node.
    def placed() -> bool:
        return any(
            isinstance(e, AttemptScheduled) and e.node_id == "kafka-node"
            for e in history(stack, again.body["job_id"])
        )

    stack.wait(placed, 120, "the scheduler to place a job submitted after the restart")
    # And the sink: what was appended after the restart is in the read models.
    stack.wait(lambda: stack.status_of(again.body["job_id"]), 120, "the sink to record the new job")

    api_log = stack.log_of("api")
    assert api_log.count("is unreachable") == 1, api_log[-3000:]
    assert "Traceback" not in api_log, api_log[-3000:]
