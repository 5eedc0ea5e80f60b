"""Rebuild every job's state, accounting and implied decisions from the ledger.

This is the in-memory half of ``gridledger replay --verify`` (the other half
rebuilds the Postgres read models with the sink's writer): read the topics the
folds consume from offset 0, fold each job's job-events with
``projections.fold`` (equal to ``projections.job_state.project``), account it with the sink's
``account``/``default_policy`` (the accounting processor's functions), and
optionally derive its decisions (``projections.decisions.react_all``) and judge
the view the state processor published on ``job-state``.

Every job-keyed topic has the same partition count and is keyed by job id, so
partition p of every topic holds whole jobs. :func:`rebuild` therefore splits
the partitions over worker processes; each reads its partitions of every topic
with its own consumer, folds its jobs and sends back only the results. One
worker is the same code run in this process, and both give identical results.

Heartbeats and log chunks are not read: no fold takes them (``is_job_event``
excludes them from job_state, accounting takes only meter ticks), so decoding
them would change nothing that is rebuilt here.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from projections import job_state
from projections.fence import Fence
from projections.fold import fold
from schemas.errors import LedgerError
from schemas.events import Event, MeterTick
from schemas.topics import FOLDED_TOPICS
from schemas.views import AccountingRecord, JobView
from services.gc_tuning import tuned_gc
from services.ledger import compose
from services.ledger.client import Ledger
from services.replay.decisions import DecisionDrift, drift_of
from services.settings import Settings
from services.sink.writer import account, default_policy, new_view

JOB_STATE = "job-state"

NOT_A_VIEW = "not a view"
"""The verdict on a key whose latest decodable job-state record is no JobView."""


@dataclass(frozen=True)
class Options:
    """What a rebuild derives besides each job's view and accounting record."""

    decisions: bool = False
    """Re-derive each job's decisions and report drift (``services.replay.decisions``)."""
    compare_published: bool = False
    """Judge the views the state processor published on job-state against the rebuilt ones."""
    keep_models: bool = True
    """Return every JobView and AccountingRecord. Without it a worker sends back only each
    job's status (a worker's models cost more to send between processes than to rebuild)."""


@dataclass
class Rebuilt:
    """The results of a rebuild, per job id (jobs with at least one job-event)."""

    statuses: dict[str, str] = field(default_factory=dict)
    """Each job's rebuilt status."""
    views: dict[str, JobView] = field(default_factory=dict)
    """Only with ``keep_models``."""
    accounting: dict[str, AccountingRecord] = field(default_factory=dict)
    drift: dict[str, list[DecisionDrift]] = field(default_factory=dict)
    """Only with ``decisions=True``: each job's decision drift (jobs without drift omitted)."""
    published: dict[str, str] = field(default_factory=dict)
    """Only with ``compare_published=True``: for each key on the job-state topic, the verdict
    of :func:`judge` on its latest view ('equal', 'behind' or what differs), 'a view without
    any job event', or :data:`NOT_A_VIEW`."""
    records: dict[str, int] = field(default_factory=dict)
    """Decoded records read per topic suffix (job-state included when judged)."""
    workers: int = 1
    cpu_s: float = 0.0
    """CPU seconds the rebuild took in its process(es), reading to results (no start-up)."""
    peak_rss_mb: float = 0.0
    """The largest peak resident memory of the process(es) that rebuilt (in-process: this
    process's peak over its whole life)."""

    @property
    def events(self) -> int:
        """Records read and decoded from the folded topics."""
        return sum(n for suffix, n in self.records.items() if suffix != JOB_STATE)

    def merge(self, other: Rebuilt) -> None:
        """Add the results of other partitions (disjoint jobs)."""
        self.statuses.update(other.statuses)
        self.views.update(other.views)
        self.accounting.update(other.accounting)
        self.drift.update(other.drift)
        self.published.update(other.published)
        for suffix, n in other.records.items():
            self.records[suffix] = self.records.get(suffix, 0) + n
        self.cpu_s += other.cpu_s
        self.peak_rss_mb = max(self.peak_rss_mb, other.peak_rss_mb)

    def sorted(self) -> Rebuilt:
        """The same results with every mapping in job id order (deterministic output)."""
        return Rebuilt(
            statuses=dict(sorted(self.statuses.items())),
            views=dict(sorted(self.views.items())),
            accounting=dict(sorted(self.accounting.items())),
            drift=dict(sorted(self.drift.items())),
            published=dict(sorted(self.published.items())),
            records=dict(sorted(self.records.items())),
            workers=self.workers,
            cpu_s=self.cpu_s,
            peak_rss_mb=self.peak_rss_mb,
        )

    def all_drift(self) -> list[DecisionDrift]:
        """Every job's drift in job id order (what ``decision_drift`` returns)."""
        return [d for job_id in sorted(self.drift) for d in self.drift[job_id]]


def judge(view: JobView, history: Sequence[Event]) -> str:
    """'equal', 'behind' (the view is the fold of a prefix of the history) or what differs."""
    folded = _fold(view.job_id, history)
    if folded == view:
        return "equal"
    # Rare (processor lag or a real difference): find out whether a prefix matches.
    prefix = new_view(view.job_id)
    for event in history:
        prefix = job_state.evolve(prefix, event)
        if prefix == view:
            return "behind"
    if folded is None:
        return "no job event of this job could be folded"
    diff = [
        name
        for name in JobView.model_fields
        if name != "applied_event_ids" and getattr(view, name) != getattr(folded, name)
    ]
    return "the published view differs from the rebuilt one in " + ", ".join(diff or ["ids"])


