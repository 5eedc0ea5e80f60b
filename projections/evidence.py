"""The facts a failure classification is based on, gathered from one attempt's events.

:func:`gather` reads the history once and returns a :class:`Facts` record: the
phase the attempt reached, the event that ended it, the exit information, the
log lines and the specifics (image, node, memory limit ...) the summaries quote.
The rules in :mod:`projections.failures` only look at ``Facts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from projections.history import History
from schemas.events import (
    AttemptCancelled,
    AttemptLost,
    AttemptScheduled,
    CancelRequested,
    CheckpointStored,
    ComputeHeld,
    ComputeReleased,
    ContainerStartFailed,
    DispatchTimedOut,
    Event,
    FailureClassified,
    FinishingTimedOut,
    ImageUnavailable,
    JobRejected,
    NoCapacity,
    ProcessExited,
    ReleaseReason,
)
from schemas.spec import JobSpec

SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
}


@dataclass(frozen=True)
class Facts:
    """What one attempt's events say, normalised for rule matching."""

    attempt: int
    phase: str
    """submit, queue, dispatch, image, start, run, outputs, node, finishing, cancel or unknown."""
    trigger: str
    """Type of the event that ended the attempt ('' when none has yet)."""
    occurred_at: datetime | None
    exit_code: int | None = None
    signal: int | None = None
    """Reported signal, or exit code - 128 for exit codes above 128 (the shell convention)."""
    oom_killed: bool | None = None
    runtime_exceeded: bool = False
    release_reason: ReleaseReason = ""
    error_kind: str = ""
    image_reason: str = ""
    rejected_as: str = ""
    gpus_requested: int = 0
    log_lines: tuple[str, ...] = ()
    values: dict[str, str] = field(default_factory=dict)
    """Specifics the summary and advice templates quote, all as display strings."""


def gib(n_bytes: int) -> str:
    """'4 GiB', '1.5 GiB', '512 MiB'."""
    if n_bytes >= 1024**3:
        return f"{n_bytes / 1024**3:.1f}".removesuffix(".0") + " GiB"
    return f"{n_bytes / 1024**2:.0f} MiB"


def number(x: float) -> str:
    """A number without a useless '.0': 24, 38.4."""
    return f"{x:.1f}".removesuffix(".0")


def duration(seconds: float) -> str:
    """'90 s', '45 min', '2 h 30 min'."""
    if seconds < 120:
        return f"{number(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


def when(moment: datetime | None) -> str:
    """A moment as the advice texts print it (UTC, to the second); "" for none."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


def _phase(history: History, attempt: int, trigger: Event | None) -> str:
    exited = history.last(ProcessExited, attempt)
    released = history.last(ComputeReleased, attempt)
    if isinstance(trigger, JobRejected):
        return "submit"
    # A cancel decides the class unless the process had already ended on its own (then its
    # exit says what happened) or the attempt finished cleanly.
    cancel = history.first(CancelRequested)
    stopped = history.first(AttemptCancelled, attempt) is not None or (
        released is not None and released.reason == "cancelled"
    )
    requested_first = cancel is not None and (
        exited is None or history.index(cancel) < history.index(exited)
    )
    if (stopped or requested_first) and not history.is_clean_success(attempt):
        return "cancel"
    if released is not None and released.reason == "agent_shutdown":
        return "node"  # the agent stopped the container: its exit code says nothing of the job
    if exited is not None and (
        exited.exit_code != 0 or exited.oom_killed or exited.runtime_exceeded
    ):
        return "run"
    if released is not None and released.reason == "runtime_exceeded":
        return "run"
    if isinstance(trigger, AttemptLost):
        return "node"
    if exited is not None:  # exit 0: only the outputs can have failed
        return "finishing" if isinstance(trigger, FinishingTimedOut) else "outputs"
    if history.first(ContainerStartFailed, attempt) is not None:
        return "start"
    if history.first(ImageUnavailable, attempt) is not None:
        return "image"
    if isinstance(trigger, FinishingTimedOut):
        return "finishing"
    if isinstance(trigger, DispatchTimedOut):
        return "dispatch"
    if isinstance(trigger, NoCapacity):
        return "queue"
    return "unknown"


class _Values(dict[str, str]):
    """The values a classification's summary and advice quote, by name."""

    def put(self, key: str, value: object) -> None:
        """Set ``key`` to ``value`` as text; nothing for None or ""."""
        if value is not None and value != "":
            self[key] = str(value)


