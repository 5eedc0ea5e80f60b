"""The compacted ``job-state`` and ``accounting`` topics as a snapshot, for fast restarts.

A restarted processors worker rebuilds each partition's job histories from offset
0 (``services.processors.store``): the deciders need whole histories. Most jobs
of a long-lived ledger are finished, and a finished job's history is needed
again only if a late fact or a redelivered record for it arrives. The state and
accounting processors publish every job's latest view and accounting record on
two compacted topics; read back, they tell which jobs are *settled*, so a
restart can skip their records without decoding them (by key, on the raw
record) and load one such job's history only when something for it arrives.

``replay --verify`` does not use this: it refolds everything from offset 0 and
judges the published views against the rebuilt ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from schemas.views import TERMINAL_STATUSES, AccountingRecord, JobView
from services.ledger import compose
from services.ledger.port import LedgerPort


@dataclass
class Snapshot:
    """The latest published view and accounting record of each job of some partitions."""

    views: dict[str, JobView] = field(default_factory=dict)
    accounting: dict[str, AccountingRecord] = field(default_factory=dict)

    def settled(self) -> set[str]:
        """Jobs nothing more is expected for: see :func:`is_settled`."""
        return {
            job_id
            for job_id, view in self.views.items()
            if is_settled(view, self.accounting.get(job_id))
        }


def is_settled(view: JobView, record: AccountingRecord | None) -> bool:
    """Terminal, and accounted for: the record is final (every attempt released its
    compute), of the same status, and every attempt's lifecycle and meter agree.

    An unreconciled attempt is not settled: the facts that would reconcile it may still
    come, and the accounting processor must have the history to take them.
    """
    return (
        view.status in TERMINAL_STATUSES
        and record is not None
        and record.final
        and record.status == view.status
        and all(a.reconciled for a in record.attempts)
    )


async def read_snapshot(ledger: LedgerPort, partitions: Iterable[int] | None = None) -> Snapshot:
    """The latest view and accounting record per job of ``partitions`` (all when None).

    The topics are keyed by job id with the job-keyed topics' partition count, so
    partition p here covers the jobs of partition p of ``job-events``.
    """
    parts = None if partitions is None else list(partitions)
    out = Snapshot()
    settings = ledger.settings
    views = await compose.read_latest(ledger, settings.topic("job-state"), parts, "snapshot")
    records = await compose.read_latest(ledger, settings.topic("accounting"), parts, "snapshot")
    out.views = {k: r.value for k, r in views.items() if isinstance(r.value, JobView)}
    out.accounting = {
        k: r.value for k, r in records.items() if isinstance(r.value, AccountingRecord)
    }
    return out
