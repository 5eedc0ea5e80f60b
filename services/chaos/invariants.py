"""The chaos suite's invariants over a whole ledger, as plain functions of what was read.

Nothing here talks to Kafka or Postgres: :mod:`.collect` reads the topics into a
:class:`LedgerSnapshot`, the harness records what producers and the API
acknowledged in :class:`Acks`, and :func:`check` returns every violation, so a
doctored history in a unit test fails it exactly like a broken run would.

The invariants (each :class:`Finding` names one):

- ``lost``: an event id a producer saw acknowledged, or a job the API answered
  201/202 for, is not on the ledger.
- ``multiple_terminal``: a job has more than one terminal event (distinct ids;
  the same id appended twice is one fact).
- ``stuck``: a job has no terminal event although its bound
  (:func:`terminal_bound_s`) has passed; ``late``: its terminal event came
  after the bound.
- ``tick_counted_twice``: an attempt's metered GPU-seconds exceed the sum of
  its distinct meter ticks (one tick index counted more than once).
- ``unbalanced``: billable + credited differs from the held GPU-seconds of an
  attempt or of the job.
- ``not_final`` / ``unreconciled`` / ``no_accounting``: a terminal job's
  accounting record is missing, not final, or not reconciled with the meter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from projections.bounds import Thresholds
from projections.bounds import terminal_bound_s as platform_bound_s
from schemas.events import TERMINAL_EVENTS, Event, JobSubmitted, MeterTick
from schemas.spec import JobSpec
from schemas.views import AccountingRecord

TOLERANCE = 1e-6
"""GPU-seconds: the policy says billable + credited = held *exactly*; floats add up."""

TERMINAL_TYPES = frozenset(cls.__name__ for cls in TERMINAL_EVENTS)
INVARIANTS = (
    "lost",
    "multiple_terminal",
    "stuck",
    "late",
    "tick_counted_twice",
    "unbalanced",
    "no_accounting",
    "not_final",
    "unreconciled",
)
DOUBLE_BILLING = frozenset({"tick_counted_twice", "unbalanced"})
"""Findings that mean a user could be charged twice (or for more than was held)."""


@dataclass(frozen=True)
class Timings:
    """The deadlines of the running installation, and the slack the harness allows."""

    thresholds: Thresholds
    slack_s: float = 60.0
    """On top of the platform's bound: time no deadline keeper could act on, which
    the bound leaves out by design (a processors worker being restarted, a broker
    outage during which nobody can append the verdict)."""


def terminal_bound_s(spec: JobSpec, timings: Timings) -> float:
    """Longest a job may take from submission to its terminal event.

    The platform's own bound (:func:`projections.bounds.terminal_bound_s`, the
    same formula the lifecycle documents) plus the harness's slack.
    """
    return platform_bound_s(spec, timings.thresholds) + timings.slack_s


@dataclass
class LedgerSnapshot:
    """What was read back from the ledger at ``read_at``."""

    read_at: datetime
    job_events: dict[str, list[Event]] = field(default_factory=dict)
    """Per job, its job-events in log order (duplicates included)."""
    meter_ticks: list[MeterTick] = field(default_factory=list)
    accounting: dict[str, AccountingRecord] = field(default_factory=dict)
    """The latest accounting record per job (the compacted topic's last value)."""
    event_ids: set[str] = field(default_factory=set)
    """Every event id read back, on any topic."""
    appended_at: dict[str, datetime] = field(default_factory=dict)
    """Event id -> the record's timestamp on job-events (set by the producing service's
    clock when it appended), for times to terminal that an agent's skewed clock (which
    derived events inherit as ``occurred_at``) does not distort."""

    def when(self, event: Event) -> datetime:
        """When the event was appended (the producing service's clock), else its ``occurred_at``."""
        return self.appended_at.get(event.event_id, event.occurred_at)


@dataclass
class Acks:
    """What the harness saw acknowledged: by producers (event ids) and by the API (jobs)."""

    event_ids: set[str] = field(default_factory=set)
    jobs: dict[str, datetime] = field(default_factory=dict)
    """Job id -> when the API acknowledged it."""


@dataclass(frozen=True)
class Finding:
    """One broken invariant: which, for which job, and the evidence."""

    invariant: str
    job_id: str
    detail: str

    def line(self) -> str:
        """The finding as a report line."""
        return f"{self.invariant:<18} {self.job_id or '-':<18} {self.detail}"


@dataclass
class Verdict:
    """The check's outcome over the whole ledger: every finding, and what was checked."""

    findings: list[Finding]
    jobs: int
    terminal: int
    events: int
    longest_time_to_terminal_s: float
    longest_job: str

    def count(self, invariant: str) -> int:
        """Findings of one invariant."""
        return sum(1 for f in self.findings if f.invariant == invariant)

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return not self.findings

    @property
    def lost(self) -> int:
        """Acknowledged jobs the ledger does not have."""
        return self.count("lost")

    @property
    def stuck(self) -> int:
        """Jobs that did not end within their bound."""
        return self.count("stuck")

    @property
    def double_billed(self) -> int:
        """Attempts billed twice, each counted once whatever the invariants that saw it."""
        return len(
            {
                (f.job_id, f.detail.split(":")[0])
                for f in self.findings
                if f.invariant in DOUBLE_BILLING
            }
        )

    def summary(self) -> dict[str, Any]:
        """The verdict's figures, as the report's JSON holds them."""
        return {
            "ok": self.ok,
            "jobs": self.jobs,
            "terminal": self.terminal,
            "events": self.events,
            "lost": self.lost,
            "stuck": self.stuck,
            "double_billed": self.double_billed,
            "longest_time_to_terminal_s": round(self.longest_time_to_terminal_s, 2),
            "longest_job": self.longest_job,
            "findings": {name: self.count(name) for name in INVARIANTS},
            "examples": [f.line() for f in self.findings[:20]],
        }


def check(
    snapshot: LedgerSnapshot,
    acks: Acks,
    timings: Timings,
    settle_s: float = 0.0,
) -> Verdict:
    """Every invariant over the whole snapshot.

    ``settle_s``: while the run goes on, a job that turned terminal less than this
    long before ``read_at`` is not yet held to its accounting being final (the
    processors publish the record right after the terminal event).
    """
    findings: list[Finding] = []
    findings += _lost(snapshot, acks)
    longest, longest_job, terminal = 0.0, "", 0
    for job_id, events in snapshot.job_events.items():
        submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
        if submitted is None:
            continue  # another producer's job on the same topics; nothing to bound it by
        ends = _distinct(e for e in events if e.type in TERMINAL_TYPES)
        bound = terminal_bound_s(submitted.spec, timings)
        if len(ends) > 1:
            findings.append(
                Finding(
                    "multiple_terminal", job_id, ", ".join(f"{e.type}@{e.event_id}" for e in ends)
                )
            )
        if not ends:
            age = (snapshot.read_at - snapshot.when(submitted)).total_seconds()
            if age > bound:
                findings.append(
                    Finding(
                        "stuck", job_id, f"no terminal event {age:.0f} s in (bound {bound:.0f} s)"
                    )
                )
            continue
        terminal += 1
        took = (snapshot.when(ends[0]) - snapshot.when(submitted)).total_seconds()
        if took > longest:
            longest, longest_job = took, job_id
        if took > bound:
            findings.append(
                Finding("late", job_id, f"{ends[0].type} after {took:.0f} s > {bound:.0f} s")
            )
        settled = (snapshot.read_at - snapshot.when(ends[0])).total_seconds() >= settle_s
        if settled:
            findings += _accounting(job_id, snapshot.accounting.get(job_id))
    findings += _billing(snapshot)
    return Verdict(
        findings=findings,
        jobs=sum(
            1
            for events in snapshot.job_events.values()
            if any(isinstance(e, JobSubmitted) for e in events)
        ),
        terminal=terminal,
        events=len(snapshot.event_ids),
        longest_time_to_terminal_s=longest,
        longest_job=longest_job,
    )


def _distinct(events: Iterable[Event]) -> list[Event]:
    seen: dict[str, Event] = {}
    for event in events:
        seen.setdefault(event.event_id, event)
    return list(seen.values())


def _lost(snapshot: LedgerSnapshot, acks: Acks) -> list[Finding]:
    findings = [
        Finding("lost", "", f"event {event_id} was acknowledged but is not on the ledger")
        for event_id in sorted(acks.event_ids - snapshot.event_ids)
    ]
    for job_id in sorted(acks.jobs):
        events = snapshot.job_events.get(job_id, [])
        if not any(isinstance(e, JobSubmitted) for e in events):
            findings.append(Finding("lost", job_id, "the API acknowledged it; no JobSubmitted"))
    return findings


def _accounting(job_id: str, record: AccountingRecord | None) -> list[Finding]:
    if record is None:
        return [Finding("no_accounting", job_id, "terminal but no accounting record")]
    findings = []
    if not record.final:
        findings.append(Finding("not_final", job_id, f"status {record.status}, record not final"))
    if not record.reconciled:
        bad = [str(a.attempt) for a in record.attempts if not a.reconciled]
        findings.append(
            Finding(
                "unreconciled",
                job_id,
                f"attempt(s) {', '.join(bad) or '?'}: lifecycle and meter disagree",
            )
        )
    return findings


def _billing(snapshot: LedgerSnapshot) -> list[Finding]:
    """Per attempt: metered = distinct ticks; billable + credited = held; the same per job."""
    ticks: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for tick in snapshot.meter_ticks:
        ticks[(tick.job_id, tick.attempt)].setdefault(tick.tick_index, tick.gpu_seconds)
    findings = []
    for job_id, record in snapshot.accounting.items():
        for a in record.attempts:
            distinct = sum(ticks.get((job_id, a.attempt), {}).values())
            if a.metered_gpu_seconds > distinct + TOLERANCE:
                findings.append(
                    Finding(
                        "tick_counted_twice",
                        job_id,
                        f"attempt {a.attempt}: metered {a.metered_gpu_seconds:.6f} GPU-s > "
                        f"{distinct:.6f} in distinct ticks",
                    )
                )
            owed = a.billable_gpu_seconds + a.credited_gpu_seconds
            if (
                abs(owed - a.gpu_seconds) > TOLERANCE
                or min(a.billable_gpu_seconds, a.credited_gpu_seconds) < -TOLERANCE
            ):
                findings.append(
                    Finding(
                        "unbalanced",
                        job_id,
                        f"attempt {a.attempt}: billable {a.billable_gpu_seconds:.6f} + credited "
                        f"{a.credited_gpu_seconds:.6f} != held {a.gpu_seconds:.6f} GPU-s",
                    )
                )
        owed = record.billable_gpu_seconds + record.credited_gpu_seconds
        if abs(owed - record.gpu_seconds) > TOLERANCE * max(1, len(record.attempts)):
            findings.append(
                Finding(
                    "unbalanced",
                    job_id,
                    f"job: billable {record.billable_gpu_seconds:.6f} + credited "
                    f"{record.credited_gpu_seconds:.6f} != held {record.gpu_seconds:.6f} GPU-s",
                )
            )
    return findings
