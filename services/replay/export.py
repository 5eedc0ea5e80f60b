"""A job's history as a self-describing file, and a job as the ledger knew it at a moment.

``gridledger history JOB -o json`` (``GET /v1/jobs/{job_id}/export``) writes every record
of the job on the topics the folds read (``job-events``, ``meter-ticks``), in ledger
order, each with where it lies (topic, partition, offset), its record time, the
fingerprint of the Avro schema that wrote it, the record's bytes and its decoded payload;
each schema once; and the live views at export time (the job view and accounting record
of the read models, the recorded classification and decisions).
``gridledger replay --file`` (:mod:`services.replay.offline`) refolds it without the
cluster. The format is in README.md, "Auditing without the cluster".

``--as-of TIME`` (:func:`as_of`) folds the records of the job that the ledger held at
TIME, by ledger time (:func:`ledger_time`): never by ``occurred_at``, which is the
producer's claim of when a fact happened, not when the platform learnt it.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from projections.fence import Fence
from schemas import codec
from schemas.errors import EventDecodeError
from schemas.events import Event, LeaderElected, MeterTick
from schemas.topics import FOLDED_TOPICS
from services.clock import utcnow
from services.ledger.client import heard_at, partition_for, skipped
from services.ledger.port import LedgerPort
from services.replay.offline import FORMAT, FORMAT_VERSION, live_decisions

CONSUMER = "export"
FENCE_MARKER = LeaderElected.__name__


@dataclass(frozen=True)
class JobRecord:
    """One record of a job on a folded topic, as the ledger holds it."""

    suffix: str
    """The topic without the installation's prefix: ``job-events`` or ``meter-ticks``."""
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    appended_at: datetime | None
    """The broker's append time (job-events records it: ``LogAppendTime``), else None."""
    value: bytes
    event: Event | None
    """None when the record does not decode (``error`` says why)."""
    error: str = ""
    fenced: bool = False
    """A scheduler decision of a deposed leader (:mod:`projections.fence`): on the ledger,
    so listed, but never folded, by this module's readers as by every other."""


def ledger_time(record: JobRecord) -> datetime:
    """When the ledger held the record: the broker's append time where the topic records
    it (job-events), else the record's timestamp (meter-ticks: when the agent sent it)."""
    return record.appended_at or datetime.fromtimestamp(record.timestamp_ms / 1000, UTC)


async def read_job(ledger: LedgerPort, job_id: str) -> list[JobRecord]:
    """Every record keyed ``job_id`` on the folded topics, topic by topic, in offset order.

    Reads the job's partition of each topic from offset 0 to its end now. A record that
    does not decode is kept with the reason (the sink parks it; the folds skip it). The
    leader fence's markers on the job's partition of ``job-events`` (keyed by no job) are
    read too, so a deposed scheduler's decision is marked ``fenced``, as every reader
    judges it.
    """
    out: list[JobRecord] = []
    key = job_id.encode()
    fence = Fence()
    for suffix in FOLDED_TOPICS:
        topic = ledger.settings.topic(suffix)
        partition = partition_for(job_id, await ledger.partitions(topic))
        async for raw in ledger.read_raw(topic, [partition]):
            if raw.value is None:
                continue
            if raw.key != key:
                if suffix == "job-events" and codec.type_header(raw.headers) == FENCE_MARKER:
                    with contextlib.suppress(EventDecodeError):
                        marker = codec.decode_event(raw.value, trusted=True)
                        fence.admits(raw.partition, raw.offset, marker)
                continue
            event: Event | None = None
            error = ""
            try:
                event = codec.decode_event(raw.value, trusted=True)
            except EventDecodeError as exc:
                skipped(raw, CONSUMER, exc)
                error = str(exc)
            fenced = event is not None and not fence.admits(raw.partition, raw.offset, event)
            out.append(
                JobRecord(
                    suffix,
                    topic,
                    raw.partition,
                    raw.offset,
                    raw.timestamp,
                    heard_at(raw, None),
                    bytes(raw.value),
                    event,
                    error,
                    fenced,
                )
            )
    return out


def folded(record: JobRecord) -> Event | None:
    """The record's event where the folds apply it: decoded and not fenced."""
    return None if record.fenced else record.event


def as_of(records: Sequence[JobRecord], moment: datetime) -> tuple[list[Event], list[MeterTick]]:
    """The job's history and meter ticks as the ledger held them at ``moment``: the
    records whose :func:`ledger_time` is at or before it."""
    history: list[Event] = []
    ticks: list[MeterTick] = []
    for r in records:
        event = folded(r)
        if event is None or ledger_time(r) > moment:
            continue
        if isinstance(event, MeterTick):
            ticks.append(event)
        elif r.suffix == "job-events":
            history.append(event)
    return history, ticks


def job_events_in(records: Sequence[JobRecord]) -> int:
    """Distinct job events among the records (what the job's view counts, once folded)."""
    return len({e.event_id for r in records if (e := folded(r)) and r.suffix == "job-events"})


def _entry(record: JobRecord, schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One record of the file; its writer schema is added to ``schemas`` (once)."""
    writer = codec.writer_of(record.value)
    fingerprint = ""
    if writer is not None:
        fp, name, version, source = writer
        fingerprint = codec.fingerprint_hex(fp)
        schemas.setdefault(fingerprint, {"name": name, "version": version, "schema": source})
    entry: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "appended_at": record.appended_at.isoformat() if record.appended_at else None,
        "type": type(record.event).__name__ if record.event else None,
        "fingerprint": fingerprint,
        "avro": base64.b64encode(record.value).decode(),
        "payload": record.event.model_dump(mode="json") if record.event else None,
    }
    if record.error:
        entry["error"] = record.error
    if record.fenced:
        entry["fenced"] = True
    return entry


def job_export(
    job_id: str,
    records: Sequence[JobRecord],
    view: dict[str, Any] | None,
    accounting: dict[str, Any] | None,
    money: dict[str, Any] | None,
    schemas: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """One job of the file: its records and its live views (``view``, ``accounting``: the
    read models' JSON at export time; ``money``: the record's price, from the catalog the
    file does not hold, so carried and not refolded); the schemas its records name go to
    ``schemas``."""
    history = [e for r in records if (e := folded(r)) is not None and r.suffix == "job-events"]
    live = {"view": view, "accounting": accounting, "money": money, **live_decisions(history)}
    return {"job_id": job_id, "records": [_entry(r, schemas) for r in records], "live": live}


def document(
    jobs: list[dict[str, Any]], schemas: dict[str, dict[str, Any]], exported_at: datetime
) -> dict[str, Any]:
    """The file: its format, when it was made, the schemas once, and the jobs."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "exported_at": exported_at.isoformat(),
        "schemas": dict(sorted(schemas.items())),
        "jobs": jobs,
    }


def merge(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several exported files as one (each schema once); the earliest ``exported_at``."""
    schemas: dict[str, dict[str, Any]] = {}
    jobs: list[dict[str, Any]] = []
    for doc in documents:
        schemas.update(doc["schemas"])
        jobs += doc["jobs"]
    at = min((datetime.fromisoformat(d["exported_at"]) for d in documents), default=None)
    return document(jobs, schemas, at or utcnow())
