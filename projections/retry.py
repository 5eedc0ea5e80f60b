"""Retry decisions: a pure function of the job's view, the classification and a policy.

Design.md section 7. Platform failures are retried up to the job's
``retry.max_attempts`` (3 by default, the first attempt included) with
exponential backoff ``backoff_s x 2^(n-1)`` capped at ``backoff_cap_s``.
Deterministic user errors are never retried unless the job opts in; every
decision, giving up included, becomes an event with its reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from projections.evidence import number
from projections.failures import Classification
from schemas.spec import RetrySpec
from schemas.types import CheckpointRef
from schemas.views import JobView

RETRY_POLICY_VERSION = "1"

NODE_RELATED = (
    "node_lost",
    "dispatch_timeout",
    "image_pull_failed",
    "container_start_failed",
    "cuda_unavailable",
    "finishing_timeout",
    "unknown",
)
"""Classes that may be the node's fault: the retry avoids the node (and its provider).
``unknown`` is here because avoiding one node is cheap and the cause may be it."""

_WHY_NOT = {
    "image_not_found": "the job's image does not exist",
    "entrypoint_not_found": "the job's command is not in its image",
    "missing_module": "the job's image lacks a Python module it imports",
    "cuda_unavailable": "the job's image cannot use CUDA",
    "missing_file": "a file the job reads does not exist",
    "runtime_exceeded": "the job reached its declared maximum runtime",
    "output_missing": "the job did not write a required output",
    "invalid_spec": "the job spec cannot run as submitted",
    "does_not_fit": "no node in the fleet can hold the job",
    "capacity_unavailable": (
        "no capacity became free before the queue deadline, and gridledger does not "
        "extend a job's queue deadline on its own"
    ),
}


class RetryPolicy(BaseModel):
    """The platform side of retrying; the job's own RetrySpec gives budget and backoff."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = RETRY_POLICY_VERSION
    default_retry: RetrySpec = Field(default_factory=RetrySpec)  # type: ignore[arg-type]
    """Used when the view has no spec (a history that lost its JobSubmitted)."""
    class_retry_limits: dict[str, int] = Field(default_factory=lambda: {"unknown": 1})
    """At most this many retries after failures of the class, whatever the budget left."""
    opt_in_classes: tuple[str, ...] = (
        "user_process_error",
        "gpu_out_of_memory",
        "host_out_of_memory",
    )
    """User failures that ``retry.retry_user_errors`` makes retryable: the ones that can be
    transient (a flaky step, fragmentation, a data-dependent spike). A missing module or
    file fails the same way every time, so opting in does not retry those."""
    node_related: tuple[str, ...] = NODE_RELATED
    provider_related: tuple[str, ...] = ("node_lost", "dispatch_timeout")
    """Classes where the retry also avoids the failed node's provider: a vanished or
    unresponsive node is the kind of fault a provider has in several nodes at once."""


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


Terminal = Literal["JobFailed", "JobSucceededWithErrors", "JobCancelled"]


def _final(
    c: Classification, terminal: Terminal, reason: str, policy: RetryPolicy
) -> RetryDecision:
    return RetryDecision(
        action="final",
        attempt=c.attempt,
        terminal=terminal,
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
    retry = view.spec.retry if view.spec else policy.default_retry
    cls = c.failure_class
    if cls == "cancelled":
        return _final(c, "JobCancelled", "cancelled by the user", policy)
    if cls == "output_upload_failed":
        return _final(
            c,
            "JobSucceededWithErrors",
            "not retried: retrying only the output upload is not supported yet, and rerunning "
            "the whole job would redo work that already finished",
            policy,
        )
    opted_in = retry.retry_user_errors and cls in policy.opt_in_classes
    if not (c.retryable or opted_in):
        why = _WHY_NOT.get(cls, "the job's own code failed")
        hint = (
            "; set retry.retry_user_errors to retry it automatically"
            if cls in policy.opt_in_classes
            else ""
        )
        return _final(c, "JobFailed", f"not retryable: {why}{hint}", policy)
    if c.attempt >= retry.max_attempts:
        return _final(
            c,
            "JobFailed",
            f"retry budget exhausted ({c.attempt} of {retry.max_attempts} attempts)",
            policy,
        )
    limit = policy.class_retry_limits.get(cls)
    before = sum(1 for a in view.attempts if a.failure_class == cls and a.attempt != c.attempt)
    if limit is not None and before >= limit:
        return _final(
            c,
            "JobFailed",
            f"{cls} failures are retried {limit} time(s) at most and it happened again "
            f"on attempt {c.attempt}",
            policy,
        )
    return _retry(view, c, retry, policy)


def _retry(
    view: JobView, c: Classification, retry: RetrySpec, policy: RetryPolicy
) -> RetryDecision:
    n = max(c.attempt, 1)
    delay = min(retry.backoff_cap_s, retry.backoff_s * 2 ** (n - 1))
    base_time = c.occurred_at or view.updated_at
    not_before = base_time + timedelta(seconds=delay) if base_time else None
    failed = next((a for a in view.attempts if a.attempt == c.attempt), None)
    avoid_nodes, avoid_providers = set(view.avoid_nodes), set(view.avoid_providers)
    node_related = c.failure_class in policy.node_related
    if failed is not None and node_related and failed.node_id:
        avoid_nodes.add(failed.node_id)
    if failed is not None and c.failure_class in policy.provider_related and failed.provider:
        avoid_providers.add(failed.provider)
    resume = latest_checkpoint(view)
    reason = (
        f"{c.failure_class} is retryable: attempt {c.attempt + 1} of {retry.max_attempts} "
        f"after {number(delay)} s"
        + (" on another node" if node_related else "")
        + (f", resuming from checkpoint {resume.name}" if resume else "")
    )
    return RetryDecision(
        action="retry",
        attempt=c.attempt,
        reason=reason,
        next_attempt=c.attempt + 1,
        delay_s=delay,
        not_before=not_before,
        resume_from=resume,
        avoid_nodes=sorted(avoid_nodes),
        avoid_providers=sorted(avoid_providers),
        policy_version=policy.version,
    )
