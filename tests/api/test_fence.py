"""The leader fence on the API's single-job reads that fold from the ledger.

On the FakeLedger (the API takes the ledger port) and the real Postgres: a deposed
scheduler's late decision is on the ledger but never in the job as ``?as_of=`` folds
it, as ``/explain?as_of=`` tells it, or as ``/export`` replays it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from schemas.events import AttemptScheduled, JobQueued, LeaderElected
from services.clock import utcnow
from services.ledger import partition_for
from services.replay.offline import replay_document
from services.scheduler.leader import route_key
from tests.api.conftest import Api
from tests.sink.scenario import SPEC, submitted
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def placed(job_id: str, node: str, epoch: int, cause: Any) -> AttemptScheduled:
    return AttemptScheduled.derived(
        cause,
        f"scheduler/epoch-{epoch}",
        attempt=1,
        node_id=node,
        gpu_count=1,
        dispatch_deadline=utcnow() + timedelta(minutes=1),
        spec=SPEC,
        tenant="dev",
        leader_epoch=epoch,
    )


async def test_a_deposed_leaders_late_placement_never_shows_in_a_jobs_reads(
    fake_api: Api,
) -> None:
    api, ledger = fake_api, fake_api.ledger
    job = submitted(f"job-fence-{utcnow().timestamp():.0f}")
    topic = ledger.settings.topic("job-events")
    count = await ledger.partitions(topic)
    partition = partition_for(job.job_id, count)
    queued = JobQueued.derived(
        job, "scheduler", attempt=0, queue_deadline=utcnow() + timedelta(hours=1), leader_epoch=3
    )
    marker = LeaderElected(
        occurred_at=utcnow(),
        producer="scheduler/epoch-5",
        candidate="scheduler/epoch-5",
        epoch=5,
        partition=partition,
        route=route_key(partition, count),
    )
    # Epoch 3 queued the job; epoch 5 took the lead; the deposed epoch 3, not knowing,
    # still places it on node-zombie after the marker; epoch 5 places it on node-b.
    stale = placed(job.job_id, "node-zombie", 3, queued)
    await ledger.append_many([job, queued, marker, stale])
    await ledger.append(placed(job.job_id, "node-b", 5, queued))

    async def get(path: str) -> Any:
        response = await api.client.get(path, headers=api.auth())
        assert response.status == 200, await response.text()
        return await response.json()

    url = f"/v1/jobs/{job.job_id}"

    async def scheduled() -> Any:
        response = await api.client.get(url, headers=api.auth())
        found = await response.json() if response.status == 200 else None
        return found if found and found["status"] == "scheduled" else None

    live = await eventually(scheduled, what="the sink folding the job to scheduled")
    now = utcnow().isoformat().replace("+00:00", "Z")
    folded = await get(f"{url}?as_of={now}")
    for document in (live, folded):
        assert [a["node_id"] for a in document["attempts"]] == ["node-b"]
    explained = await get(f"{url}/explain?as_of={now}")
    assert "node-b" in explained["text"] and "node-zombie" not in explained["text"]

    export = await get(f"{url}/export")
    (records,) = [j["records"] for j in export["jobs"]]
    fenced = [r["payload"]["node_id"] for r in records if r.get("fenced")]
    assert fenced == ["node-zombie"], "on the ledger, listed, marked as fenced"
    replayed = replay_document(export)
    assert replayed.ok, replayed.lines()
    assert [j.status for j in replayed.jobs] == ["scheduled"]