def _fold(job_id: str, history: Sequence[Event]) -> JobView | None:
    """The sink's fold (``projections.fold``, which equals ``evolve`` from ``new_view``)."""
    state = fold(history)
    return None if state is None else state.freeze()


async def rebuild_partitions(
    settings: Settings,
    partitions: Sequence[int] | None = None,
    options: Options = Options(),
) -> Rebuilt:
    """Rebuild the jobs of ``partitions`` (all when None) of the job-keyed topics."""
    with tuned_gc():
        async with Ledger(settings, "replay") as ledger:
            return await _rebuild(ledger, partitions, options)


async def _rebuild(ledger: Ledger, partitions: Sequence[int] | None, options: Options) -> Rebuilt:
    settings = ledger.settings
    cpu = time.process_time()
    parts = None if partitions is None else list(partitions)
    out = Rebuilt()
    histories: dict[str, list[Event]] = defaultdict(list)
    ticks: dict[str, list[MeterTick]] = defaultdict(list)
    fence = Fence()  # a deposed scheduler's decisions are no job's history
    for suffix in FOLDED_TOPICS:
        count = 0
        # A reader: an undecodable record is skipped (dead_letter=False); the sink parks it.
        async for batch in ledger.read_batches(settings.topic(suffix), parts, "replay"):
            count += len(batch)
            for record in batch:
                value = record.value
                if suffix == "job-events" and isinstance(value, Event):
                    if fence.admits(record.partition, record.offset, value):
                        histories[record.key].append(value)
                elif isinstance(value, MeterTick):
                    ticks[record.key].append(value)
        out.records[suffix] = count
    policy = default_policy()
    for job_id, history in histories.items():
        state = fold(history)
        assert state is not None  # a job is in ``histories`` once it has an event
        view = state.freeze()
        accounted = account(history, ticks.get(job_id, []), policy, view=view)
        out.statuses[job_id] = view.status
        if options.keep_models:
            out.views[job_id], out.accounting[job_id] = view, accounted
        if options.decisions:
            drift = drift_of(job_id, history)
            if drift:
                out.drift[job_id] = drift
    if options.compare_published:
        await _judge_published(ledger, parts, histories, out)
    out.cpu_s = time.process_time() - cpu
    out.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return out


async def _judge_published(
    ledger: Ledger, parts: list[int] | None, histories: dict[str, list[Event]], out: Rebuilt
) -> None:
    published: dict[str, JobView | None] = {}
    count = 0
    topic = ledger.settings.topic(JOB_STATE)
    async for record in compose.read_partitions(ledger, topic, parts, "replay"):
        count += 1
        # The latest record per key is the published view (tombstones are not yielded).
        published[record.key] = record.value if isinstance(record.value, JobView) else None
    out.records[JOB_STATE] = count
    for job_id, view in published.items():
        if view is None:
            out.published[job_id] = NOT_A_VIEW
        elif job_id not in histories:
            out.published[job_id] = "a view without any job event"
        else:
            out.published[job_id] = judge(view, histories[job_id])


def _worker(settings: Settings, partitions: list[int], options: Options) -> Rebuilt:
    """Entry point of a worker process."""
    return asyncio.run(rebuild_partitions(settings, partitions, options))


def default_workers() -> int:
    """One worker per core this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


async def rebuild(
    settings: Settings,
    options: Options = Options(),
    *,
    workers: int | None = None,
) -> Rebuilt:
    """Rebuild every job, with ``workers`` processes (default: one per core; 1: in-process).

    The job-keyed topics share ``settings.job_partitions`` partitions (``services.ledger.topics``),
    which is what makes a partition's jobs whole; partition p goes to worker p % workers.
    Topics with different partition counts are rebuilt in-process.
    """
    suffixes = [*FOLDED_TOPICS, *([JOB_STATE] if options.compare_published else [])]
    async with Ledger(settings, "replay") as ledger:
        counts = {await ledger.partitions(settings.topic(s)) for s in suffixes}
    wanted = default_workers() if workers is None else workers
    # Topics with different partition counts would split a job over two workers.
    count = max(1, min(wanted, *counts)) if len(counts) == 1 else 1
    if count == 1:
        return (await rebuild_partitions(settings, None, options)).sorted()
    (partitions,) = counts
    shares = [list(range(i, partitions, count)) for i in range(count)]
    loop = asyncio.get_running_loop()
    # forkserver: workers fork from a clean server that imported this module once, rather
    # than from this process (which may hold threads and an event loop) or a fresh import each.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", __name__])
    try:
        with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
            parts = await asyncio.gather(
                *(loop.run_in_executor(pool, _worker, settings, share, options) for share in shares)
            )
    except BrokenProcessPool as exc:
        raise LedgerError(
            "a replay worker process died (out of memory?); rerun with fewer workers "
            "(--workers 1 rebuilds in this process)"
        ) from exc
    merged = Rebuilt(workers=count)
    for part in parts:
        merged.merge(part)
    return merged.sorted()
