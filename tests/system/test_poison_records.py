"""Poison records on every topic each service reads: every service stays up, parks each one
with its reason and counts it, and another tenant's job runs as if nothing happened.

Real sink, api, scheduler and processors processes and a real agent on Docker. The
records are written to the topics directly, as an old or foreign producer would: bytes
that are no gridledger record on each topic, and a validly encoded submission whose name
carries a NUL (the API refuses one now; a record written before it did must not stop the
sink). ``replay --verify`` agrees with the live tables afterwards.
"""

from __future__ import annotations

import asyncio
import urllib.request

import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from schemas.events import JobSubmitted
from schemas.spec import JobSpec
from schemas.topics import NODE_KEYED_TOPICS, STORED_TOPICS
from schemas.views import TERMINAL_STATUSES
from services.clock import utcnow
from services.ledger import Ledger
from services.ledger.client import DLQ_CONSUMER, DLQ_REASON, DLQ_SOURCE_TOPIC
from services.replay import verify
from tests.system.conftest import BUSYBOX, System, sh

pytestmark = pytest.mark.integration

GARBAGE = b"\xc3\x01 not a gridledger record"
NODE = "node-p"
READS = {
    "sink": STORED_TOPICS,
    "processors": ("job-events", "heartbeats", "meter-ticks"),
    "scheduler": ("job-events", "node-events"),
    f"agent-{NODE}": ("node-commands",),
}
"""Service -> the topics it consumes (and so parks a poison record of)."""


async def inject(system: System) -> str:
    settings = system.settings
    async with Ledger(settings, "test-poison") as ledger:
        for suffix in sorted({s for topics in READS.values() for s in topics}):
            key = NODE if suffix in NODE_KEYED_TOPICS else "job-poison"
            await ledger.send_raw(settings.topic(suffix), key.encode(), GARBAGE, [])
        spec = JobSpec(image=BUSYBOX, command=["true"], resources={"gpus": 1, "memory_gb": 0.25})
        nul = JobSubmitted(
            job_id="job-nul", occurred_at=utcnow(), producer="api/old", tenant="other", spec=spec
        )
        # model_copy does not validate: the record as an older API wrote it.
        await ledger.append(
            nul.model_copy(update={"spec": spec.model_copy(update={"name": "a\x00b"})})
        )
        return nul.job_id


async def stored(system: System, job_id: str) -> tuple[str, str]:
    """(name, status) of the job in the read models, ("", "") before the sink has it."""
    conn = await asyncpg.connect(system.settings.dsn)
    try:
        row = await conn.fetchrow(
            f"SELECT name, status FROM {system.settings.pg_schema}.jobs WHERE job_id = $1", job_id
        )
    finally:
        await conn.close()
    return (row["name"], row["status"]) if row else ("", "")


async def parked(system: System) -> list[tuple[str, str, str]]:
    """(consumer, source topic suffix, reason) of every dead letter."""
    prefix = system.settings.topic_prefix
    async with Ledger(system.settings, "test-poison") as ledger:
        out = []
        async for raw in ledger.read_raw(system.settings.topic("dead-letter")):
            h = dict(raw.headers)
            source = h[DLQ_SOURCE_TOPIC].decode().removeprefix(prefix)
            out.append((h[DLQ_CONSUMER].decode(), source, h[DLQ_REASON].decode()))
        return out


def dead_letter_counts(system: System, name: str) -> float:
    url = system.services.ops_url(name)
    assert url, f"{name} runs without an ops port"
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gridledger_dead_letters_total"
        and sample.labels["reason"] == "undecodable"
    )


def test_poison_on_every_topic_is_parked_and_another_tenant_s_job_runs(system: System) -> None:
    system.start_agent(NODE, count=1)
    nul_job = asyncio.run(inject(system))
    job_id = system.submit(sh("echo fine"))
    system.wait_terminal([job_id], 120)
    system.services.check_alive()

    doc = system.job(job_id)
    assert doc["status"] == "succeeded", doc.get("failure")
    # The other tenant's NUL-named job is in Postgres too (its NUL stood in for), and ends.
    system.wait_for(
        lambda: asyncio.run(stored(system, nul_job))[1] in TERMINAL_STATUSES,
        120,
        "the NUL-named job to end in the read models",
    )
    assert asyncio.run(stored(system, nul_job))[0] == "a\ufffdb"

    def all_parked() -> bool:
        got = {
            (c.split("/")[0], t) for c, t, r in asyncio.run(parked(system)) if r == "undecodable"
        }
        return all((name, t) in got for name, topics in READS.items() for t in topics)

    system.wait_for(all_parked, 60, "every service to park the poison of every topic it reads")
    for name, topics in READS.items():
        assert dead_letter_counts(system, name) >= len(topics), name

    report = verify.run(system.settings, catch_up_s=60)
    assert report.ok, "\n".join(report.lines())
