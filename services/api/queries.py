"""Queries over the sink's read models; every job query is scoped to one tenant."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

import asyncpg

from projections import prices
from schemas.events import Event
from schemas.spec import LIMITS, character_problem
from schemas.views import IN_FLIGHT_STATUSES, TERMINAL_STATUSES
from services.sink.rows import event_from_payload


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
    """Whether the sink has stored the job (a submit is on the ledger before it is here)."""
    return await pool.fetchval("SELECT 1 FROM jobs WHERE job_id = $1", job_id) is not None


JOB_LIST_COLUMNS = (
    "job_id, name, status, attempt, image, gpus, submitted_at, updated_at, "
    "terminal_at, failure_class, attribution, summary"
)


def _after_job(at: str, job_id: str) -> str:
    """The SQL condition "after the page key ``(at, job_id)``" in the newest-first order
    ``submitted_at DESC NULLS FIRST, job_id DESC``; ``at``/``job_id`` name the parameters
    (``$3``) and the columns are those of ``jobs``. No key (``job_id`` NULL): every row."""
    return (
        f"({job_id}::text IS NULL "
        f" OR ({at}::timestamptz IS NULL AND submitted_at IS NULL AND job_id < {job_id}) "
        f" OR ({at}::timestamptz IS NULL AND submitted_at IS NOT NULL) "
        f" OR (submitted_at, job_id) < ({at}::timestamptz, {job_id}::text))"
    )


NEWEST_FIRST = "ORDER BY submitted_at DESC NULLS FIRST, job_id DESC"


async def list_jobs(
    pool: asyncpg.Pool,
    tenant: str,
    statuses: list[str],
    limit: int,
    after: JobCursor | None,
) -> tuple[list[dict[str, Any]], JobCursor | None]:
    """One page of the tenant's jobs, newest first, and the cursor of the next page.

    The order and the page boundary are the same key, ``(submitted_at, job_id)``
    descending (the ``jobs_by_tenant`` index), so a page starts exactly after the
    last row of the previous one: no job is skipped or repeated however job ids
    compare with submission times. Jobs without a submission time (none in a
    well-formed ledger) sort first.
    """
    after_at, after_id = after if after is not None else (None, None)
    rows = await pool.fetch(
        f"SELECT {JOB_LIST_COLUMNS} FROM jobs "
        "WHERE tenant = $1 AND (cardinality($2::text[]) = 0 OR status = ANY($2::text[])) "
        f"AND {_after_job('$3', '$4')} {NEWEST_FIRST} LIMIT $5",
        tenant,
        statuses,
        after_at,
        after_id,
        limit + 1,
    )
    return _page(rows, limit)


def _page(rows: list[asyncpg.Record], limit: int) -> tuple[list[dict[str, Any]], JobCursor | None]:
    """The first ``limit`` rows (of ``limit + 1`` fetched) and the key of the next page."""
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = (rows[-1]["submitted_at"], rows[-1]["job_id"]) if more else None
    return [{k: _iso(v) for k, v in dict(r).items()} for r in rows], next_cursor


MAX_CURSOR_CHARS = 4096
"""A job cursor is a time and a job id (about 100 characters); a usage cursor a time and
up to eight group values (labels of up to 63 characters, GPU models, places)."""

JobCursor = tuple[datetime | None, str]
"""The ``(submitted_at, job_id)`` of the last job of a page."""


def encode_token(scope: str, key: list[Any]) -> str:
    """An opaque page token for clients: base64url of the query it belongs to (``scope``)
    and the page key (clients must not parse it)."""
    raw = json.dumps([scope, key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, scope: str) -> list[Any]:
    """The page key of a token from :func:`encode_token` for the same ``scope``; ValueError
    when it is not one, or is one of another query."""
    if len(token) > MAX_CURSOR_CHARS:
        raise ValueError(f"not a cursor this API issued (longer than {MAX_CURSOR_CHARS})")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        issued, key = json.loads(raw)
    except (ValueError, TypeError, binascii.Error, RecursionError) as exc:
        raise ValueError(f"not a cursor this API issued ({exc})") from exc
    if not isinstance(key, list) or not isinstance(issued, str):
        raise ValueError("not a cursor this API issued (wrong shape)")  # noqa: TRY004
    if issued != scope:
        raise ValueError("the cursor belongs to another query (other parameters or endpoint)")
    if any(not isinstance(v, str | None) or (v and character_problem(v)) for v in key):
        # Its values reach SQL as parameters: a NUL there would be a 500, not a 400.
        raise ValueError("not a cursor this API issued (not a page key)")
    return key


def encode_cursor(cursor: JobCursor, scope: str = "jobs") -> str:
    """The token of a job page key (:func:`encode_token`)."""
    at, job_id = cursor
    return encode_token(scope, [at.isoformat() if at else None, job_id])


def decode_cursor(token: str, scope: str = "jobs") -> JobCursor:
    """The job page key of a token from :func:`encode_cursor`; ValueError when it is not one."""
    key = decode_token(token, scope)
    shaped = (
        len(key) == 2 and isinstance(key[1], str) and (key[0] is None or isinstance(key[0], str))
    )
    if not shaped:
        raise ValueError("not a cursor this API issued (wrong shape)")
    try:
        moment = datetime.fromisoformat(key[0]) if key[0] else None
    except ValueError as exc:
        raise ValueError(f"not a cursor this API issued ({exc})") from exc
    job_id = key[1]
    if len(job_id) > LIMITS["job_id_chars"]:
        raise ValueError("not a cursor this API issued (not a job id)")
    if moment is not None and moment.tzinfo is None:
        raise ValueError("not a cursor this API issued (a time without its zone)")
    return (moment, job_id)


def money_of(row: Any) -> dict[str, Any]:
    """The money of an accounting record or a usage line, from its row's columns: exact
    decimal text and integer nanos of the currency, the GPU time no price covered, and the
    catalog versions whose rows priced it."""
    return {
        "currency": row["currency"] or "",
        "billable_cost": prices.money(row["billable_cost_nanos"]),
        "credited_cost": prices.money(row["credited_cost_nanos"]),
        "billable_cost_nanos": row["billable_cost_nanos"],
        "credited_cost_nanos": row["credited_cost_nanos"],
        "unpriced_gpu_us": row["unpriced_gpu_us"],
        "price_versions": sorted(row["price_versions"]),
    }


async def accounting(pool: asyncpg.Pool, job_id: str) -> dict[str, Any] | None:
    """The job's stored accounting record with its money, or None before the first one."""
    found = await accounting_parts(pool, job_id)
    return {**found[0], **found[1]} if found is not None else None


