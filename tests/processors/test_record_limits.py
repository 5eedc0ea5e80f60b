"""Records within the topics' limit, and what happens to one over it (processors, fake ledger).

- The largest valid spec through 10 failing attempts with long log lines: every view and
  accounting record is published under ``kafka_max_message_bytes``, nothing is parked,
  and the job ends with its true terminal state.
- A view over the limit is never sent: it is parked (``unpublishable``), a RecordRefused
  takes its place, and the job ends ``record_refused`` on the platform's side, credited.

The FakeLedger refuses a record over the limit as the Kafka producer does.
"""

from __future__ import annotations

from typing import Any

from projections.job_state import project
from schemas.events import Event, JobFailed, RecordRefused
from schemas.spec import JobSpec
from services.ledger.client import DLQ_CONSUMER, DLQ_REASON, DLQ_VALUE_BYTES
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


async def test_a_view_over_the_limit_is_parked_and_the_job_ends_record_refused() -> None:
    settings = SETTINGS.model_copy(update={"kafka_max_message_bytes": 64 * 1024})
    spec = large_spec(env_chars=58_000, command_chars=0, attempts=3)
    assert len(spec.model_dump_json()) < 60_000  # each event fits: only the view grows past it
    ledger = await fake(settings)
    labels = {"consumer": worker(ledger).step.consumer_name, "reason": "unpublishable"}
    before = REGISTRY.get_sample_value("gridledger_dead_letters_total", labels) or 0
    await feed(ledger, failing_attempts(spec, attempts=1, lines=50, line_chars=250))
    history, view, record = outcome(ledger, "job-large")
    (refused,) = [e for e in history if isinstance(e, RecordRefused)]
    assert (refused.record_topic, refused.record_type) == ("job-state", "JobView")
    assert refused.size_bytes > refused.limit_bytes == 64 * 1024
    (failed,) = [e for e in history if isinstance(e, JobFailed)]
    assert (failed.failure_class, failed.attribution) == ("record_refused", "platform")
    assert record is not None and record.final
    assert record.billable_gpu_seconds == 0 and record.credited_gpu_seconds > 0
    parked = records(ledger, TOPIC("dead-letter"))
    assert parked
    headers = dict(parked[0].headers)
    assert headers[DLQ_REASON] == b"unpublishable"
    assert headers[DLQ_CONSUMER].startswith(b"processors")
    assert int(headers[DLQ_VALUE_BYTES]) > 64 * 1024 and parked[0].value is None
    after = REGISTRY.get_sample_value("gridledger_dead_letters_total", labels)
    assert after == before + len(parked)
