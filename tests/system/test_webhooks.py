"""Webhooks end to end: a real job (real services as processes, a real agent, a real busybox
container) and `gridledger webhooks serve` as a process, delivering to a real receiver on
127.0.0.1. Every lifecycle event of the job arrives, once first and in ledger order, signed
so that the ``standardwebhooks`` package verifies it, as the CloudEvent of that event.
Opt-in (``GRIDLEDGER_WEBHOOKS_E2E=1``): it costs about 30 s."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook

from services.ops.specs import ServiceSpec
from services.secretstore import ensure_key
from services.settings import load_settings
from services.webhooks.store import EVENT_NAMES
from tests.system.conftest import System, run_system, sh, system_settings, workdir
from tests.webhooks.receiver import Receiver

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.environ.get("GRIDLEDGER_WEBHOOKS_E2E") != "1",
        reason="every service and an agent as processes, ~30 s: set GRIDLEDGER_WEBHOOKS_E2E=1 "
        "(tests/webhooks/ is the quick check, on the real broker and Postgres)",
    ),
]


@pytest.fixture
def system() -> Iterator[System]:
    """The installation with a secrets key, webhooks allowed to reach loopback."""
    work = workdir()
    settings = system_settings(load_settings(), work, webhooks_allow_loopback=True)
    ensure_key(settings)
    yield from run_system(settings, work)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver serving from a thread of its own (the system test itself is not async)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    found = asyncio.run_coroutine_threadsafe(Receiver().start(), loop).result(10)
    try:
        yield found
    finally:
        asyncio.run_coroutine_threadsafe(found.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_a_real_jobs_events_reach_its_webhook_signed_in_order(
    system: System, receiver: Receiver
) -> None:
    body = json.dumps({"url": receiver.url(), "events": list(EVENT_NAMES)}).encode()
    hook = system.api.post("/v1/webhooks", body)
    webhooks = system.services.start(ServiceSpec("webhooks", ["webhooks", "serve"]))
    system.wait_for(lambda: ready(webhooks.ops_port), 60, "the webhooks service to be ready")
    system.start_agent("node-w", count=1)
    job = system.submit(sh("echo hello from the job"))
    system.wait_terminal([job], 120)

    def delivered() -> list[str]:
        return [r.headers["webhook-id"] for r in list(receiver.received)]

    def every_event_delivered() -> bool:
        return {e["event_id"] for e in system.events(job)} <= set(delivered())

    system.wait_for(every_event_delivered, 60, "every event of the job at its webhook")
    events = system.events(job)
    first = list(dict.fromkeys(delivered()))
    assert first == [e["event_id"] for e in events]  # each once first, in ledger order
    by_id = {e["event_id"]: e for e in events}
    for got in list(receiver.received):
        cloudevent = Webhook(hook["secret"]).verify(got.body, got.headers)
        assert cloudevent["id"] == got.headers["webhook-id"] and cloudevent["subject"] == job
        stored = by_id[cloudevent["id"]]
        assert cloudevent["type"] == f"gridledger.{stored['type']}"
        assert cloudevent["data"]["type"] == stored["type"]
    assert events[-1]["type"] in {"JobSucceeded", "ComputeReleased"}
    listed = system.api.get("/v1/webhooks")["webhooks"][0]
    assert listed["enabled"] and listed["consecutive_failures"] == 0
