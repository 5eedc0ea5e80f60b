"""The read-model tables, declared once, and the set-based statements that write them.

:data:`TABLES` is the single description of every table the migrations create (name,
columns in order with their types, key). The writer's statements are generated from it,
the replay comparison takes its tables and keys from it, and a unit test parses
``services/sink/migrations/*.sql`` and checks that the declaration is what they create:
a new column is added to a migration *and* here, or that test fails.

Writing a batch: each table's rows go to Postgres by binary ``COPY`` into a temporary
staging table of the same columns (no constraints, private to the connection), then one
``INSERT … SELECT … ON CONFLICT`` moves them into the table: one path for every table
and column type (arrays included), one statement per table whatever the batch size.
At the sink's 2,000-record batches it costs Postgres about what the earlier
``unnest`` of one array parameter per column did (bench/README.md, sink; other batch
sizes were not measured). Everything runs in the caller's transaction, so the rows
commit (or roll back) with the offsets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import asyncpg

from services.sink.rows import Row

NUL_STAND_IN = "\ufffd"
"""What a NUL becomes in a text or jsonb column, which cannot hold one (Postgres refuses
``\\u0000`` in both): U+FFFD, the replacement character, the same on every write and
replay. Log data is ``bytea`` and keeps every character as it was."""

_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
"""A ``\\u0000`` escape in JSON text (not an escaped backslash followed by ``u0000``)."""


def text_safe(value: Any) -> Any:
    """A text value Postgres takes: NUL replaced by :data:`NUL_STAND_IN`."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", NUL_STAND_IN)
    if isinstance(value, list) and any(isinstance(v, str) and "\x00" in v for v in value):
        return [text_safe(v) for v in value]
    return value


def json_safe(value: Any) -> Any:
    """JSON text jsonb takes: each NUL escape spelled as :data:`NUL_STAND_IN`."""
    if isinstance(value, str) and "\\u0000" in value:
        return _JSON_NUL.sub(r"\1\\ufffd", value)
    return value


_SAFE: dict[str, Callable[[Any], Any]] = {
    "text": text_safe,
    "text[]": text_safe,
    "jsonb": json_safe,
}
"""Per column type, what makes a value of that type storable whatever a tenant sent."""


@dataclass(frozen=True)
class Table:
    """One read-model table: columns in the migrations' order, with their SQL types."""

    name: str
    columns: tuple[tuple[str, str], ...]
    """(column, type as the migrations spell it), in table order."""
    key: tuple[str, ...]
    """The primary key: what a row is stored once per, and what an upsert overwrites by."""
    derived: bool = True
    """Derived from the ledger (rebuilt and compared by ``replay --verify``); False for
    bookkeeping (the consumed offsets) and the API's own data (the tenants' secrets)."""
    assigned: tuple[tuple[str, str], ...] = ()
    """Columns Postgres fills itself, after ``columns`` (``job_events.stream_position``, a
    bigserial): never written by the sink, and not compared by replay (a rebuild numbers
    its rows anew)."""
    kept: tuple[str, ...] = ()
    """Columns written once: an upsert's NULL there keeps what is stored (``jobs.spec``,
    which only the batch that applies the job's JobSubmitted sends)."""
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(c for c, _ in self.columns))
        unknown = [k for k in self.key if k not in self.names]
        if unknown:
            raise ValueError(f"table {self.name}: key column(s) {unknown} are not columns")

    @property
    def staging(self) -> str:
        """The connection's temporary table that a batch's rows are copied into first."""
        return f"staging_{self.name}"

    def staging_ddl(self) -> str:
        """The session's temporary table that COPY loads before the one INSERT ... SELECT."""
        cols = ", ".join(f"{c} {t}" for c, t in self.columns)
        return f"CREATE TEMP TABLE IF NOT EXISTS {self.staging} ({cols})"

    def tuples(self, table_rows: Sequence[Row]) -> list[tuple[Any, ...]]:
        """The rows as tuples in column order (what COPY takes); every column is required.

        Text and jsonb values go through :data:`_SAFE`: a NUL a tenant put in a name, an
        env value or a reason never makes Postgres refuse the batch.
        """
        get = itemgetter(*self.names)
        safe = [(i, _SAFE[t]) for i, (_, t) in enumerate(self.columns) if t in _SAFE]
        try:
            out = [get(row) for row in table_rows]
        except KeyError as exc:
            raise ValueError(
                f"a row for table {self.name} has no column {exc.args[0]!r}: "
                f"rows must give every column of services/sink/tables.py ({', '.join(self.names)})"
            ) from None
        for n, values in enumerate(out):
            fixed = None
            for i, make_safe in safe:
                value = make_safe(values[i])
                if value is not values[i]:
                    fixed = fixed or list(values)
                    fixed[i] = value
            if fixed is not None:
                out[n] = tuple(fixed)
        return out