async def accounting_parts(
    pool: asyncpg.Pool, job_id: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The job's stored accounting record (what ``account`` folds) and its money (the price
    catalog's), apart; None before the first record."""
    row = await pool.fetchrow(
        "SELECT record, currency, billable_cost_nanos, credited_cost_nanos, unpriced_gpu_us, "
        "price_versions FROM accounting_records WHERE job_id = $1",
        job_id,
    )
    return (_json(row["record"]), money_of(row)) if row is not None else None


def accounting_summary(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The totals of an accounting record that the job document shows."""
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
    """The JobView of a jobs row for clients, with its spec (the row's, stored once), the
    accounting summary and links."""
    return view_document(view_of(row), record, _json(row["spec"]))


def view_of(row: asyncpg.Record) -> dict[str, Any]:
    """The stored JobView JSON of a jobs row."""
    view: dict[str, Any] = _json(row["view"])
    return view


def view_document(
    view: dict[str, Any], record: dict[str, Any] | None, spec: dict[str, Any] | None
) -> dict[str, Any]:
    """A JobView's JSON for clients, with the job's spec (the view leaves it out: its
    JobSubmitted's, or the jobs row's), the accounting summary and links."""
    view = {k: v for k, v in view.items() if k != "applied_event_ids"}
    return {
        **view,
        "spec": spec,
        "terminal": view.get("status") in TERMINAL_STATUSES,
        "accounting": accounting_summary(record),
        "links": links(view["job_id"]),
    }


def links(job_id: str) -> dict[str, str]:
    """The paths of a job's resources."""
    base = f"/v1/jobs/{job_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "logs": f"{base}/logs",
        "accounting": f"{base}/accounting",
        "cancel": f"{base}/cancel",
        "explain": f"{base}/explain",
        "timeline": f"{base}/timeline",
        "artifacts": f"{base}/artifacts",
    }


async def events(pool: asyncpg.Pool, job_id: str) -> list[dict[str, Any]]:
    """The job's stored events, in ledger order, each with its sequence number."""
    rows = await pool.fetch(
        "SELECT seq, payload FROM job_events WHERE job_id = $1 ORDER BY seq", job_id
    )
    return [{"seq": r["seq"], **_json(r["payload"])} for r in rows]


async def history(pool: asyncpg.Pool, job_id: str) -> list[tuple[int, Event]]:
    """The job's lifecycle events as models, with their ``seq``, in history order."""
    rows = await pool.fetch(
        "SELECT seq, type, payload FROM job_events WHERE job_id = $1 ORDER BY seq", job_id
    )
    return [(r["seq"], event_from_payload(r["type"], r["payload"])) for r in rows]


async def log_chunks(
    pool: asyncpg.Pool, job_id: str, attempt: int | None, stream: str | None
) -> list[dict[str, Any]]:
    """The job's stored log chunks, in order, optionally of one attempt or stream."""
    rows = await pool.fetch(
        "SELECT attempt, stream, seq, first_line, line_count, data, truncated, occurred_at "
        "FROM log_chunks WHERE job_id = $1 AND ($2::int IS NULL OR attempt = $2) "
        "AND ($3::text IS NULL OR stream = $3) ORDER BY attempt, occurred_at, stream, seq",
        job_id,
        attempt,
        stream,
    )
    # data is the chunk's UTF-8 as bytea (services/sink/migrations/0002_log_data_bytea.sql)
    return [{**dict(r), "data": bytes(r["data"]).decode()} for r in rows]


async def accounting_attempts(pool: asyncpg.Pool, job_id: str) -> list[dict[str, Any]]:
    """The per-attempt accounting rows of a job."""
    rows = await pool.fetch(
        "SELECT * FROM accounting_attempts WHERE job_id = $1 ORDER BY attempt", job_id
    )
    return [{k: _iso(v) for k, v in dict(r).items()} for r in rows]


async def nodes(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    """Every node the sink has seen, with its inventory and its latest GPU usage."""
    rows = await pool.fetch("SELECT * FROM nodes ORDER BY node_id")
    out = []
    for r in rows:
        item = {k: _iso(v) for k, v in dict(r).items()}
        item["gpus"] = _json(item["gpus"])
        item["gpu_usage"] = _json(item["gpu_usage"])
        out.append(item)
    return out


async def tenant_live_attempts(pool: asyncpg.Pool, tenant: str) -> dict[str, list[dict[str, Any]]]:
    """Node id -> the tenant's attempts live there: in flight, or superseded (another won)
    and still holding what it held; an attempt declared lost is not live."""
    rows = await pool.fetch(
        "SELECT a.node_id, a.job_id, a.attempt, a.status, j.status AS job_status "
        "FROM attempts a JOIN jobs j USING (job_id) "
        "WHERE j.tenant = $1 AND a.node_id <> '' AND (a.status = ANY($2::text[]) "
        "     OR (a.status = 'superseded' AND a.held_from IS NOT NULL AND a.released_at IS NULL)) "
        "ORDER BY a.node_id, a.job_id, a.attempt",
        tenant,
        list(IN_FLIGHT_STATUSES),
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["node_id"], []).append(
            {k: r[k] for k in ("job_id", "attempt", "status", "job_status")}
        )
    return out


async def job_status(pool: asyncpg.Pool, job_id: str) -> str | None:
    """The job's stored status, or None when it is not stored (yet)."""
    return await pool.fetchval("SELECT status FROM jobs WHERE job_id = $1", job_id)


async def tenant_accounting(
    pool: asyncpg.Pool,
    tenant: str,
    limit: int,
    after: JobCursor | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[dict[str, Any]], JobCursor | None]:
    """One page of the tenant's accounting records (without per-attempt lines), newest jobs
    first (the order and page key of :func:`list_jobs`), and the key of the next page.
    ``since``/``until``: only records whose latest event time is in ``[since, until)``."""
    after_at, after_id = after if after is not None else (None, None)
    rows = await pool.fetch(
        "SELECT a.job_id, a.status, a.final, a.policy_version, a.held_seconds, a.gpu_seconds, "
        "a.metered_gpu_seconds, a.billable_gpu_seconds, a.credited_gpu_seconds, a.reconciled, "
        "a.updated_at, a.labels, j.submitted_at, a.currency, a.billable_cost_nanos, "
        "a.credited_cost_nanos, a.unpriced_gpu_us, a.price_versions FROM accounting_records a "
        "JOIN jobs j USING (job_id) WHERE j.tenant = $1 "
        "AND ($5::timestamptz IS NULL OR a.updated_at >= $5) "
        "AND ($6::timestamptz IS NULL OR a.updated_at < $6) "
        f"AND {_after_job('$2', '$3')} {NEWEST_FIRST} LIMIT $4",
        tenant,
        after_at,
        after_id,
        limit + 1,
        since,
        until,
    )
    records, next_cursor = _page(list(rows), limit)
    for r in records:
        r["labels"] = _json(r["labels"])
        r.update(money_of(r))
    return records, next_cursor
