"""Every event record is a CloudEvent in binary content mode (the Kafka protocol binding), read
back from the local broker with the `cloudevents` SDK: appended by a service through the
ledger, and spooled by an agent then sent by its publisher. The value stays the Avro record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat
from gridledger_client.cloudevents import CloudEvent, NotACloudEventError

from schemas import codec
from schemas.events import Event
from schemas.views import JobView
from services.agent.publisher import LedgerPublisher
from services.agent.spool import Spool
from services.ledger import Ledger
from services.settings import Settings
from tests.sink.scenario import node_facts, run_facts

pytestmark = pytest.mark.integration


def as_cloudevent(raw: Any) -> BaseCloudEvent:
    """A consumed record through the SDK's Kafka binding, as any CloudEvents consumer reads it."""
    message = KafkaMessage(
        headers={k: bytes(v) for k, v in raw.headers}, key=raw.key, value=raw.value
    )
    return from_binary(message, JSONFormat())


def assert_is_the_event(cloudevent: BaseCloudEvent, event: Event) -> None:
    assert cloudevent.get_specversion() == "1.0"
    assert cloudevent.get_id() == event.event_id
    assert cloudevent.get_type() == f"gridledger.{type(event).__name__}"
    assert cloudevent.get_source() == f"/gridledger/{event.producer}"
    assert cloudevent.get_subject() == event.key  # the job id, or a node event's node id
    assert cloudevent.get_time() == event.occurred_at
    assert cloudevent.get_datacontenttype() == codec.CONTENT_TYPE.decode()
    data = cloudevent.get_data()
    assert isinstance(data, bytes) and codec.decode(data) == event, "the value is the Avro record"


def assert_the_client_reads_the_same(raw: Any, cloudevent: BaseCloudEvent) -> None:
    """gridledger_client's reading of the headers agrees with the SDK's."""
    ours = CloudEvent.from_headers(raw.headers)
    assert (ours.specversion, ours.id, ours.source, ours.type, ours.subject, ours.time) == (
        cloudevent.get_specversion(), cloudevent.get_id(), cloudevent.get_source(),
        cloudevent.get_type(), cloudevent.get_subject(), cloudevent.get_time(),
    )  # fmt: skip
    assert ours.datacontenttype == cloudevent.get_datacontenttype()


async def records(ledger: Ledger, *suffixes: str) -> dict[str, Any]:
    """Every record of the topics, by the event id its value holds."""
    out = {}
    for suffix in suffixes:
        async for raw in ledger.read_raw(ledger.settings.topic(suffix)):
            out[codec.decode_event(raw.value).event_id] = raw
    return out


async def test_appended_and_spooled_events_are_cloudevents_on_the_broker(
    topics: Settings, tmp_path: Path
) -> None:
    appended = [*run_facts("job-ce-1", lines=2).all(), *node_facts("node-ce")]
    spooled = run_facts("job-ce-2", lines=2, submit=False).all()  # the agent's facts
    spool = Spool(tmp_path / "spool", lambda lane: LedgerPublisher(topics, f"test-{lane}"))
    spool.start()
    for event in spooled:
        await spool.append(event)
    assert await spool.drain(30), "the spool reached the broker"
    await spool.stop()

    async with Ledger(topics, "test") as ledger:
        await ledger.append_many(appended)
        await ledger.publish("job-state", "job-ce-1", JobView(job_id="job-ce-1"))
        suffixes = ("job-events", "log-chunks", "meter-ticks", "node-events")
        on_broker = await records(ledger, *suffixes)
        views = [raw async for raw in ledger.read_raw(topics.topic("job-state"))]

    assert len(on_broker) == len(appended) + len(spooled)
    assert {type(e).__name__ for e in spooled} >= {"ComputeHeld", "ProcessExited", "LogChunk"}
    for event in [*appended, *spooled]:
        raw = on_broker[event.event_id]
        assert_is_the_event(as_cloudevent(raw), event)
        assert_the_client_reads_the_same(raw, as_cloudevent(raw))
    with pytest.raises(NotACloudEventError, match="missing ce_specversion, ce_id"):
        CloudEvent.from_headers(views[0].headers)
    # A view is no event: no CloudEvents attribute, only the routing headers.
    assert [name for name, _ in views[0].headers] == [
        codec.HEADER_TYPE,
        codec.HEADER_FINGERPRINT,
        codec.HEADER_CONTENT_TYPE,
    ]
