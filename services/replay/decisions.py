"""Decision drift: the decisions recorded in the ledger vs those the current rules imply.

Classifier and retry-decider events carry deterministic ids
(``derived_event_id``), so the decisions ``projections.decisions.react_all``
derives from a job's history can be matched to the recorded ones by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from projections import decisions
from projections.history import unique
from schemas.events import Event, Role, with_role

DECISION_TYPES = frozenset(cls.__name__ for cls in with_role(Role.DECISION))
"""Events the classifier and retry decider write (JobRejected is the scheduler's fact)."""


@dataclass(frozen=True)
class DecisionDrift:
    """A derived event the current rules would write differently from the one the ledger holds."""

    job_id: str
    kind: str
    """missing (the rules imply it, the ledger lacks it), unexpected, or changed."""
    event_type: str
    attempt: int
    detail: str = ""

    def line(self) -> str:
        """The drift in a sentence, for the replay report."""
        what = {
            "missing": "implied by the current rules but not recorded",
            "unexpected": "recorded but not implied by the current rules",
            "changed": "recorded differently from what the current rules imply",
        }[self.kind]
        return f"{self.job_id} attempt {self.attempt} {self.event_type}: {what}" + (
            f" ({self.detail})" if self.detail else ""
        )


def implied(history: Sequence[Event]) -> list[Event]:
    """The decisions the current rules derive from ``history``."""
    return list(decisions.react_all(list(history)))


def recorded(history: Sequence[Event]) -> list[Event]:
    """The decisions ``history`` holds (each once, in log order)."""
    return [
        e
        for e in unique(history)
        if e.producer in decisions.DECISION_PRODUCERS or e.type in DECISION_TYPES
    ]


def drift_of(job_id: str, history: Sequence[Event]) -> list[DecisionDrift]:
    """The job's derived events recomputed with today's rules, against the recorded ones."""
    expected = {e.event_id: e for e in implied(history)}
    found = {e.event_id: e for e in recorded(history)}
    out: list[DecisionDrift] = []
    for event_id, event in expected.items():
        if event_id not in found:
            out.append(DecisionDrift(job_id, "missing", event.type, event.attempt))
    for event_id, event in found.items():
        if event_id not in expected:
            out.append(DecisionDrift(job_id, "unexpected", event.type, event.attempt))
            continue
        want = expected[event_id].model_dump()
        got = event.model_dump()
        changed = sorted(k for k in want if want[k] != got.get(k))
        if changed:
            detail = "; ".join(
                f"{k}: recorded {got.get(k)!r}, rules say {want[k]!r}" for k in changed
            )
            out.append(DecisionDrift(job_id, "changed", event.type, event.attempt, detail[:300]))
    return out


def decision_drift(histories: Mapping[str, Sequence[Event]]) -> list[DecisionDrift]:
    """Drift of every job, in job id order."""
    return [d for job_id in sorted(histories) for d in drift_of(job_id, histories[job_id])]
