"""Retry decisions: a pure function of the job's view, the classification and a policy.

See docs/architecture.md, "Retries". Platform failures are retried up to the job's
``retry.max_attempts`` (3 by default, the first attempt included) with
exponential backoff ``backoff_s x 2^(n-1)`` capped at ``backoff_cap_s``.
Deterministic user errors are never retried unless the job opts in; every
decision, giving up included, becomes an event with its reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projections.bounds import backoff_s
from projections.classes import CLASSES, FailureClass, Terminal
from projections.classes import row as class_row
from projections.evidence import number
from projections.failures import Classification
from schemas.spec import RetrySpec
from schemas.types import CheckpointRef
from schemas.views import JobView

RETRY_POLICY_VERSION = "2"
"""2: the class table decides; avoidance is a preference named in the reason."""


class RetryPolicy(BaseModel):
    """The platform side of retrying; the job's own RetrySpec gives budget and backoff."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = RETRY_POLICY_VERSION
    default_retry: RetrySpec = Field(default_factory=RetrySpec)
    """Used when the view has no spec (a history that lost its JobSubmitted)."""
    classes: dict[str, FailureClass] = Field(default_factory=lambda: dict(CLASSES))
    """The failure-class table (:mod:`projections.classes`); a test may vary one row."""

    def row(self, name: str) -> FailureClass:
        """The class's row in this policy's table; a class it does not list falls back to the
        shared table (which knows what to do with an unknown name)."""
        return self.classes.get(name) or class_row(name)


DEFAULT_POLICY = RetryPolicy()


class RetryDecision(BaseModel):
    """Retry (when, where, from which checkpoint) or the terminal event and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Literal["retry", "final"]
    attempt: int
    """The attempt that failed."""
    reason: str
    next_attempt: int | None = None
    delay_s: float = 0.0
    not_before: datetime | None = None
    resume_from: CheckpointRef | None = None
    avoid_nodes: list[str] = Field(default_factory=list)
    avoid_providers: list[str] = Field(default_factory=list)
    """Preferences, not exclusions: the scheduler tries other nodes and providers first,
    then falls back to the same provider, then the same node (never a silent one)."""
    avoid_reason: str = ""
    """What the retry prefers to avoid and why, naming the node and the provider."""
    terminal: Literal["", "JobFailed", "JobSucceededWithErrors", "JobCancelled"] = ""
    policy_version: str = RETRY_POLICY_VERSION


def latest_checkpoint(view: JobView) -> CheckpointRef | None:
    """The checkpoint a retry resumes from: the latest one any attempt of the job stored,
    else the one the job was submitted to resume from."""
    if view.checkpoints:
        # stored_at orders them; fold order breaks ties (same timestamp).
        ordered = sorted(
            enumerate(view.checkpoints),
            key=lambda ic: (ic[1].stored_at is not None, ic[1].stored_at, ic[0]),
        )
        return ordered[-1][1]
    first = view.attempts[0].resume_from if view.attempts else None
    return first or view.resume_from


def _final(
    c: Classification, terminal: Terminal, reason: str, policy: RetryPolicy
) -> RetryDecision:
    return RetryDecision(
        action="final",
        attempt=c.attempt,
        terminal="JobFailed" if terminal == "JobRejected" else terminal,
        reason=reason,
        policy_version=policy.version,
    )


def decide(
    view: JobView, classification: Classification, policy: RetryPolicy = DEFAULT_POLICY
) -> RetryDecision:
    """Decide what follows a classified failure.

    Args:
        view: the job's view (with or without this classification applied).
        classification: the failure of ``classification.attempt``.
        policy: the platform policy; budgets and backoff come from the job's spec.

    Returns:
        ``retry`` with the next attempt, its delay and ``not_before`` (from the
        classified event's time), the checkpoint to resume from and the nodes and
        providers to avoid; or ``final`` with the terminal event and its reason.
    """
    c = classification
    retry = view.retry or policy.default_retry
    cls = c.failure_class
    row = policy.row(cls)
    if row.terminal == "JobCancelled":
        return _final(c, "JobCancelled", "cancelled by the user", policy)
    if row.terminal == "JobSucceededWithErrors":
        return _final(c, row.terminal, f"not retried: {row.why_not}", policy)
    opted_in = retry.retry_user_errors and row.opt_in
    if not (row.retryable_for(c.attribution) or opted_in):
        hint = "; set retry.retry_user_errors to retry it automatically" if row.opt_in else ""
        return _final(c, row.terminal, f"not retryable: {row.why_not}{hint}", policy)
    if c.attempt >= retry.max_attempts:
        return _final(
            c,
            "JobFailed",
            f"retry budget exhausted ({c.attempt} of {retry.max_attempts} attempts)",
            policy,
        )
    before = sum(1 for a in view.attempts if a.failure_class == cls and a.attempt != c.attempt)
    if row.limit is not None and before >= row.limit:
        return _final(
            c,
            "JobFailed",
            f"{cls} failures are retried {row.limit} time(s) at most and it happened again "
            f"on attempt {c.attempt}",
            policy,
        )
    return _retry(view, c, retry, row, policy)


def avoidance(row: FailureClass, node: str, provider: str) -> tuple[list[str], list[str], str]:
    """(nodes, providers, reason) a retry after a failure of ``row`` on ``node`` of
    ``provider`` prefers to avoid. The reason names both and the fallback order."""
    if row.avoid == "" or not node:
        return [], [], ""
    nodes = [node]
    providers = [provider] if row.avoid == "provider" and provider else []
    where = f"{node} of provider {provider}" if provider else node
    if providers:
        prefer = f"a node other than {node} and a provider other than {provider}"
        fallback = f"to provider {provider}, then to node {node}"
    else:
        prefer = f"a node other than {node}"
        fallback = f"to node {node}"
    reason = (
        f"prefers {prefer} ({row.name} on {where}: {row.avoid_why}); when nothing else can "
        f"hold it, falls back {fallback} (never to a node still silent)"
    )
    return nodes, providers, reason


def _retry(
    view: JobView, c: Classification, retry: RetrySpec, row: FailureClass, policy: RetryPolicy
) -> RetryDecision:
    delay = backoff_s(retry, c.attempt)
    base_time = c.occurred_at or view.updated_at
    not_before = base_time + timedelta(seconds=delay) if base_time else None
    failed = next((a for a in view.attempts if a.attempt == c.attempt), None)
    nodes, providers, why = (
        avoidance(row, failed.node_id, failed.provider) if failed else ([], [], "")
    )
    resume = latest_checkpoint(view)
    reason = (
        f"{c.failure_class} is retryable: attempt {c.attempt + 1} of {retry.max_attempts} "
        f"after {number(delay)} s"
        + (f", resuming from checkpoint {resume.name}" if resume else "")
        + (f"; it {why}" if why else "")
    )
    return RetryDecision(
        action="retry",
        attempt=c.attempt,
        reason=reason,
        next_attempt=c.attempt + 1,
        delay_s=delay,
        not_before=not_before,
        resume_from=resume,
        avoid_nodes=sorted({*view.avoid_nodes, *nodes}),
        avoid_providers=sorted({*view.avoid_providers, *providers}),
        avoid_reason=why,
        policy_version=policy.version,
    )
