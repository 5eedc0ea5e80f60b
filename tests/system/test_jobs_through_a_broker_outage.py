"""The broker SIGKILLed for 25 s while jobs run: every job still ends as it really did.

A PRIVATE stack (``tests.system.outage_stack.PrivateStack``: own home, free
ports), its broker SIGKILLed and restarted. Real sink, api, scheduler, processors
and one real agent process on Docker. An SSE client of ``GET /v1/events`` follows
the jobs, is cut off while the broker is away and resumes with ``Last-Event-ID``
after its restart: it receives every event of every job once, no gap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.sse import Follower
from tests.system.conftest import System, bound_s, run_system, sh, system_settings, workdir
from tests.system.outage_stack import PrivateStack

pytestmark = pytest.mark.integration

OUTAGE_S = 25.0


@pytest.fixture
def stack() -> Iterator[PrivateStack]:
    stack = PrivateStack().up()
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture
def outage_system(stack: PrivateStack) -> Iterator[System]:
    work = workdir()
    yield from run_system(system_settings(stack.settings, work), work)


def test_jobs_running_through_a_broker_outage_end_with_their_true_status(
    stack: PrivateStack,
    outage_system: System,
) -> None:
    system = outage_system
    system.start_agent("node-1", provider="acme", count=4)
    client = system.api
    follower = Follower(client.base, client.token).start()
    assert follower.connected.wait(60), "the event stream did not open"
    limits = {"queue_timeout_s": 120, "max_runtime_s": 120}
    specs = {
        exit_code: sh(f"echo working; sleep 8; echo done; exit {exit_code}", limits=limits)
        for exit_code in (0, 1)
    }
    jobs = {system.submit(specs[code]): code for code in (0, 0, 1, 1)}
    system.wait_status(list(jobs), {"running"}, 120)

    stack.kill_kafka()
    follower.pause()  # the SSE client is cut off for the outage
    time.sleep(OUTAGE_S)  # the fault itself: the processes finish while nobody can hear
    began = time.monotonic()
    stack.start_kafka()
    restarted_in = time.monotonic() - began
    follower.resume()  # with Last-Event-ID
    system.wait_terminal(list(jobs), 240)  # check_alive on every poll: no service died

    # The event stream: every stored event of every job, once, in order, across the cut.
    follower.check_every_event_once(list(jobs), lambda j: [e["event_id"] for e in system.events(j)])
    assert follower.connections >= 2

    for job_id, code in jobs.items():
        doc = system.job(job_id)
        types = [e["type"] for e in system.events(job_id)]
        assert "AttemptLost" not in types, (job_id, types)
        assert len(doc["attempts"]) == 1, (job_id, types)
        if code == 0:
            assert doc["status"] == "succeeded", (job_id, doc.get("failure"), types)
        else:
            assert doc["status"] == "failed", (job_id, types)
            assert doc["failure"]["failure_class"] == "user_process_error"
            assert doc["failure"]["attribution"] == "user"
        bound = bound_s(specs[code], system.settings, deaf_s=OUTAGE_S + restarted_in)
        record = system.check_invariants(job_id, bound)
        assert record["billable_gpu_seconds"] > 0 and record["credited_gpu_seconds"] == 0

    # The processors rode it out, and said so once each way (not a traceback per retry).
    said = system.log("processors")
    assert said.count("is unreachable") == 1, said[-3000:]
    assert said.count("is back after") >= 1
    # Deaf while the broker was away (and maybe again briefly while the group rebalanced
    # after it): said on each change, never per tick.
    deaf, hearing = said.count("watchdog cannot hear"), said.count("watchdog hears heartbeats")
    assert 1 <= deaf == hearing <= 3, said[-3000:]
    assert "stopping this worker" not in said
