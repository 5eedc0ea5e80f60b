"""Every job ends within a bound: the bound, from the job's spec and the platform's thresholds.

A job moves through bounded waits only (docs/lifecycle.md): each attempt is
queued until its queue deadline at most, dispatched until its dispatch
deadline, started, run until ``limits.max_runtime_s``, stopped within the
agent's grace, and then either released within the finishing deadline or, if
its node falls silent at any point, declared lost ``silence_s + lost_after_s``
after its last heartbeat. Between attempts the retry waits its backoff. So::

    attempt_bound = queue_timeout_s + dispatch_timeout_s + start_s + max_runtime_s
                    + stop_grace_s + max(finishing_timeout_s, silence_s + lost_after_s)
                    + check_s
    terminal_bound = max_attempts x attempt_bound + sum(backoff(k), k = 1 .. max_attempts - 1)
    backoff(k) = min(backoff_cap_s, backoff_s x 2^(k-1))

measured from JobSubmitted. A cancel, a rejection, a non-retryable failure or a
late clean success only end the job sooner. Time during which the watchdog could
not hear the nodes (a broker outage) is not counted as silence, so it adds to
the bound as it happens; the bound holds for the time the platform could hear.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from schemas.spec import JobSpec, RetrySpec


class Thresholds(BaseModel):
    """The platform's deadlines, as the scheduler, watchdog and agent apply them.

    Defaults are those of ``services.settings.Settings`` and the agent's settings;
    a service passes its own values (see :meth:`of`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    dispatch_timeout_s: float = Field(60.0, gt=0)
    """Time a node has to accept a scheduled attempt (scheduler_dispatch_timeout_s)."""
    start_s: float = Field(600.0, ge=0)
    """Time from acceptance to the container's start (image pull and start). The agent
    does not enforce it yet: the bound assumes it."""
    silence_s: float = Field(30.0, gt=0)
    """Heartbeat silence after which an attempt is unresponsive (watchdog_silence_s)."""
    lost_after_s: float = Field(60.0, gt=0)
    """Further silence after which it is lost (watchdog_lost_after_s)."""
    finishing_timeout_s: float = Field(300.0, gt=0)
    """Time from ProcessExited to ComputeReleased (watchdog_finishing_timeout_s)."""
    stop_grace_s: float = Field(10.0, ge=0)
    """SIGTERM to SIGKILL when the agent stops a container (the agent's stop_grace_s)."""
    check_s: float = Field(5.0, ge=0)
    """Per attempt, what the deadline keepers add: their check periods and the time a
    decision takes to be appended and read."""

    @classmethod
    def of(cls, settings: object, **overrides: float) -> Thresholds:
        """The thresholds a settings object names (``services.settings.Settings``)."""
        names = {
            "dispatch_timeout_s": "scheduler_dispatch_timeout_s",
            "silence_s": "watchdog_silence_s",
            "lost_after_s": "watchdog_lost_after_s",
            "finishing_timeout_s": "watchdog_finishing_timeout_s",
        }
        values = {
            ours: getattr(settings, theirs)
            for ours, theirs in names.items()
            if hasattr(settings, theirs)
        }
        return cls(**{**values, **overrides})


def backoff_s(retry: RetrySpec, failed_attempt: int) -> float:
    """The wait before the retry of ``failed_attempt`` (1 for the first attempt)."""
    n = max(failed_attempt, 1)
    return float(min(retry.backoff_cap_s, retry.backoff_s * 2 ** (n - 1)))


def attempt_bound_s(spec: JobSpec, t: Thresholds) -> float:
    """The longest one attempt can take, from its queueing to the decision on it."""
    return (
        spec.limits.queue_timeout_s
        + t.dispatch_timeout_s
        + t.start_s
        + spec.limits.max_runtime_s
        + t.stop_grace_s
        + max(t.finishing_timeout_s, t.silence_s + t.lost_after_s)
        + t.check_s
    )


def terminal_bound_s(spec: JobSpec, t: Thresholds) -> float:
    """The longest a job can take from JobSubmitted to its terminal event."""
    attempts = spec.retry.max_attempts
    waits = sum(backoff_s(spec.retry, k) for k in range(1, attempts))
    return attempts * attempt_bound_s(spec, t) + waits


def terminal_deadline(submitted_at: datetime, spec: JobSpec, t: Thresholds) -> datetime:
    """The time by which the job has ended, whatever happens to it."""
    return submitted_at + timedelta(seconds=terminal_bound_s(spec, t))
