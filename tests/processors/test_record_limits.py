"""Records within the topics' limit, and what happens to one over it (processors, fake ledger).

- The largest valid spec through 10 failing attempts with long log lines: every view and
  accounting record is published under ``kafka_max_message_bytes``, nothing is parked,
  and the job ends with its true terminal state.
- A view, or a node's command (the placement with the job's whole spec), over the limit
  is never sent: it is parked (``unpublishable``), a RecordRefused takes its place, and
  the job ends ``record_refused`` on the platform's side, credited.

The FakeLedger refuses a record over the limit as the Kafka producer does.
"""

from __future__ import annotations

from typing import Any

from projections.job_state import project
from schemas import codec
from schemas.events import Event, JobFailed, RecordRefused
from schemas.spec import JobSpec
from schemas.views import AccountingRecord
from services.clock import utcnow
from services.ledger.client import (
    DLQ_CONSUMER,
    DLQ_REASON,
    DLQ_VALUE_BYTES,
    encoded,
    record_bytes,
)
from services.ops.metrics import REGISTRY
from tests.fakes.ledger import FakeLedger
from tests.processors.test_step import SETTINGS, TOPIC, drain, fake, is_fact, outcome, worker
from tests.projections.histories import JobHistory, job_spec


def large_spec(env_chars: int, command_chars: int, attempts: int = 10) -> JobSpec:
    """A spec as large as the validation allows in the fields a tenant fills freely."""
    half = env_chars // 2
    return job_spec(
        env={"DATA_A": "a" * half, "DATA_B": "b" * (env_chars - half)},
        command=["sh", "-c", "x" * command_chars],
        retry={"max_attempts": attempts, "retry_user_errors": True},
    )


def failing_attempts(spec: JobSpec, attempts: int, lines: int, line_chars: int) -> list[Event]:
    """The facts of a job whose every attempt prints ``lines`` long lines and exits 1."""
    job = JobHistory("job-large", spec)
    job.submit()
    for _ in range(attempts):
        job.start()
        job.wait(10).exit(1, logs=tuple(f"{i} " + "y" * line_chars for i in range(lines)))
        job.wait(1).release()
    return [e for e in job.events if is_fact(e)]


def records(ledger: FakeLedger, topic: str) -> list[Any]:
    """Every stored record of ``topic``, all partitions."""
    return [r for (name, _), stored in sorted(ledger.logs.items()) if name == topic for r in stored]


async def feed(ledger: FakeLedger, facts: list[Event]) -> None:
    processors = worker(ledger)
    for fact in facts:
        await ledger.append(fact)
        await drain(processors, ledger, 1000)


async def test_the_largest_valid_spec_through_ten_failing_attempts_publishes_every_record() -> None:
    spec = large_spec(env_chars=60_000, command_chars=60_000)
    assert len(spec.model_dump_json()) > 120_000
    ledger = await fake(SETTINGS)
    await feed(ledger, failing_attempts(spec, attempts=10, lines=50, line_chars=2000))
    history, view, record = outcome(ledger, "job-large")
    assert view == project(history)
    assert (view.status, len(view.attempts)) == ("failed", 10)
    assert view.failure is not None and view.failure.failure_class == "user_process_error"
    assert record is not None and record.final
    limit = SETTINGS.kafka_max_message_bytes
    for suffix in ("job-state", "accounting", "job-events"):
        sizes = [len(r.value) for r in records(ledger, TOPIC(suffix)) if r.value]
        assert sizes and max(sizes) < limit, suffix
    assert records(ledger, TOPIC("dead-letter")) == []


async def refused_on(
    limit: int, facts: list[Event], topic: str, record_type: str
) -> AccountingRecord:
    """The facts through a worker with ``kafka_max_message_bytes`` at ``limit``: the
    record of ``record_type`` on ``topic`` is parked, a RecordRefused takes its place and
    the job ends record_refused, credited."""
    ledger = await fake(SETTINGS.model_copy(update={"kafka_max_message_bytes": limit}))
    labels = {"consumer": worker(ledger).step.consumer_name, "reason": "unpublishable"}
    before = REGISTRY.get_sample_value("gridledger_dead_letters_total", labels) or 0
    await feed(ledger, facts)
    history, view, record = outcome(ledger, "job-large")
    (refused,) = [e for e in history if isinstance(e, RecordRefused)]
    assert (refused.record_topic, refused.record_type) == (topic, record_type)
    assert refused.size_bytes > refused.limit_bytes == limit
    (failed,) = [e for e in history if isinstance(e, JobFailed)]
    assert (failed.failure_class, failed.attribution) == ("record_refused", "platform")
    assert record is not None and record.final
    parked = records(ledger, TOPIC("dead-letter"))
    assert parked
    headers = dict(parked[0].headers)
    assert headers[DLQ_REASON] == b"unpublishable"
    assert headers[DLQ_CONSUMER].startswith(b"processors")
    # The value alone (without key and headers) may be just under it: the record is not.
    assert 0 < int(headers[DLQ_VALUE_BYTES]) <= refused.size_bytes and parked[0].value is None
    after = REGISTRY.get_sample_value("gridledger_dead_letters_total", labels)
    assert after == before + len(parked)
    return record


async def test_a_view_over_the_limit_is_parked_and_the_job_ends_record_refused() -> None:
    # The view holds no spec: it grows past 16 KiB with the attempts' kept log lines, while
    # every event stays under it.
    spec = job_spec(retry={"max_attempts": 3, "retry_user_errors": True})
    facts = failing_attempts(spec, attempts=2, lines=40, line_chars=200)
    assert max(len(codec.encode(e)) for e in facts) < 16 * 1024
    record = await refused_on(16 * 1024, facts, "job-state", "JobView")
    # The first attempt failed on its own exit (the user's); the refused one is credited.
    first, refused = record.attempts
    assert (first.attribution, first.billable_gpu_seconds > 0) == ("user", True)
    assert refused.billable_gpu_seconds == 0 and refused.credited_gpu_seconds > 0


async def test_a_node_command_over_the_limit_is_parked_and_the_job_ends_record_refused() -> None:
    """The spec is stored once on job-events; the node's command carries it whole with the
    placement: under a limit the submission just fits, the placement fits and the command
    does not."""
    spec = large_spec(env_chars=58_000, command_chars=0, attempts=3)
    job = JobHistory("job-large", spec, start=utcnow())  # dispatch sends no stale placement
    submitted, scheduled = job.submit(), job.schedule()
    assert len(codec.encode(scheduled)) < 1024 and scheduled.spec is None
    command = scheduled.for_node(spec)
    sizes = [
        record_bytes(encoded([(TOPIC(suffix), e.key, e)])[0])
        for suffix, e in (("job-events", submitted), ("node-commands", command))
    ]
    assert sizes[0] < sizes[1]
    facts = [e for e in job.events if is_fact(e)]
    record = await refused_on(sum(sizes) // 2, facts, "node-commands", "AttemptScheduled")
    assert record.billable_gpu_seconds == 0  # never held compute, never billed
