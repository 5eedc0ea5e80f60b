"""Queries over the sink's read models; every job query is scoped to one tenant."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from schemas.views import TERMINAL_STATUSES


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


async def job_row(pool: asyncpg.Pool, tenant: str, job_id: str) -> asyncpg.Record | None:
    """The jobs row of ``job_id`` when it belongs to ``tenant`` (None otherwise)."""
    return await pool.fetchrow(
        "SELECT * FROM jobs WHERE job_id = $1 AND tenant = $2", job_id, tenant
    )


async def job_recorded(pool: asyncpg.Pool, job_id: str) -> bool:
    return await pool.fetchval("SELECT 1 FROM jobs WHERE job_id = $1", job_id) is not None


async def list_jobs(
    pool: asyncpg.Pool, tenant: str, statuses: list[str], limit: int, before: str | None
) -> list[dict[str, Any]]:
    """The tenant's jobs, newest first."""
    rows = await pool.fetch(
        "SELECT job_id, name, status, attempt, image, gpus, submitted_at, updated_at, "
        "terminal_at, failure_class, attribution, summary FROM jobs "
        "WHERE tenant = $1 AND (cardinality($2::text[]) = 0 OR status = ANY($2::text[])) "
        "AND ($3::text IS NULL OR job_id < $3) "
        "ORDER BY submitted_at DESC NULLS LAST, job_id DESC LIMIT $4",
        tenant,
        statuses,
        before,
        limit,
    )
    return [{k: _iso(v) for k, v in dict(r).items()} for r in rows]


async def accounting(pool: asyncpg.Pool, job_id: str) -> dict[str, Any] | None:
    record = await pool.fetchval("SELECT record FROM accounting_records WHERE job_id = $1", job_id)
    return _json(record) if record is not None else None


def accounting_summary(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    keys = (
        "final",
        "held_seconds",
        "gpu_seconds",
        "metered_gpu_seconds",
        "billable_gpu_seconds",
        "credited_gpu_seconds",
        "reconciled",
        "policy_version",
    )
    return {k: record.get(k) for k in keys}


def job_document(row: asyncpg.Record, record: dict[str, Any] | None) -> dict[str, Any]:
    """The JobView of a jobs row for clients, with the accounting summary and links."""
    view = _json(row["view"])
    view.pop("applied_event_ids", None)
    job_id = row["job_id"]
    return {
        **view,
        "terminal": view.get("status") in TERMINAL_STATUSES,
        "accounting": accounting_summary(record),
        "links": links(job_id),
    }


def links(job_id: str) -> dict[str, str]:
    base = f"/v1/jobs/{job_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "logs": f"{base}/logs",
        "accounting": f"{base}/accounting",
        "cancel": f"{base}/cancel",
    }


async def events(pool: asyncpg.Pool, job_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT seq, payload FROM job_events WHERE job_id = $1 ORDER BY seq", job_id
    )
    return [{"seq": r["seq"], **_json(r["payload"])} for r in rows]


async def log_chunks(
    pool: asyncpg.Pool, job_id: str, attempt: int | None, stream: str | None
) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT attempt, stream, seq, first_line, line_count, data, truncated, occurred_at "
        "FROM log_chunks WHERE job_id = $1 AND ($2::int IS NULL OR attempt = $2) "
        "AND ($3::text IS NULL OR stream = $3) ORDER BY attempt, occurred_at, stream, seq",
        job_id,
        attempt,
        stream,
    )
    return [dict(r) for r in rows]


async def accounting_attempts(pool: asyncpg.Pool, job_id: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT * FROM accounting_attempts WHERE job_id = $1 ORDER BY attempt", job_id
    )
    return [{k: _iso(v) for k, v in dict(r).items()} for r in rows]


async def nodes(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM nodes ORDER BY node_id")
    out = []
    for r in rows:
        item = {k: _iso(v) for k, v in dict(r).items()}
        item["gpus"] = _json(item["gpus"])
        item["gpu_usage"] = _json(item["gpu_usage"])
        out.append(item)
    return out


async def job_status(pool: asyncpg.Pool, job_id: str) -> str | None:
    return await pool.fetchval("SELECT status FROM jobs WHERE job_id = $1", job_id)


async def tenant_accounting(pool: asyncpg.Pool, tenant: str, limit: int) -> list[dict[str, Any]]:
    """The tenant's accounting records (without per-attempt lines), newest jobs first."""
    rows = await pool.fetch(
        "SELECT a.job_id, a.status, a.final, a.policy_version, a.held_seconds, a.gpu_seconds, "
        "a.metered_gpu_seconds, a.billable_gpu_seconds, a.credited_gpu_seconds, a.reconciled, "
        "a.updated_at FROM accounting_records a JOIN jobs j USING (job_id) "
        "WHERE j.tenant = $1 ORDER BY j.submitted_at DESC NULLS LAST, a.job_id DESC LIMIT $2",
        tenant,
        limit,
    )
    return [{k: _iso(v) for k, v in dict(r).items()} for r in rows]
