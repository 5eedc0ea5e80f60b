"""Row-by-row comparison of two copies of the read-model tables inside one database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from services.sink.tables import DERIVED_TABLES

COMPARED_TABLES: dict[str, tuple[str, ...]] = {n: t.key for n, t in DERIVED_TABLES.items()}
"""Every derived table and its key. consumer_offsets is bookkeeping, not derived data."""


@dataclass(frozen=True)
class RowDifference:
    """One row where the live table and the one rebuilt from the ledger differ."""

    table: str
    key: tuple[Any, ...]
    kind: str
    """missing (rebuilt has it, live does not), extra (live only) or changed."""
    columns: tuple[str, ...] = ()
    live: dict[str, Any] | None = None
    rebuilt: dict[str, Any] | None = None

    def line(self) -> str:
        """The difference in a sentence, naming the table and the row's key."""
        key = "/".join(str(k) for k in self.key)
        if self.kind == "missing":
            return f"{self.table} {key}: in the ledger but missing from the live table"
        if self.kind == "extra":
            return f"{self.table} {key}: in the live table but not derivable from the ledger"
        shown = []
        for col in self.columns[:6]:
            live = _short(self.live.get(col) if self.live else None)
            rebuilt = _short(self.rebuilt.get(col) if self.rebuilt else None)
            shown.append(f"{col}: live {live} != rebuilt {rebuilt}")
        return f"{self.table} {key}: " + "; ".join(shown)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def compare_table(
    conn: asyncpg.Connection, table: str, live: str, rebuilt: str, limit: int = 50
) -> tuple[int, list[RowDifference]]:
    """(number of differing keys, up to ``limit`` of them) between two copies of a table."""
    key = COMPARED_TABLES[table]
    cols = ", ".join(key)
    # The declared columns only: what Postgres assigns (a bigserial) differs in a rebuild.
    every = ", ".join(DERIVED_TABLES[table].names)
    sql = (
        f"SELECT {cols} FROM ("
        f"(SELECT {every} FROM {live} EXCEPT SELECT {every} FROM {rebuilt}) UNION ALL "
        f"(SELECT {every} FROM {rebuilt} EXCEPT SELECT {every} FROM {live})) d "
        f"GROUP BY {cols} ORDER BY {cols}"
    )
    keys = [tuple(r) for r in await conn.fetch(sql)]
    out: list[RowDifference] = []
    where = " AND ".join(f"{c} = ${i}" for i, c in enumerate(key, start=1))
    for k in keys[:limit]:
        live_row = await conn.fetchrow(f"SELECT {every} FROM {live} WHERE {where}", *k)
        rebuilt_row = await conn.fetchrow(f"SELECT {every} FROM {rebuilt} WHERE {where}", *k)
        if live_row is None:
            out.append(RowDifference(table, k, "missing", rebuilt=dict(rebuilt_row or {})))
        elif rebuilt_row is None:
            out.append(RowDifference(table, k, "extra", live=dict(live_row)))
        else:
            a, b = dict(live_row), dict(rebuilt_row)
            changed = tuple(c for c in a if a[c] != b.get(c))
            out.append(RowDifference(table, k, "changed", changed, a, b))
    return len(keys), out
