"""The agent's node-commands handler on the FakeLedger: the same subscription, no broker.

The agent takes a ledger port for its commands (``Agent(ctx, ledger=...)``); on the
fake it handles its own node's commands, leaves another node's alone, parks a record
that does not decode and commits what it handled to the node's group.
tests/agent/test_agent_docker.py runs commands end to end on the real stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

from schemas.events import CancelRequested
from services.agent.agent import Agent
from services.agent.context import AgentContext
from services.agent.settings import AgentSettings
from services.ledger import TopicPartition, partition_for
from services.ledger.client import DLQ_CONSUMER, DLQ_REASON
from services.settings import Settings
from tests.fakes.ledger import FakeLedger
from tests.schemas.samples import T0
from tests.waiting import eventually


async def test_the_agent_handles_its_own_commands_parks_poison_and_commits(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = await FakeLedger(settings.model_copy(update={"topic_prefix": "fake-agent."})).start()
    node = "node-f"
    # The commands loop reads only the settings, the node and its GPUs of the context.
    ctx: Any = SimpleNamespace(
        settings=ledger.settings,
        agent=AgentSettings(node_id=node),
        node_id=node,
        inventory=SimpleNamespace(gpus=[]),
    )
    agent = Agent(cast(AgentContext, ctx), ledger=ledger)
    topic = ledger.settings.topic("node-commands")
    mine = CancelRequested(job_id="job-1", attempt=1, occurred_at=T0, node_id=node)
    theirs = mine.model_copy(update={"job_id": "job-2", "node_id": "node-g"})
    await ledger.put_many([(topic, node, mine), (topic, "node-g", theirs)])
    poison = await ledger.send_raw(topic, node.encode(), b"\xc3\x01 not a command", [])
    tp = TopicPartition(topic, partition_for(node, await ledger.partitions(topic)))
    group = f"{ledger.settings.topic_prefix}agent.{node}"

    caplog.set_level(logging.INFO, logger="services.agent.agent")
    task = asyncio.create_task(agent._consume_commands())
    try:
        await eventually(
            lambda: ledger.committed.get(group, {}).get(tp, 0) > poison.offset,
            "the agent to commit its partition past the poison record",
        )
        assert agent.commands_ready.is_set()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    handled = [r.getMessage() for r in caplog.records if "cancel for" in r.getMessage()]
    assert handled == ["cancel for job-1/1: nothing of it runs here"], "only its own command"
    (parked,) = [r async for r in ledger.read_raw(ledger.settings.topic("dead-letter"))]
    headers = dict(parked.headers)
    assert (headers[DLQ_CONSUMER], headers[DLQ_REASON]) == (b"agent-node-f", b"undecodable")