def _pairs(columns: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for spec in columns.split(","):
        column, _, sql_type = spec.strip().partition(" ")
        if column:
            pairs.append((column, sql_type.strip()))
    return tuple(pairs)


def declare(
    name: str,
    key: tuple[str, ...],
    columns: str,
    *,
    derived: bool = True,
    assigned: str = "",
    kept: tuple[str, ...] = (),
) -> Table:
    """A table from ``"column type, column type, …"`` (types as in the migrations), and the
    columns Postgres assigns (:attr:`Table.assigned`) in the same form."""
    return Table(name, _pairs(columns), key, derived, _pairs(assigned), kept)


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        declare(
            "jobs",
            ("job_id",),
            "job_id text, tenant text, name text, status text, terminal boolean, "
            "attempt integer, image text, gpus integer, submitted_at timestamptz, "
            "updated_at timestamptz, terminal_at timestamptz, terminal_event text, "
            "failure_class text, attribution text, retryable boolean, summary text, "
            "advice text, event_count integer, view jsonb, spec jsonb",
            kept=("spec",),
        ),
        declare(
            "attempts",
            ("job_id", "attempt"),
            "job_id text, attempt integer, status text, node_id text, provider text, "
            "region text, gpu_count integer, gpu_model text, scheduled_at timestamptz, "
            "accepted_at timestamptz, held_from timestamptz, released_at timestamptz, "
            "started_at timestamptz, exited_at timestamptz, exit_code integer, "
            "signal integer, oom_killed boolean, runtime_s double precision, "
            "failure_class text, attribution text, view jsonb",
        ),
        declare(
            "job_events",
            ("event_id",),
            "event_id text, job_id text, seq integer, attempt integer, type text, "
            "occurred_at timestamptz, producer text, causation_id text, "
            "schema_version integer, payload jsonb",
            assigned="stream_position bigserial",
        ),
        declare(
            "failures",
            ("event_id",),
            "event_id text, job_id text, attempt integer, failure_class text, "
            "attribution text, retryable boolean, summary text, advice text, rule_id text, "
            "classifier_version text, evidence jsonb, occurred_at timestamptz",
        ),
        declare(
            "accounting_records",
            ("job_id",),
            "job_id text, tenant text, status text, final boolean, policy_version text, "
            "held_seconds double precision, gpu_seconds double precision, "
            "metered_gpu_seconds double precision, billable_gpu_seconds double precision, "
            "credited_gpu_seconds double precision, reconciled boolean, "
            "updated_at timestamptz, record jsonb, labels jsonb, currency text, "
            "billable_cost_nanos bigint, credited_cost_nanos bigint, unpriced_gpu_us bigint, "
            "price_versions integer[]",
        ),
        declare(
            "accounting_attempts",
            ("job_id", "attempt"),
            "job_id text, attempt integer, node_id text, held_from timestamptz, "
            "released_at timestamptz, held_seconds double precision, gpu_count integer, "
            "gpu_model text, gpu_seconds double precision, "
            "metered_gpu_seconds double precision, tick_count integer, "
            "missing_ticks integer[], attribution text, failure_class text, "
            "billable_gpu_seconds double precision, credited_gpu_seconds double precision, "
            "reconciled boolean, provider text, region text",
        ),
        declare(
            "log_chunks",
            ("job_id", "attempt", "stream", "seq"),
            "job_id text, attempt integer, stream text, seq integer, event_id text, "
            "first_line integer, line_count integer, data bytea, truncated boolean, "
            "occurred_at timestamptz",
        ),
        declare(
            "meter_ticks",
            ("job_id", "attempt", "tick_index"),
            "job_id text, attempt integer, tick_index integer, event_id text, node_id text, "
            "interval_start timestamptz, interval_s double precision, gpu_count integer, "
            "gpu_model text, gpu_seconds double precision, final boolean, "
            "occurred_at timestamptz, payload jsonb",
        ),
        declare(
            "node_events",
            ("event_id",),
            "event_id text, node_id text, seq integer, type text, occurred_at timestamptz, "
            "payload jsonb",
        ),
        declare(
            "nodes",
            ("node_id",),
            "node_id text, status text, provider text, region text, inventory_source text, "
            "inventory_note text, gpus jsonb, host_memory_mb integer, agent_version text, "
            "heartbeat_interval_s double precision, registered_at timestamptz, "
            "last_heartbeat_at timestamptz, last_heartbeat_seq integer, "
            "free_gpu_indices integer[], running_attempts text[], gpu_usage jsonb, "
            "drained_at timestamptz, drain_reason text",
        ),
        declare(
            "consumer_offsets",
            ("consumer", "topic", "partition"),
            "consumer text, topic text, partition integer, next_offset bigint",
            derived=False,
        ),
        # The API's secrets (services/secretstore.py): stored, never derived from the ledger.
        declare(
            "tenant_secrets",
            ("tenant", "name"),
            "tenant text, name text, sealed bytea, value_bytes integer, "
            "created_at timestamptz, updated_at timestamptz",
            derived=False,
        ),
        declare(
            "usage_lines",
            ("job_id", "attempt", "period_start"),
            "job_id text, attempt integer, period_start timestamptz, tenant text, "
            "labels jsonb, provider text, region text, gpu_model text, held_us bigint, "
            "gpu_us bigint, metered_gpu_us bigint, billable_gpu_us bigint, "
            "credited_gpu_us bigint, final boolean, price_version integer, "
            "per_gpu_hour_micros bigint, billable_cost_nanos bigint, credited_cost_nanos bigint",
        ),
        # Webhooks (services/webhooks): the API's subscriptions and the delivery service's
        # queue and log; stored, never derived from the ledger.
        declare(
            "webhook_subscriptions",
            ("id",),
            "id text, tenant text, url text, events text[], sealed bytea, "
            "sealed_previous bytea, previous_until timestamptz, created_at timestamptz, "
            "rotated_at timestamptz, enabled boolean, disabled_at timestamptz, "
            "disabled_reason text, consecutive_failures integer, retry_at timestamptz",
            derived=False,
        ),
        declare(
            "webhook_job_tenants",
            ("job_id",),
            "job_id text, tenant text, event_id text",
            derived=False,
        ),
        declare(
            "webhook_outbox",
            ("seq",),
            "seq bigserial, subscription_id text, event_id text, event_type text, body text, "
            "attempts integer, enqueued_at timestamptz",
            derived=False,
        ),
        declare(
            "webhook_deliveries",
            ("seq",),
            "seq bigserial, subscription_id text, event_id text, event_type text, "
            "attempt integer, at timestamptz, status_code integer, latency_ms integer, "
            "ok boolean, error text",
            derived=False,
        ),
        declare(
            "price_catalogs",
            ("event_id",),
            "event_id text, seq integer, version integer, currency text, "
            "published_at timestamptz, source text, accepted boolean, problems jsonb, "
            "payload jsonb",
        ),
        declare(
            "leader_fence",
            ("partition", "from_offset"),
            "partition integer, from_offset bigint, epoch bigint",
        ),
    )
}
"""Every table of the read-model schema, in the migrations' order."""

