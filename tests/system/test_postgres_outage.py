"""Postgres SIGKILLed and restarted under the whole running set: nothing exits, nothing is lost.

sink, api, scheduler, processors and one Docker agent run as real processes on a
private stack. Postgres's postmaster is killed while a job runs; a submission
during the outage is accepted (the ledger does not need Postgres), even by an
API restarted in the middle of the outage; after the restart the sink catches
up by itself, every job shows its true status, and ``replay --verify`` finds the
tables equal to the ledger. An SSE client of ``GET /v1/events`` rides it all out
(its stream ends with the outage, the API restarts): resuming with
``Last-Event-ID`` it receives every event of every job once.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping

import pytest

from services.ops.specs import LOCAL_AGENT_ENV, ServiceSpec
from tests.sse import Follower
from tests.system.outage_stack import SPEC_OK, PrivateStack, Reply, write_inventory

pytestmark = pytest.mark.integration

SPEC_SPANNING = {
    **SPEC_OK,
    "name": "spans-the-outage",
    "command": ["sh", "-c", "echo started; for i in $(seq 1 12); do sleep 1; done; echo done"],
}


@pytest.fixture(scope="module")
def stack() -> Iterator[PrivateStack]:
    stack = PrivateStack().up()
    try:
        inventory = write_inventory(stack, "pg-node")
        for spec in (
            ServiceSpec("sink", ["sink"]),
            ServiceSpec("api", ["api"]),
            ServiceSpec("scheduler", ["scheduler"]),
            ServiceSpec("processors", ["processors"]),
            ServiceSpec(
                "agent",
                ["agent", "--node-id", "pg-node", "--inventory", str(inventory)],
                LOCAL_AGENT_ENV,
            ),
        ):
            stack.services.start(spec)
        stack.services.wait_for_api(120)
        yield stack
    finally:
        stack.down()


def submit(stack: PrivateStack, spec: Mapping[str, object]) -> str:
    reply = stack.call("POST", "/v1/jobs", spec)
    assert reply.status == 202, reply.body
    return str(reply.body["job_id"])


def test_a_postgres_kill_and_restart_loses_nothing_and_stops_no_service(
    stack: PrivateStack,
) -> None:
    def node_ready() -> bool:
        reply = stack.call("GET", "/v1/nodes")
        return reply.status == 200 and any(
            n["node_id"] == "pg-node" and n["status"] == "ready" for n in reply.body["nodes"]
        )

    stack.wait(node_ready, 120, "the agent to register")
    follower = Follower(f"http://127.0.0.1:{stack.settings.api_port}", stack.token).start()
    assert follower.connected.wait(60), "the event stream did not open"
    before = submit(stack, SPEC_OK)
    stack.wait(lambda: stack.status_of(before) == "succeeded", 180, f"{before} to succeed")
    spanning = submit(stack, SPEC_SPANNING)
    stack.wait(lambda: stack.status_of(spanning) == "running", 120, f"{spanning} to run")

    stack.kill_postgres()
    during = stack.call("POST", "/v1/jobs", SPEC_OK)
    # Accepted: JobSubmitted is on the ledger, which needs no Postgres.
    assert during.status == 202, during.body
    assert during.body["recorded"] is False
    read = stack.call("GET", f"/v1/jobs/{spanning}")
    assert read.status == 503 and read.headers["Content-Type"].startswith(
        "application/problem+json"
    )
    assert read.body["error"] == "read_models_unavailable" and int(read.headers["Retry-After"]) > 0
    stack.wait(
        lambda: "is unreachable" in stack.log_of("sink"), 120, "the sink to notice the outage"
    )
    stack.services.check_alive()  # the sink (and everyone else) rides it out

    # An API (re)started in the middle of the outage takes submissions too: it needs
    # only the broker to serve.
    stack.services.kill("api")
    stack.services.start(ServiceSpec("api", ["api"]))

    def accepted_by_the_new_api() -> Reply | None:
        try:
            reply = stack.call("POST", "/v1/jobs", SPEC_OK)
        except OSError:
            return None  # not listening yet
        assert reply.status == 202, reply.body
        return reply

    restarted = stack.wait(accepted_by_the_new_api, 120, "the restarted API to accept a job")

    stack.start_postgres()
    for job_id in (spanning, during.body["job_id"], restarted.body["job_id"]):
        stack.wait(
            lambda job_id=job_id: stack.status_of(job_id) == "succeeded",  # type: ignore[misc]
            240,
            f"{job_id} to show succeeded after the restart",
        )
    assert stack.status_of(before) == "succeeded"
    stack.services.check_alive()

    follower.check_every_event_once(
        [before, spanning, during.body["job_id"], restarted.body["job_id"]],
        lambda j: [e["event_id"] for e in stack.call("GET", f"/v1/jobs/{j}/events").body["events"]],
    )
    assert follower.connections >= 2

    sink_log = stack.log_of("sink")
    assert sink_log.count("Postgres at") >= 2, sink_log[-3000:]
    assert sink_log.count("is unreachable") == 1, sink_log[-3000:]
    assert sink_log.count("is back after") == 1, sink_log[-3000:]
    assert "Traceback" not in sink_log, sink_log[-3000:]

    verify = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "replay", "--verify", "--workers", "1"],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