def _spec_values(v: _Values, spec: JobSpec) -> None:
    v.put("image", spec.image)
    v.put("command", " ".join(spec.command))
    v.put("command0", spec.command[0] if spec.command else "")
    v.put("memory_gb", number(spec.resources.memory_gb))
    v.put("memory", gib(int(spec.resources.memory_gb * 1024**3)))
    v.put("gpus", spec.resources.gpus)
    v.put("gpu_models", ", ".join(spec.resources.gpu_models))
    v.put("max_runtime_s", spec.limits.max_runtime_s)
    v.put("max_runtime", duration(spec.limits.max_runtime_s))
    v.put("queue_timeout", duration(spec.limits.queue_timeout_s))


def _placement_values(v: _Values, events: History, attempt: int) -> None:
    scheduled = events.first(AttemptScheduled, attempt)
    held = events.first(ComputeHeld, attempt)
    if scheduled is not None:
        v.put("node", scheduled.node_id)
        v.put("provider", scheduled.provider)
        v.put("gpu_count", scheduled.gpu_count)
        v.put("gpu_model", scheduled.gpu_model)
    if held is not None:
        v.put("node", held.node_id)
        v.put("gpu_count", held.gpu_count)
        v.put("gpu_model", held.gpu_model)


def _signal(exited: ProcessExited | None) -> int | None:
    """The signal that ended the process: its own, or the one a shell's exit code > 128
    says."""
    if exited is None:
        return None
    if exited.signal is None and exited.exit_code > 128:
        return exited.exit_code - 128
    return exited.signal


def _process_values(
    v: _Values,
    exited: ProcessExited | None,
    start_failed: ContainerStartFailed | None,
    image: ImageUnavailable | None,
) -> list[str]:
    """Put what the process's end, a failed start and a missing image say; returns the
    log lines they carry."""
    lines: list[str] = []
    signal = _signal(exited)
    if exited is not None:
        lines += exited.last_log_lines
        v.put("exit_code", exited.exit_code)
        v.put("runtime", duration(exited.runtime_s))
        if exited.memory_limit_bytes:
            v.put("memory_limit", gib(exited.memory_limit_bytes))
    if signal is not None:
        v.put("signal", signal)
        v.put("signal_name", SIGNAL_NAMES.get(signal, f"signal {signal}"))
    if start_failed is not None:
        lines += start_failed.message.splitlines()
        v.put("error_kind", start_failed.error_kind)
        v.put("message", start_failed.message.strip())
    if image is not None:
        v.put("image", image.image)
        v.put("message", image.message.strip())
    non_empty = [line for line in lines if line.strip()]
    if non_empty:
        v.put("last_line", non_empty[-1].strip())
    return lines


def _output_values(v: _Values, events: History, attempt: int) -> None:
    missing = events.missing_required_outputs(attempt)
    v.put("missing_outputs", ", ".join(f"'{p}'" for p in missing))
    stores = events.failed_stores(attempt)
    v.put("failed_outputs", ", ".join(f"'{e.path}'" for e in stores))
    v.put("store_message", "; ".join(e.message for e in stores if e.message))
    for key, required in (("refused_outputs", True), ("refused_optional", False)):
        refused = events.refused_outputs(attempt, required)
        v.put(key, ", ".join(f"'{e.path}' ({e.reason})" for e in refused))
        v.put(f"{key}_why", "; ".join(e.message for e in refused if e.message))