DERIVED_TABLES: dict[str, Table] = {n: t for n, t in TABLES.items() if t.derived}
"""The tables derived from the ledger: what ``replay --verify`` rebuilds and compares."""


async def _stage(conn: asyncpg.Connection, table: Table, table_rows: Sequence[Row]) -> None:
    """Empty ``table``'s staging table and COPY ``table_rows`` into it (binary)."""
    # A staging table belongs to the connection and vanishes with a rolled-back
    # transaction that created it: make sure it exists (a no-op once it does), in the
    # same round trip as the TRUNCATE. TRUNCATE rather than ON COMMIT DELETE ROWS: two
    # batches (or two statements on one table) can share a transaction.
    await conn.execute(f"{table.staging_ddl()}; TRUNCATE {table.staging}")
    await conn.copy_records_to_table(
        table.staging, records=table.tuples(table_rows), columns=table.names
    )


async def insert_ignore(
    conn: asyncpg.Connection,
    table: str,
    table_rows: Sequence[Row],
    conflict: Sequence[str] | None = None,
    returning: str | None = "1",
) -> list[asyncpg.Record]:
    """Insert ``table_rows`` in one statement, skipping rows whose ``conflict`` key exists.

    ``conflict`` defaults to the table's key. Returns one record (``returning``) per
    inserted row; with ``returning=None`` nothing comes back (the cheaper statement when
    the caller does not need to know). Naming the conflict columns makes any other
    unique violation (e.g. a job's ``seq``) an error rather than a skipped row. Rows of
    one call must not share a key (callers de-duplicate, keeping the first).
    """
    if not table_rows:
        return []
    declared = TABLES[table]
    conflict = declared.key if conflict is None else conflict
    await _stage(conn, declared, table_rows)
    names = ", ".join(declared.names)
    sql = (
        f"INSERT INTO {table} ({names}) SELECT {names} FROM {declared.staging} "
        f"ON CONFLICT ({', '.join(conflict)}) DO NOTHING"
    )
    if returning is None:
        await conn.execute(sql)
        return []
    return list(await conn.fetch(f"{sql} RETURNING {returning}"))


async def upsert(
    conn: asyncpg.Connection,
    table: str,
    table_rows: Sequence[Row],
    key: Sequence[str] | None = None,
) -> None:
    """Insert ``table_rows`` or overwrite the rows with the same key (one statement).

    ``key`` defaults to the table's key. Rows with the same key collapse to the last
    one, as successive upserts would.
    """
    if not table_rows:
        return
    declared = TABLES[table]
    key = declared.key if key is None else tuple(key)
    last = {tuple(row[k] for k in key): row for row in table_rows}
    await _stage(conn, declared, list(last.values()))
    names = ", ".join(declared.names)
    updates = ", ".join(
        f"{c} = COALESCE(EXCLUDED.{c}, {table}.{c})"
        if c in declared.kept
        else f"{c} = EXCLUDED.{c}"
        for c in declared.names
        if c not in key
    )
    await conn.execute(
        f"INSERT INTO {table} ({names}) SELECT {names} FROM {declared.staging} "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )
