"""The tables declared in services/sink/tables.py are exactly what the migrations create.

The declaration generates the writer's statements and the replay comparison; the
migrations create the tables. This test parses every migration file (no database
needed) and compares table by table: names, columns in order, types and keys.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from services.settings import Settings
from services.sink.tables import TABLES, Table, declare, upsert

MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "sink" / "migrations"

_CONSTRAINT_WORDS = ("PRIMARY", "NOT", "NULL", "DEFAULT", "UNIQUE", "REFERENCES", "CHECK")
_TYPE_ALIASES = {
    "int": "integer",
    "int4": "integer",
    "int8": "bigint",
    "bool": "boolean",
    "float8": "double precision",
    "timestamp with time zone": "timestamptz",
}


def _split_top_level(body: str) -> list[str]:
    """Split a CREATE TABLE body on the commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _column(spec: str) -> tuple[str, str, bool]:
    """(name, normalised type, declared PRIMARY KEY inline) of one column definition."""
    name, rest = spec.split(None, 1)
    words = rest.split()
    type_words = []
    for word in words:
        if word.upper() in _CONSTRAINT_WORDS:
            break
        type_words.append(word)
    sql_type = " ".join(type_words).lower()
    array = sql_type.endswith("[]")
    base = _TYPE_ALIASES.get(sql_type.removesuffix("[]"), sql_type.removesuffix("[]"))
    return name.lower(), base + ("[]" if array else ""), "PRIMARY KEY" in rest.upper()


def parse_migrations(sql: str) -> dict[str, Table]:
    """Every table the SQL creates (CREATE TABLE, then ALTER TABLE … ADD COLUMN)."""
    sql = re.sub(r"--[^\n]*", "", sql)
    columns: dict[str, list[tuple[str, str]]] = {}
    keys: dict[str, tuple[str, ...]] = {}
    for name, body in re.findall(r"CREATE TABLE\s+(\w+)\s*\((.*?)\);", sql, re.S | re.I):
        cols: list[tuple[str, str]] = []
        for part in _split_top_level(body):
            key = re.match(r"PRIMARY KEY\s*\((.*)\)", part, re.I)
            if key:
                keys[name] = tuple(k.strip() for k in key.group(1).split(","))
            elif part.split()[0].upper() in ("UNIQUE", "CONSTRAINT", "CHECK", "FOREIGN"):
                continue
            else:
                column, sql_type, primary = _column(part)
                cols.append((column, sql_type))
                if primary:
                    keys[name] = (column,)
        columns[name] = cols
    for name, spec in re.findall(
        r"ALTER TABLE\s+(\w+)\s+ADD COLUMN\s+(?:IF NOT EXISTS\s+)?([^;]+);", sql, re.I
    ):
        column, sql_type, _ = _column(spec)
        columns[name].append((column, sql_type))
    for name, column, spec in re.findall(
        r"ALTER TABLE\s+(\w+)\s+ALTER COLUMN\s+(\w+)\s+TYPE\s+(\S+)[^;]*;", sql, re.I
    ):
        _, sql_type, _ = _column(f"{column} {spec}")
        columns[name] = [(c, sql_type if c == column.lower() else t) for c, t in columns[name]]
    out = {}
    for name, cols in columns.items():
        declared = TABLES.get(name)
        assigned = {c for c, _ in declared.assigned} if declared else set()
        written = [c for c in cols if c[0] not in assigned]
        filled = [c for c in cols if c[0] in assigned]
        out[name] = Table(
            name, tuple(written), keys[name], declared.derived if declared else True, tuple(filled)
        )
    return out


def migrated() -> dict[str, Table]:
    files = sorted(MIGRATIONS.glob("*.sql"))
    assert files, f"no migrations under {MIGRATIONS}"
    return parse_migrations("\n".join(f.read_text() for f in files))


def test_the_declaration_is_what_the_migrations_create() -> None:
    created = migrated()
    assert list(created) == list(TABLES), "tables (or their order) differ"
    for name, table in TABLES.items():
        assert created[name].columns == table.columns, name
        assert created[name].assigned == table.assigned, name
        assert created[name].key == table.key, name


def test_the_parser_sees_a_difference_in_a_column_a_type_or_a_key() -> None:
    """The comparison above cannot pass by parsing nothing: each kind of change is seen."""
    sql = """
        -- a comment with CREATE TABLE inside it;
        CREATE TABLE t (
            a text NOT NULL DEFAULT '',
            b integer[] NOT NULL,
            c double precision,
            d timestamptz,
            UNIQUE (a, b),
            PRIMARY KEY (a, c)
        );
        CREATE TABLE u (id int4 PRIMARY KEY, n bigint);
        ALTER TABLE u ADD COLUMN IF NOT EXISTS extra jsonb NOT NULL DEFAULT '{}';
        ALTER TABLE t ALTER COLUMN d TYPE bytea USING convert_to(d::text, 'UTF8');
    """
    parsed = parse_migrations(sql)
    assert parsed["t"] == declare(
        "t", ("a", "c"), "a text, b integer[], c double precision, d bytea"
    )
    assert parsed["u"] == declare("u", ("id",), "id integer, n bigint, extra jsonb")
    assert parsed["u"] != declare("u", ("n",), "id integer, n bigint, extra jsonb")
    assert parsed["t"] != declare(
        "t", ("a", "c"), "a text, b integer, c double precision, d timestamptz"
    )


def test_a_row_without_a_declared_column_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"table jobs has no column 'advice'"):
        row = {c: None for c in TABLES["jobs"].names if c != "advice"}
        TABLES["jobs"].tuples([row])


def _offset_row(next_offset: int) -> dict[str, object]:
    return {"consumer": "c", "topic": "t", "partition": 0, "next_offset": next_offset}


@pytest.mark.integration
async def test_staging_starts_empty_for_every_statement_and_survives_a_rollback(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    """Two upserts of one key in one transaction each see only their own rows (rows left
    in the staging table would make the second one hit its key twice), and a staging
    table that a rolled-back transaction created is made again on the same connection."""
    _, pool = pg
    async with pool.acquire() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await upsert(conn, "consumer_offsets", [_offset_row(1)])
                raise RuntimeError("roll back the transaction that created the staging table")
        async with conn.transaction():
            await upsert(conn, "consumer_offsets", [_offset_row(2)])
            await upsert(conn, "consumer_offsets", [_offset_row(3)])
        stored = await conn.fetch("SELECT next_offset FROM consumer_offsets")
    assert [r["next_offset"] for r in stored] == [3]