def _cancel_values(v: _Values, events: History, attempt: int) -> None:
    cancel = events.first(CancelRequested)
    if cancel is not None:
        v.put("requested_by", cancel.requested_by)
        v.put("cancel_reason", cancel.reason)
        v.put("cancelled_at", when(cancel.occurred_at))
    if events.first(AttemptCancelled, attempt) is not None:
        v.put("container_stopped", "yes")


def _unplaced_values(v: _Values, events: History, attempt: int, trigger: NoCapacity) -> None:
    v.put("detail", trigger.detail)
    v.put("queued_since", when(trigger.queued_since))
    v.put("queue_deadline", when(trigger.queue_deadline))
    if attempt > 1:  # a retry that was not placed: say what it was retrying
        previous = events.first(FailureClassified, attempt - 1)
        before = events.first(AttemptScheduled, attempt - 1)
        v.put("attempt", attempt)
        v.put("previous_attempt", attempt - 1)
        v.put("previous_class", previous.failure_class if previous else "a failure")
        v.put("previous_node", before.node_id if before else "")
        v.put("previous_provider", before.provider if before else "")
        if events.first(CheckpointStored) is not None:
            v.put("checkpoint_job", trigger.job_id)


def _trigger_values(v: _Values, events: History, attempt: int, trigger: Event | None) -> None:
    if isinstance(trigger, AttemptLost):
        v.put("last_heartbeat", when(trigger.last_heartbeat_at))
        v.put("deadline", when(trigger.deadline or trigger.occurred_at))
    if isinstance(trigger, DispatchTimedOut | FinishingTimedOut):
        v.put("deadline", when(trigger.deadline))
        v.put("node", trigger.node_id)
    if isinstance(trigger, NoCapacity):
        _unplaced_values(v, events, attempt, trigger)
    if isinstance(trigger, JobRejected):
        v.put("rejection_summary", trigger.summary)
        v.put("rejection_advice", trigger.advice)


def gather(history: Sequence[Event], attempt: int, at: Event | None = None) -> Facts:
    """Collect the facts about ``attempt`` (0 for the queue before the first attempt).

    Only the history up to the attempt's trigger (:meth:`History.trigger_for`) is read,
    so re-classifying a finished job gives the answer the live classifier gave.
    """
    events = History.of(history)
    # ``at``: judge the attempt on a later ending instead (its late release, when the
    # watchdog's verdict was wrong and its real facts arrived).
    trigger = at if at is not None else events.trigger_for(attempt)
    if trigger is not None:
        events = events[: events.index(trigger) + 1]
    spec = events.spec
    v = _Values()
    if spec is not None:
        _spec_values(v, spec)
    _placement_values(v, events, attempt)
    exited = events.last(ProcessExited, attempt)
    start_failed = events.last(ContainerStartFailed, attempt)
    image = events.last(ImageUnavailable, attempt)
    lines = _process_values(v, exited, start_failed, image)
    _output_values(v, events, attempt)
    _cancel_values(v, events, attempt)
    _trigger_values(v, events, attempt, trigger)
    rejected = trigger if isinstance(trigger, JobRejected) else None
    released = events.last(ComputeReleased, attempt)
    return Facts(
        attempt=attempt,
        phase=_phase(events, attempt, trigger),
        trigger=trigger.type if trigger else "",
        occurred_at=trigger.occurred_at if trigger else None,
        exit_code=exited.exit_code if exited else None,
        signal=_signal(exited),
        oom_killed=exited.oom_killed if exited else None,
        runtime_exceeded=bool(exited and exited.runtime_exceeded)
        or bool(released and released.reason == "runtime_exceeded"),
        release_reason=released.reason if released else "",
        error_kind=start_failed.error_kind if start_failed else "",
        image_reason=image.reason if image else "",
        rejected_as=rejected.failure_class if rejected else "",
        gpus_requested=spec.resources.gpus if spec else 0,
        log_lines=tuple(lines),
        values=dict(v),
    )
