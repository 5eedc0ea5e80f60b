"""``gridledger replay --job JOB``: one job's history rebuilt, and the decisions it implies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from projections.history import unique
from schemas.events import Event, MeterTick
from schemas.views import AccountingRecord, JobView
from services.ledger import compose
from services.ledger.client import Ledger
from services.replay.decisions import DecisionDrift, drift_of
from services.replay.offline import fold


@dataclass
class JobReplay:
    """One job's history read back from the ledger, and the view it folds to."""

    job_id: str
    history: list[Event]
    ticks: list[MeterTick]
    view: JobView | None
    accounting: AccountingRecord | None
    implied: list[Event]
    drift: list[DecisionDrift]

    def to_json(self) -> dict[str, Any]:
        """The replay as a JSON document (`gridledger replay JOB -o json`)."""
        return {
            "job_id": self.job_id,
            "history": [e.model_dump(mode="json") for e in self.history],
            "view": self.view.model_dump(mode="json") if self.view else None,
            "accounting": self.accounting.model_dump(mode="json") if self.accounting else None,
            "implied_decisions": [e.model_dump(mode="json") for e in self.implied],
            "drift": [d.line() for d in self.drift],
        }

    def lines(self) -> list[str]:
        """The history for people: one line per event, with the time since the previous one."""
        out = [f"{self.job_id}: {len(self.history)} events, {len(self.ticks)} meter ticks"]
        previous = None
        for event in self.history:
            delta = (event.occurred_at - previous).total_seconds() if previous else 0.0
            previous = event.occurred_at
            out.append(
                f"  {event.occurred_at.isoformat()}  +{delta:8.3f}s  a{event.attempt}  "
                f"{event.type:<24} {event.producer}"
            )
        if self.view is not None:
            v = self.view
            out.append(f"rebuilt status: {v.status} (attempt {v.attempt}, {v.event_count} events)")
            if v.failure:
                f = v.failure
                out.append(f"  failure: {f.failure_class} ({f.attribution}): {f.summary}")
                out.append(f"  advice: {f.advice}")
            for anomaly in v.anomalies:
                out.append(f"  anomaly: {anomaly}")
        if self.accounting is not None:
            a = self.accounting
            out.append(
                f"accounting ({a.policy_version}): held {a.gpu_seconds:.1f} GPU-s, metered "
                f"{a.metered_gpu_seconds:.1f}, billable {a.billable_gpu_seconds:.1f}, credited "
                f"{a.credited_gpu_seconds:.1f}, final={a.final}, reconciled={a.reconciled}"
            )
        out.append("decisions the current rules imply:")
        out += [
            f"  a{e.attempt} {e.type} {_decision_detail(e)}".rstrip() for e in self.implied
        ] or ["  (none)"]
        if self.drift:
            out.append("decision drift:")
            out += [f"  {d.line()}" for d in self.drift]
        else:
            out.append("no decision drift: the recorded decisions are the implied ones")
        return out


def _decision_detail(event: Event) -> str:
    fields = ("failure_class", "attribution", "retryable", "next_attempt", "delay_s", "reason")
    data = event.model_dump()
    return ", ".join(f"{k}={data[k]}" for k in fields if k in data and data[k] not in ("", None))


async def replay_job(ledger: Ledger, job_id: str) -> JobReplay:
    """Read the job's partitions from offset 0 and fold them with the pure core."""
    history = await compose.history(ledger, job_id)
    ticks = [
        t for t in await compose.history(ledger, job_id, "meter-ticks") if isinstance(t, MeterTick)
    ]
    folded = fold(history, ticks) if history else None
    return JobReplay(
        job_id=job_id,
        history=list(unique(history)),
        ticks=ticks,
        view=folded.view if folded else None,
        accounting=folded.accounting if folded else None,
        implied=folded.implied if folded else [],
        drift=drift_of(job_id, history) if history else [],
    )
