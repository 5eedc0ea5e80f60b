"""Log lines name the job, attempt, event and node they are about, crash lines included."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from schemas.events import JobSubmitted, NodeDrained
from services.ledger.client import DLQ_ERROR, DLQ_REASON
from services.ops import logs
from services.ops.logs import (
    JsonFormatter,
    attach_context,
    event_context,
    log_context,
    log_fatal,
    setup_logging,
)
from services.processors.step import Step
from services.processors.store import JobStore
from services.settings import Settings
from tests.fakes.feed import Feed
from tests.fakes.ledger import FakeLedger
from tests.schemas.samples import sample

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _json_line(exc: BaseException | None = None, **extra: object) -> dict[str, object]:
    record = logging.LogRecord(
        "gridledger.test",
        logging.ERROR,
        __file__,
        1,
        "it broke",
        (),
        (type(exc), exc, exc.__traceback__) if exc is not None else None,
    )
    for key, value in extra.items():
        setattr(record, key, value)
    line: dict[str, object] = json.loads(JsonFormatter("processors").format(record))
    return line


def test_an_exception_leaving_a_context_block_carries_it_to_the_line_that_logs_it() -> None:
    with (
        pytest.raises(ValueError, match="bad record") as raised,
        log_context(job_id="job-1", attempt=2),
        log_context(event_id="ev-3"),
    ):
        raise ValueError("bad record")
    line = _json_line(raised.value)  # logged outside both blocks, as a service's main loop does
    assert (line["job_id"], line["attempt"], line["event_id"]) == ("job-1", 2, "ev-3")
    assert "ValueError: bad record" in str(line["error"])


def test_the_innermost_context_wins_and_a_wrapping_error_keeps_it() -> None:
    inner = attach_context(KeyError("x"), job_id="job-inner", attempt=1)
    attach_context(inner, job_id="job-outer", node_id="gpu-1")  # adds, never overrides
    wrapped = RuntimeError("the fold failed")
    wrapped.__cause__ = inner  # what `raise RuntimeError(...) from inner` sets
    line = _json_line(wrapped)
    assert (line["job_id"], line["attempt"], line["node_id"]) == ("job-inner", 1, "gpu-1")
    # An explicit extra= of the log call says more than anything carried.
    assert _json_line(inner, job_id="job-explicit")["job_id"] == "job-explicit"


def test_event_context_names_what_an_event_is_about() -> None:
    submitted = sample(JobSubmitted)
    assert event_context(submitted) == {
        "job_id": submitted.job_id,
        "attempt": submitted.attempt,
        "event_id": submitted.event_id,
    }
    drained = NodeDrained(event_id="ev-d", node_id="gpu-7", occurred_at=T0)
    assert event_context(drained) == {"event_id": "ev-d", "node_id": "gpu-7"}  # no job


async def test_a_processor_that_fails_on_a_record_names_that_record_and_parks_it(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The processors' per-record loop: whatever a processor raises is logged with the
    record's job, attempt and event id, and the record is parked with the error."""
    ledger = await FakeLedger(settings).start()
    store = JobStore(ledger)
    store.loaded_at.update(dict.fromkeys(range(settings.job_partitions), T0))  # rebuilt
    step = Step(settings, ledger, store, ["state"], "test")

    def broken(job_id: str, offset: int, event: object, batch: object) -> None:
        raise ZeroDivisionError("a processor's bug")

    step.handlers = [broken]
    event = sample(JobSubmitted)
    await ledger.append(event)
    with caplog.at_level(logging.WARNING):
        await Feed(ledger, [settings.topic("job-events")], "test").drain(step.run)
    failed = next(r for r in caplog.records if r.exc_info and "cannot apply" in r.getMessage())
    line = json.loads(JsonFormatter("processors").format(failed))
    assert (line["job_id"], line["attempt"], line["event_id"]) == (
        event.job_id,
        event.attempt,
        event.event_id,
    )
    assert "ZeroDivisionError: a processor's bug" in str(line["error"])
    [parked] = [r async for r in ledger.read_raw(settings.topic("dead-letter"))]
    headers = {name: value.decode() for name, value in parked.headers}
    assert (headers[DLQ_REASON], headers[DLQ_ERROR]) == ("unapplicable", "a processor's bug")


@pytest.fixture
def service_logging() -> Iterator[None]:
    """setup_logging for a pretend service; the root logger and the module state restored."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logs._service = None  # the module's one piece of state, reset for the next test


def test_a_service_that_stops_on_an_error_says_so_in_its_own_log_format(
    service_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not log_fatal(RuntimeError("not a service yet"))  # a CLI command prints it itself
    setup_logging("sink", fmt="json")
    error = attach_context(RuntimeError("constraint violated"), job_id="job-9", attempt=1)
    assert log_fatal(error)
    sys.stdout.flush()
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["level"] == "CRITICAL" and line["service"] == "sink"
    assert line["message"] == "sink stopped: RuntimeError: constraint violated"
    assert (line["job_id"], line["attempt"]) == ("job-9", 1)
