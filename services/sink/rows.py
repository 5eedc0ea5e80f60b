"""Pure conversions between the ledger's models and the read-model rows.

No I/O here: the sink and the replay tool call these with what they read, so a
rebuilt table is byte-for-byte what the live sink wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from projections.prices import PricedPiece, Problem
from schemas.events import (
    EVENT_TYPES,
    Event,
    LogChunk,
    MeterTick,
    NodeDrained,
    NodeEvent,
    NodeHeartbeat,
    NodeRegistered,
    PriceCatalogPublished,
)
from schemas.spec import JobSpec
from schemas.trusted import json_builder
from schemas.views import TERMINAL_STATUSES, AccountingRecord, AttemptView, JobView

Row = dict[str, Any]
_M = TypeVar("_M", bound=BaseModel)


def dump(model: BaseModel, **kwargs: Any) -> str:
    """JSON text for a jsonb column (asyncpg takes jsonb as text).

    Key order and number spelling do not matter: Postgres stores jsonb normalised, so
    this is the same column value as ``json.dumps(model.model_dump(mode="json"))``,
    several times cheaper.
    """
    return model.model_dump_json(**kwargs)


def event_from_payload(type_name: str, payload: str | dict[str, Any]) -> Event:
    """Rebuild an event stored as jsonb by :func:`job_event_row`."""
    data = json.loads(payload) if isinstance(payload, str) else payload
    return from_stored(EVENT_TYPES[type_name], data)


def from_stored(model: type[_M], data: str | dict[str, Any]) -> _M:
    """A model the sink stored, read back: validated, or, when a rule added since refuses
    it (a record written before the API bounded specs), built as it was stored
    (:func:`schemas.trusted.json_builder`): an old record never stops the sink."""
    values: dict[str, Any] = json.loads(data) if isinstance(data, str) else data
    try:
        return model.model_validate(values)
    except ValidationError:
        return json_builder(model)(values)  # type: ignore[return-value]


def job_event_row(event: Event, seq: int) -> Row:
    """The job_events row of an event (the payload kept whole, for the API's history)."""
    return {
        "event_id": event.event_id,
        "job_id": event.job_id,
        "seq": seq,
        "attempt": event.attempt,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "producer": event.producer,
        "causation_id": event.causation_id,
        "schema_version": event.schema_version,
        "payload": dump(event),
    }


def job_row(view: JobView, spec: JobSpec | None = None) -> Row:
    """The jobs row of a job's view: the columns the API filters and sorts on, the view
    itself, and ``spec``, the job's spec, given by the batch that applied its JobSubmitted
    (None keeps the stored one: :attr:`services.sink.tables.Table.kept`)."""
    failure = view.failure
    resources = view.resources
    return {
        "job_id": view.job_id,
        "tenant": view.tenant,
        "name": view.name,
        "status": view.status,
        "terminal": view.status in TERMINAL_STATUSES,
        "attempt": view.attempt,
        "image": view.image,
        "gpus": resources.gpus if resources else 0,
        "submitted_at": view.submitted_at,
        "updated_at": view.updated_at,
        "terminal_at": view.terminal_at,
        "terminal_event": view.terminal_event,
        "failure_class": failure.failure_class if failure else "",
        "attribution": failure.attribution if failure else "",
        "retryable": failure.retryable if failure else None,
        "summary": failure.summary if failure else "",
        "advice": failure.advice if failure else "",
        "event_count": view.event_count,
        "view": dump(view),
        "spec": dump(spec) if spec is not None else None,
    }


def attempt_row(job_id: str, attempt: AttemptView) -> Row:
    """The attempts row of one attempt of a job's view."""
    return {
        "job_id": job_id,
        "attempt": attempt.attempt,
        "status": attempt.status,
        "node_id": attempt.node_id,
        "provider": attempt.provider,
        "region": attempt.region,
        "gpu_count": attempt.gpu_count,
        "gpu_model": attempt.gpu_model,
        "scheduled_at": attempt.scheduled_at,
        "accepted_at": attempt.accepted_at,
        "held_from": attempt.held_from,
        "released_at": attempt.released_at,
        "started_at": attempt.started_at,
        "exited_at": attempt.exited_at,
        "exit_code": attempt.exit_code,
        "signal": attempt.signal,
        "oom_killed": attempt.oom_killed,
        "runtime_s": attempt.runtime_s,
        "failure_class": attempt.failure_class,
        "attribution": attempt.attribution,
        "view": dump(attempt),
    }


def failure_row(view: JobView, event: Event) -> Row | None:
    """The failure the view took on when ``event`` was applied (None without one)."""
    failure = view.failure
    if failure is None:
        return None
    return {
        "event_id": event.event_id,
        "job_id": view.job_id,
        "attempt": failure.attempt,
        "failure_class": failure.failure_class,
        "attribution": failure.attribution,
        "retryable": failure.retryable,
        "summary": failure.summary,
        "advice": failure.advice,
        "rule_id": failure.rule_id,
        "classifier_version": failure.classifier_version,
        "evidence": dump(failure.evidence),
        "occurred_at": event.occurred_at,
    }


def accounting_row(record: AccountingRecord, pieces: Sequence[PricedPiece] = ()) -> Row:
    """The accounting_records row of a job's record: its totals, the record itself, and
    its money: the sums of its priced hourly pieces (``pieces``)."""
    return {
        "job_id": record.job_id,
        "tenant": record.tenant,
        "status": record.status,
        "final": record.final,
        "policy_version": record.policy_version,
        "held_seconds": record.held_seconds,
        "gpu_seconds": record.gpu_seconds,
        "metered_gpu_seconds": record.metered_gpu_seconds,
        "billable_gpu_seconds": record.billable_gpu_seconds,
        "credited_gpu_seconds": record.credited_gpu_seconds,
        "reconciled": record.reconciled,
        "updated_at": record.updated_at,
        "record": dump(record),
        "labels": json.dumps(record.labels),
        "currency": next((p.price.currency for p in pieces if p.price), ""),
        "billable_cost_nanos": sum(p.billable_nanos for p in pieces),
        "credited_cost_nanos": sum(p.credited_nanos for p in pieces),
        "unpriced_gpu_us": sum(p.piece.gpu_us for p in pieces if p.price is None),
        "price_versions": sorted({p.price.version for p in pieces if p.price}),
    }


def accounting_attempt_rows(record: AccountingRecord) -> list[Row]:
    """The accounting_attempts rows, one per attempt of the record."""
    return [
        {
            "job_id": record.job_id,
            "attempt": a.attempt,
            "node_id": a.node_id,
            "held_from": a.held_from,
            "released_at": a.released_at,
            "held_seconds": a.held_seconds,
            "gpu_count": a.gpu_count,
            "gpu_model": a.gpu_model,
            "gpu_seconds": a.gpu_seconds,
            "metered_gpu_seconds": a.metered_gpu_seconds,
            "tick_count": a.tick_count,
            "missing_ticks": list(a.missing_ticks),
            "attribution": a.attribution,
            "failure_class": a.failure_class,
            "billable_gpu_seconds": a.billable_gpu_seconds,
            "credited_gpu_seconds": a.credited_gpu_seconds,
            "reconciled": a.reconciled,
            "provider": a.provider,
            "region": a.region,
        }
        for a in record.attempts
    ]


def usage_rows(pieces: Iterable[PricedPiece]) -> list[Row]:
    """The usage_lines rows of a record: ``projections.prices.priced`` (its usage split by
    hour, each hour at its price)."""
    return [
        {
            "job_id": p.job_id,
            "attempt": p.attempt,
            "period_start": p.period_start,
            "tenant": p.tenant,
            "labels": json.dumps(p.labels),
            "provider": p.provider,
            "region": p.region,
            "gpu_model": p.gpu_model,
            "held_us": p.held_us,
            "gpu_us": p.gpu_us,
            "metered_gpu_us": p.metered_gpu_us,
            "billable_gpu_us": p.billable_gpu_us,
            "credited_gpu_us": p.credited_gpu_us,
            "final": p.final,
            "price_version": priced.price.version if priced.price else None,
            "per_gpu_hour_micros": priced.price.micros if priced.price else None,
            "billable_cost_nanos": priced.billable_nanos,
            "credited_cost_nanos": priced.credited_nanos,
        }
        for priced in pieces
        for p in (priced.piece,)
    ]


def price_catalog_row(event: PriceCatalogPublished, seq: int, problems: Sequence[Problem]) -> Row:
    """The price_catalogs row of a catalog event: accepted unless ``problems``."""
    return {
        "event_id": event.event_id,
        "seq": seq,
        "version": event.version,
        "currency": event.currency,
        "published_at": event.occurred_at,
        "source": event.source,
        "accepted": not problems,
        "problems": json.dumps([list(p) for p in problems]),
        "payload": dump(event),
    }


def log_chunk_row(chunk: LogChunk) -> Row:
    """The log_chunks row of a chunk."""
    return {
        "job_id": chunk.job_id,
        "attempt": chunk.attempt,
        "stream": chunk.stream,
        "seq": chunk.seq,
        "event_id": chunk.event_id,
        "first_line": chunk.first_line,
        "line_count": chunk.line_count,
        "data": chunk.data.encode(),  # bytea: every character survives, NUL included
        "truncated": chunk.truncated,
        "occurred_at": chunk.occurred_at,
    }


def meter_tick_row(tick: MeterTick) -> Row:
    """The meter_ticks row of a tick."""
    return {
        "job_id": tick.job_id,
        "attempt": tick.attempt,
        "tick_index": tick.tick_index,
        "event_id": tick.event_id,
        "node_id": tick.node_id,
        "interval_start": tick.interval_start,
        "interval_s": tick.interval_s,
        "gpu_count": tick.gpu_count,
        "gpu_model": tick.gpu_model,
        "gpu_seconds": tick.gpu_seconds,
        "final": tick.final,
        "occurred_at": tick.occurred_at,
        "payload": dump(tick),
    }


def node_event_row(event: NodeEvent, seq: int) -> Row:
    """The node_events row of a node's event."""
    return {
        "event_id": event.event_id,
        "node_id": event.node_id,
        "seq": seq,
        "type": event.type,
        "occurred_at": event.occurred_at,
        "payload": dump(event),
    }


def new_node_row(node_id: str) -> Row:
    """The nodes row of a node not stored yet, before its first event is folded in."""
    return {
        "node_id": node_id,
        "status": "unknown",
        "provider": "",
        "region": "",
        "inventory_source": "",
        "inventory_note": "",
        "gpus": "[]",
        "host_memory_mb": 0,
        "agent_version": "",
        "heartbeat_interval_s": 0.0,
        "registered_at": None,
        "last_heartbeat_at": None,
        "last_heartbeat_seq": None,
        "free_gpu_indices": [],
        "running_attempts": [],
        "gpu_usage": "[]",
        "drained_at": None,
        "drain_reason": "",
    }


def _json_list(items: list[Any]) -> str:
    return json.dumps([i.model_dump(mode="json") for i in items], sort_keys=True)


def evolve_node(row: Row, event: NodeEvent) -> Row:
    """Fold one node event into a node row (a registration resets a drained node)."""
    if isinstance(event, NodeRegistered):
        return {
            **row,
            "status": "ready",
            "provider": event.provider,
            "region": event.region,
            "inventory_source": event.inventory_source,
            "inventory_note": event.inventory_note,
            "gpus": _json_list(event.gpus),
            "host_memory_mb": event.host_memory_mb,
            "agent_version": event.agent_version,
            "heartbeat_interval_s": event.heartbeat_interval_s,
            "registered_at": event.occurred_at,
            "drained_at": None,
            "drain_reason": "",
        }
    if isinstance(event, NodeHeartbeat):
        last_at = row["last_heartbeat_at"]
        if last_at is not None and event.occurred_at <= last_at:
            return row  # an older or repeated heartbeat: the newer one describes the node
        return {
            **row,
            "status": row["status"] if row["status"] != "unknown" else "ready",
            "last_heartbeat_at": event.occurred_at,
            "last_heartbeat_seq": event.seq,
            "free_gpu_indices": list(event.free_gpu_indices),
            "running_attempts": list(event.running_attempts),
            "gpu_usage": _json_list(event.gpus),
        }
    if isinstance(event, NodeDrained):
        return {
            **row,
            "status": "drained",
            "drained_at": event.occurred_at,
            "drain_reason": event.reason,
        }
    return row
