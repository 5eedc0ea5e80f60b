"""The facts a failure classification is based on, gathered from one attempt's events.

:func:`gather` reads the history once and returns a :class:`Facts` record: the
phase the attempt reached, the event that ended it, the exit information, the
log lines and the specifics (image, node, memory limit ...) the summaries quote.
The rules in :mod:`projections.failures` only look at ``Facts``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from projections.history import (
    failed_stores,
    first,
    is_clean_success,
    last,
    missing_required_outputs,
    refused_outputs,
    spec_of,
    unique,
)
from schemas.events import (
    AttemptAccepted,
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
    Role,
    with_role,
)

ENDING_EVENTS = with_role(Role.TRIGGER)
"""Events after which an unsuccessful attempt is classified (the classifier's triggers)."""

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


def _phase(history: Sequence[Event], attempt: int, trigger: Event | None) -> str:
    exited = last(history, ProcessExited, attempt)
    released = last(history, ComputeReleased, attempt)
    if isinstance(trigger, JobRejected):
        return "submit"
    # A cancel decides the class unless the process had already ended on its own (then its
    # exit says what happened) or the attempt finished cleanly.
    cancel = first(history, CancelRequested)
    stopped = first(history, AttemptCancelled, attempt) is not None or (
        released is not None and released.reason == "cancelled"
    )
    requested_first = cancel is not None and (
        exited is None or history.index(cancel) < history.index(exited)
    )
    if (stopped or requested_first) and not is_clean_success(history, attempt):
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
    if first(history, ContainerStartFailed, attempt) is not None:
        return "start"
    if first(history, ImageUnavailable, attempt) is not None:
        return "image"
    if isinstance(trigger, FinishingTimedOut):
        return "finishing"
    if isinstance(trigger, DispatchTimedOut):
        return "dispatch"
    if isinstance(trigger, NoCapacity):
        return "queue"
    return "unknown"


def endings(history: Sequence[Event], attempt: int) -> Iterator[Event]:
    """The events that end ``attempt``, in log order, without the stale ones.

    A DispatchTimedOut after the node accepted the attempt, or a NoCapacity after
    the attempt was placed, is a stale watchdog/scheduler fact (written by one that
    had not read the acceptance or placement yet) and ends nothing: the attempt runs
    on, so the watchdog keeps watching it and a cancel must still reach its node.
    """
    accepted = placed = False
    for e in unique(history):
        if e.attempt != attempt:
            continue
        if isinstance(e, AttemptAccepted | ComputeHeld):
            accepted = True
        elif isinstance(e, AttemptScheduled):
            placed = True
        elif isinstance(e, DispatchTimedOut) and accepted or isinstance(e, NoCapacity) and placed:
            continue
        if isinstance(e, ENDING_EVENTS):
            yield e


def trigger_for(history: Sequence[Event], attempt: int) -> Event | None:
    """The event that ended ``attempt`` and on which the classifier acts, or None.

    The first of :func:`endings` counts; later ones (a late ComputeReleased from a
    node already declared lost) change nothing.
    """
    return next(endings(history, attempt), None)


def late_verdict(history: Sequence[Event], attempt: int) -> Event | None:
    """The watchdog's verdict (AttemptLost or FinishingTimedOut) that ended ``attempt``
    before its node released it, or None. Facts the node sends after it are late facts."""
    verdict = trigger_for(history, attempt)
    return verdict if isinstance(verdict, AttemptLost | FinishingTimedOut) else None


def attempt_ended(history: Sequence[Event], attempt: int, by: tuple[type[Event], ...]) -> bool:
    """True once one of :func:`endings` of ``attempt`` is of a type in ``by``."""
    return any(isinstance(e, by) for e in endings(history, attempt))


def gather(history: Sequence[Event], attempt: int, at: Event | None = None) -> Facts:
    """Collect the facts about ``attempt`` (0 for the queue before the first attempt).

    Only the history up to the attempt's trigger (:func:`trigger_for`) is read, so
    re-classifying a finished job gives the answer the live classifier gave.
    """
    events = unique(history)
    # ``at``: judge the attempt on a later ending instead (its late release, when the
    # watchdog's verdict was wrong and its real facts arrived).
    trigger = at if at is not None else trigger_for(events, attempt)
    if trigger is not None:
        events = events[: events.index(trigger) + 1]
    spec = spec_of(events)
    v: dict[str, str] = {}

    def put(key: str, value: object) -> None:
        if value is not None and value != "":
            v[key] = str(value)

    if spec is not None:
        put("image", spec.image)
        put("command", " ".join(spec.command))
        put("command0", spec.command[0] if spec.command else "")
        put("memory_gb", number(spec.resources.memory_gb))
        put("memory", gib(int(spec.resources.memory_gb * 1024**3)))
        put("gpus", spec.resources.gpus)
        put("gpu_models", ", ".join(spec.resources.gpu_models))
        put("max_runtime_s", spec.limits.max_runtime_s)
        put("max_runtime", duration(spec.limits.max_runtime_s))
        put("queue_timeout", duration(spec.limits.queue_timeout_s))
    scheduled = first(events, AttemptScheduled, attempt)
    held = first(events, ComputeHeld, attempt)
    if scheduled is not None:
        put("node", scheduled.node_id)
        put("provider", scheduled.provider)
        put("gpu_count", scheduled.gpu_count)
        put("gpu_model", scheduled.gpu_model)
    if held is not None:
        put("node", held.node_id)
        put("gpu_count", held.gpu_count)
        put("gpu_model", held.gpu_model)

    lines: list[str] = []
    exited = last(events, ProcessExited, attempt)
    signal: int | None = None
    if exited is not None:
        lines += exited.last_log_lines
        signal = exited.signal
        if signal is None and exited.exit_code > 128:
            signal = exited.exit_code - 128
        put("exit_code", exited.exit_code)
        put("runtime", duration(exited.runtime_s))
        if exited.memory_limit_bytes:
            put("memory_limit", gib(exited.memory_limit_bytes))
    if signal is not None:
        put("signal", signal)
        put("signal_name", SIGNAL_NAMES.get(signal, f"signal {signal}"))
    start_failed = last(events, ContainerStartFailed, attempt)
    if start_failed is not None:
        lines += start_failed.message.splitlines()
        put("error_kind", start_failed.error_kind)
        put("message", start_failed.message.strip())
    image = last(events, ImageUnavailable, attempt)
    if image is not None:
        put("image", image.image)
        put("message", image.message.strip())
    non_empty = [line for line in lines if line.strip()]
    if non_empty:
        put("last_line", non_empty[-1].strip())

    missing = missing_required_outputs(events, attempt)
    put("missing_outputs", ", ".join(f"'{p}'" for p in missing))
    stores = failed_stores(events, attempt)
    put("failed_outputs", ", ".join(f"'{e.path}'" for e in stores))
    put("store_message", "; ".join(e.message for e in stores if e.message))
    for key, required in (("refused_outputs", True), ("refused_optional", False)):
        refused = refused_outputs(events, attempt, required)
        put(key, ", ".join(f"'{e.path}' ({e.reason})" for e in refused))
        put(f"{key}_why", "; ".join(e.message for e in refused if e.message))

    cancel = first(events, CancelRequested)
    if cancel is not None:
        put("requested_by", cancel.requested_by)
        put("cancel_reason", cancel.reason)
        put("cancelled_at", when(cancel.occurred_at))
    if first(events, AttemptCancelled, attempt) is not None:
        put("container_stopped", "yes")
    if isinstance(trigger, AttemptLost):
        put("last_heartbeat", when(trigger.last_heartbeat_at))
        put("deadline", when(trigger.deadline or trigger.occurred_at))
    if isinstance(trigger, DispatchTimedOut | FinishingTimedOut):
        put("deadline", when(trigger.deadline))
        put("node", trigger.node_id)
    if isinstance(trigger, NoCapacity):
        put("detail", trigger.detail)
        put("queued_since", when(trigger.queued_since))
        put("queue_deadline", when(trigger.queue_deadline))
        if attempt > 1:  # a retry that was not placed: say what it was retrying
            previous = first(events, FailureClassified, attempt - 1)
            before = first(events, AttemptScheduled, attempt - 1)
            put("attempt", attempt)
            put("previous_attempt", attempt - 1)
            put("previous_class", previous.failure_class if previous else "a failure")
            put("previous_node", before.node_id if before else "")
            put("previous_provider", before.provider if before else "")
            if first(events, CheckpointStored) is not None:
                put("checkpoint_job", trigger.job_id)
    rejected = trigger if isinstance(trigger, JobRejected) else None
    if rejected is not None:
        put("rejection_summary", rejected.summary)
        put("rejection_advice", rejected.advice)

    released = last(events, ComputeReleased, attempt)
    return Facts(
        attempt=attempt,
        phase=_phase(events, attempt, trigger),
        trigger=trigger.type if trigger else "",
        occurred_at=trigger.occurred_at if trigger else None,
        exit_code=exited.exit_code if exited else None,
        signal=signal,
        oom_killed=exited.oom_killed if exited else None,
        runtime_exceeded=bool(exited and exited.runtime_exceeded)
        or bool(released and released.reason == "runtime_exceeded"),
        release_reason=released.reason if released else "",
        error_kind=start_failed.error_kind if start_failed else "",
        image_reason=image.reason if image else "",
        rejected_as=rejected.failure_class if rejected else "",
        gpus_requested=spec.resources.gpus if spec else 0,
        log_lines=tuple(lines),
        values=v,
    )
