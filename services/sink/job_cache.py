"""Per-job folded state the sink keeps in memory between batches.

Without it every batch re-reads each touched job's stored history and ticks from
Postgres, re-parses them and re-folds them (most of the sink's time). With it a
batch folds only its new events onto the state the previous batches left.

The cache never decides what is true, Postgres does:

- A batch works on copies of the cached states. The copies replace the cached
  states only once Postgres reports the batch's transaction committed (checked
  at the start of the next batch with ``pg_xact_status``), so a rolled-back or
  crashed batch leaves nothing behind in memory either.
- A job the cache does not hold (first sight, evicted, after a restart, another
  schema) is loaded from the tables, exactly as they were committed.
- Which events and ticks are new is still decided by Postgres (the event-id
  lookup and ``ON CONFLICT``); the cache only supplies the fold and the history
  that accounting needs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from projections.fold import JobState
from schemas.events import Event, MeterTick
from schemas.views import JobView
from services.sink import rows

DEFAULT_CAPACITY = 4_096
"""Jobs kept in memory, least recently touched evicted first. A state holds the job's
decoded events: about 40 KiB for a typical single-attempt history, so ~160 MiB at most."""


@dataclass
class CachedJob:
    """What the tables hold for one job: its stored events, folded view and meter ticks."""

    seq: int = 0
    """The job's highest ``job_events.seq`` (0: no event stored yet)."""
    fold: JobState | None = None
    """The fold of ``history`` (``jobs.view`` is its frozen view), changed in place."""
    history: list[Event] = field(default_factory=list)
    """The stored job-events in ``seq`` order."""
    ticks: dict[tuple[int, int], MeterTick] = field(default_factory=dict)
    """The stored meter ticks by (attempt, tick_index)."""

    @property
    def view(self) -> JobView | None:
        """``jobs.view``: the fold frozen (once per change)."""
        return None if self.fold is None else self.fold.freeze()

    def copy(self) -> CachedJob:
        """A copy a batch may change; the cache keeps the original until the batch commits."""
        state = None if self.fold is None else self.fold.copy()
        return CachedJob(self.seq, state, list(self.history), dict(self.ticks))

    def sorted_ticks(self) -> list[MeterTick]:
        """The ticks in the table's key order (what ``ORDER BY attempt, tick_index`` gives)."""
        return [self.ticks[k] for k in sorted(self.ticks)]


async def load_states(
    conn: asyncpg.Connection, job_ids: list[str], held_ticks: Sequence[str] = ()
) -> dict[str, CachedJob]:
    """The committed (or this transaction's) state of ``job_ids`` read from the tables.

    ``held_ticks``: event ids of meter ticks the caller holds already (the ones its
    transaction just inserted), left out instead of read back and parsed again.
    """
    states = {job_id: CachedJob() for job_id in job_ids}
    if not job_ids:
        return states
    for r in await conn.fetch(
        "SELECT job_id, seq, type, payload FROM job_events WHERE job_id = ANY($1::text[]) "
        "ORDER BY job_id, seq",
        job_ids,
    ):
        state = states[r["job_id"]]
        state.history.append(rows.event_from_payload(r["type"], r["payload"]))
        state.seq = r["seq"]
    for r in await conn.fetch(
        "SELECT job_id, view FROM jobs WHERE job_id = ANY($1::text[])",
        [j for j, s in states.items() if s.seq],
    ):
        states[r["job_id"]].fold = JobState.of(rows.from_stored(JobView, r["view"]))
    for r in await conn.fetch(
        "SELECT job_id, attempt, tick_index, payload FROM meter_ticks "
        "WHERE job_id = ANY($1::text[]) AND NOT event_id = ANY($2::text[])",
        job_ids,
        list(held_ticks),
    ):
        tick = rows.from_stored(MeterTick, r["payload"])
        states[r["job_id"]].ticks[(r["attempt"], r["tick_index"])] = tick
    return states


class JobCache:
    """Committed job states, plus the states of the batch whose commit is not yet known."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._committed: OrderedDict[str, CachedJob] = OrderedDict()
        self._staged: dict[str, CachedJob] = {}
        self._staged_xact: str | None = None
        self._xact: str | None = None
        self._schema: str | None = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._committed)

    def held(self) -> list[CachedJob]:
        """The committed states held now (what the memory bound is about)."""
        return list(self._committed.values())

    async def begin(self, conn: asyncpg.Connection) -> None:
        """Settle the previous batch's states against Postgres; call first in every batch."""
        row = await conn.fetchrow(
            "SELECT pg_current_xact_id()::text AS xact, current_schema() AS schema, "
            "CASE WHEN $1::text IS NULL THEN NULL ELSE pg_xact_status($1::text::xid8) END "
            "AS status",
            self._staged_xact,
        )
        assert row is not None
        self._xact = row["xact"]
        if row["schema"] != self._schema:
            # Another schema's tables: nothing known about them.
            self._committed.clear()
            self._staged, self._staged_xact = {}, None
            self._schema = row["schema"]
            return
        if self._staged_xact is None or self._staged_xact == self._xact:
            return  # nothing pending, or a second batch inside the same transaction
        if row["status"] == "committed":
            for job_id, state in self._staged.items():
                self._committed[job_id] = state
                self._committed.move_to_end(job_id)
            while len(self._committed) > self.capacity:
                self._committed.popitem(last=False)
        self._staged, self._staged_xact = {}, None

    def clear(self) -> None:
        """Forget everything: after a lost connection whether the last batch committed is
        unknown (and ``pg_xact_status`` of a transaction the crash cut off may even be
        an error), so every job is read back from the tables as they were committed."""
        self._committed.clear()
        self._staged, self._staged_xact, self._xact = {}, None, None

    def get(self, job_id: str) -> CachedJob | None:
        """A copy of the job's state as this transaction sees it, None when not held."""
        state = self._staged.get(job_id) if self._staged_xact == self._xact else None
        if state is None:
            state = self._committed.get(job_id)
        if state is None:
            self.misses += 1
            return None
        self.hits += 1
        return state.copy()

    def stage(self, states: dict[str, CachedJob]) -> None:
        """The states this transaction leaves; trusted once it is seen committed."""
        if self._staged_xact != self._xact:
            self._staged, self._staged_xact = {}, self._xact
        self._staged.update(states)
