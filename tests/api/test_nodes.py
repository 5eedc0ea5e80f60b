"""/v1/nodes as a tenant sees it: shared capacity, only the tenant's own attempts."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import Event, JobSubmitted, NodeHeartbeat
from tests.api.conftest import OTHER_TOKEN, Api
from tests.golden.golden import HERE, load
from tests.sink.scenario import T0, node_facts, run_facts

pytestmark = pytest.mark.integration


def shifted(events: list[Event], to: datetime) -> list[Event]:
    """The same facts, moved in time so the first happens at ``to``."""
    first = events[0].occurred_at
    return [e.model_copy(update={"occurred_at": to + (e.occurred_at - first)}) for e in events]


def lost_job(job_id: str) -> list[Event]:
    """A dev job whose attempt 1 was lost with node-a, retried and finished on node-b."""
    events, _, _ = load(HERE / "node_lost_then_resume.json")
    out = []
    for e in events:
        update: dict[str, object] = {"job_id": job_id, "event_id": f"{job_id}-{e.event_id}"}
        if isinstance(e, JobSubmitted):
            update["tenant"] = "dev"
        out.append(e.model_copy(update=update))
    return out


async def test_a_tenant_sees_every_node_but_only_its_own_attempts(api: Api) -> None:
    now = datetime.now(UTC)
    mine, theirs = f"job-{uuid.uuid4().hex[:12]}", f"job-{uuid.uuid4().hex[:12]}"
    running_mine = run_facts(mine, node="node-a", finish=False, exited=False, tenant="dev")
    running_theirs = run_facts(theirs, node="node-a", finish=False, exited=False, tenant="other")
    beat = NodeHeartbeat(
        node_id="node-a",
        occurred_at=now,
        producer="agent/node-a",
        seq=5,
        free_gpu_indices=[],
        running_attempts=[f"{mine}/1", f"{theirs}/1"],
    )
    await api.ledger.append_many(
        [
            *shifted(node_facts("node-a"), now - timedelta(seconds=5)),
            *running_mine.job_events,
            *running_theirs.job_events,
            beat,
        ]
    )
    await api.sink.catch_up()

    for token, own, other in ((None, mine, theirs), (OTHER_TOKEN, theirs, mine)):
        response = await api.client.get("/v1/nodes", headers=api.auth(token or "tok-dev"))
        text = await response.text()
        (node,) = json.loads(text)["nodes"]
        assert node["status"] == "ready"
        assert [(a["job_id"], a["attempt"], a["status"]) for a in node["your_attempts"]] == [
            (own, 1, "running")
        ]
        assert other not in text, "another tenant's attempt must not be named"
        assert "running_attempts" not in node and "gpu_usage" not in node
        assert node["busy_gpu_count"] == 1 and node["free_gpu_indices"] == []


async def test_a_node_that_went_silent_does_not_count_the_attempt_it_lost(api: Api) -> None:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    history = lost_job(job_id)
    old = T0 - timedelta(days=1)
    await api.ledger.append_many(
        [
            *shifted(node_facts("node-a"), old),
            NodeHeartbeat(
                node_id="node-a",
                occurred_at=old + timedelta(seconds=20),
                producer="agent/node-a",
                seq=9,
                free_gpu_indices=[],
                running_attempts=[f"{job_id}/1"],
            ),
            *history,
        ]
    )
    await api.sink.catch_up()
    job = await (await api.client.get(f"/v1/jobs/{job_id}", headers=api.auth())).json()
    assert job["attempts"][0]["status"] == "lost" and job["status"] == "succeeded"

    nodes = await (await api.client.get("/v1/nodes", headers=api.auth())).json()
    node = next(n for n in nodes["nodes"] if n["node_id"] == "node-a")
    assert node["status"] == "silent"
    assert node["your_attempts"] == [], "a lost attempt is not running there"
    assert node["free_gpu_indices"] == [], "nothing can be placed on a silent node"
