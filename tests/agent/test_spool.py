"""The durable spool: fsynced appends, torn tails, acknowledgements, order across outages."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiokafka.errors import MessageSizeTooLargeError

from services.agent.spool import SegmentLog, Spool, SpoolEntry
from services.ledger.errors import append_failed
from tests.waiting import eventually


def _record(i: int, lane_topic: str = "job-events") -> SpoolEntry:
    return SpoolEntry(lane_topic, f"job-{i % 3}", f"value-{i}".encode(), [("h", b"v")], {"i": i})


def test_records_survive_a_reopen_and_reads_resume_from_the_acked_position(tmp_path: Path):
    log = SegmentLog(tmp_path, segment_bytes=200)
    log.append([_record(i) for i in range(5)])
    log.append([_record(i) for i in range(5, 12)])
    first = log.read(log.acked, max_records=4)
    assert [r.meta["i"] for r, _ in first] == [0, 1, 2, 3]
    log.ack(first[-1][1])

    reopened = SegmentLog(tmp_path, segment_bytes=200)
    rest = reopened.read(reopened.acked)
    assert [r.meta["i"] for r, _ in rest] == list(range(4, 12))
    assert rest[0][0].headers == [("h", b"v")] and rest[0][0].value == b"value-4"


def test_segments_roll_and_fully_acked_ones_are_deleted(tmp_path: Path):
    log = SegmentLog(tmp_path, segment_bytes=100)
    for i in range(10):
        log.append([_record(i)])
    assert len(list(tmp_path.glob("*.seg"))) > 3
    everything = log.read(log.acked, max_records=1000)
    assert [r.meta["i"] for r, _ in everything] == list(range(10))
    log.ack(everything[-1][1])
    assert len(list(tmp_path.glob("*.seg"))) == 1
    assert log.read(log.acked) == []


def test_pending_bytes_are_the_unacknowledged_records_across_segments(tmp_path: Path):
    log = SegmentLog(tmp_path, segment_bytes=100)
    sizes = [len(_record(i).to_bytes()) for i in range(6)]
    for i in range(6):
        log.append([_record(i)])
    assert len(list(tmp_path.glob("*.seg"))) > 2  # the sum spans several segments
    assert log.pending_bytes() == sum(sizes)
    read = log.read(log.acked, max_records=4)
    log.ack(read[-1][1])
    assert log.pending_bytes() == sum(sizes[4:])
    log.ack(log.end)
    assert log.pending_bytes() == 0


def test_a_torn_last_entry_is_cut_off_on_recovery(tmp_path: Path):
    log = SegmentLog(tmp_path)
    log.append([_record(1), _record(2)])
    segment = next(tmp_path.glob("*.seg"))
    with segment.open("ab") as fh:
        fh.write(_record(3).to_bytes()[:-5])  # the agent died mid-write
    reopened = SegmentLog(tmp_path)
    assert [r.meta["i"] for r, _ in reopened.read(reopened.acked)] == [1, 2]
    reopened.append([_record(4)])
    assert [r.meta["i"] for r, _ in reopened.read(reopened.acked)] == [1, 2, 4]


class SwitchablePublisher:
    def __init__(self) -> None:
        self.online = False
        self.sent: list[int] = []
        self.attempts = 0

    async def publish(self, records: list[SpoolEntry]) -> None:
        self.attempts += 1
        if not self.online:
            raise ConnectionError("broker unreachable")
        self.sent.extend(r.meta["i"] for r in records)

    async def close(self) -> None:
        pass


async def test_events_wait_on_disk_while_the_broker_is_away_and_go_in_order(tmp_path: Path):
    publishers: dict[str, SwitchablePublisher] = {}

    def factory(lane: str) -> SwitchablePublisher:
        publishers[lane] = SwitchablePublisher()
        return publishers[lane]

    spool = Spool(tmp_path, factory)
    spool.start()
    for i in range(50):
        await spool.lanes["control"].put([_record(i)])
    await eventually(lambda: publishers["control"].attempts >= 2, "the sender to retry")
    assert publishers["control"].sent == []
    assert not await spool.drain(0.2)
    publishers["control"].online = True
    assert await spool.drain(10)
    assert publishers["control"].sent == list(range(50))
    await spool.stop()

    # a restart finds nothing left to send
    again = Spool(tmp_path, factory)
    again.start()
    assert await again.drain(1)
    assert publishers["control"].sent == []
    await again.stop()


async def test_unsent_entries_are_sent_by_the_next_agent_start(tmp_path: Path):
    offline = SwitchablePublisher()
    spool = Spool(tmp_path, lambda lane: offline)
    spool.start()
    await spool.lanes["logs"].put([_record(i, "log-chunks") for i in range(5)])
    await spool.stop()

    online = SwitchablePublisher()
    online.online = True
    restarted = Spool(tmp_path, lambda lane: online)
    restarted.start()
    assert await restarted.drain(5)
    assert online.sent == list(range(5))
    await restarted.stop()


class RefusingPublisher(SwitchablePublisher):
    """The broker refuses every entry (a topic's max.message.bytes too small) until fixed."""

    async def publish(self, records: list[SpoolEntry]) -> None:
        if not self.online:
            self.attempts += 1
            raise append_failed(MessageSizeTooLargeError(), "append to t.job-events")
        await super().publish(records)


async def test_an_entry_the_broker_refuses_stays_on_disk_and_the_log_says_what_to_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal is no outage: one ERROR line naming the cause and the fix (no "unreachable"
    line), and the fact is kept and sent, in order, once the cause is fixed."""
    caplog.set_level(logging.INFO)
    publisher = RefusingPublisher()
    spool = Spool(tmp_path, lambda lane: publisher)
    spool.start()
    for i in range(3):
        await spool.lanes["control"].put([_record(i)])
    await eventually(lambda: publisher.attempts >= 3, "the sender to retry the refused entry")
    told = [r for r in caplog.records if "max.message.bytes" in r.getMessage()]
    assert [r.levelname for r in told] == ["ERROR"]  # once, however many tries
    assert "Fix: raise max.message.bytes" in told[0].getMessage()
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
    publisher.online = True  # the operator raised the topic's limit
    assert await spool.drain(10)
    assert publisher.sent == [0, 1, 2]
    await spool.stop()
