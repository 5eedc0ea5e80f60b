"""Failure classification: whose fault, what happened, what to do next.

See docs/architecture.md, "Failure classes".

The rules are data: :data:`RULES` is an ordered table of :class:`Rule` rows and
the first row whose matchers all hold decides the class. Adding a failure mode
is adding a row (and a golden history). Summaries and advice are templates:
``{name}`` is filled from the evidence, and a ``[...]`` segment is dropped when
a value it quotes is unknown, so a message never says "None".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from projections.classes import FAILURE_CLASSES as FAILURE_CLASSES
from projections.classes import row as class_row
from projections.evidence import Facts, gather
from schemas.events import Attribution, Event, JobRejected, RecordRefused, ReleaseReason
from schemas.types import Evidence

CLASSIFIER_VERSION = "2"
"""Recorded on every FailureClassified; bump it whenever a rule's outcome changes."""


MAX_EVIDENCE_LINES = 5


class Classification(BaseModel):
    """The outcome of :func:`classify`: the fields of a FailureClassified event."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failure_class: str
    attribution: Attribution
    retryable: bool
    summary: str
    advice: str
    evidence: Evidence
    rule_id: str
    classifier_version: str = CLASSIFIER_VERSION
    attempt: int = 0
    occurred_at: datetime | None = None
    """When the triggering event happened; retry delays count from here."""


@dataclass(frozen=True)
class Rule:
    """One row of the table. Every matcher left at its default matches anything."""

    id: str
    phase: str
    failure_class: str
    attribution: Attribution
    summary: str
    advice: str
    trigger: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    signals: tuple[int, ...] = ()
    oom_killed: bool | None = None
    runtime_exceeded: bool | None = None
    error_kinds: tuple[str, ...] = ()
    image_reason: str = ""
    release_reasons: tuple[ReleaseReason, ...] = ()
    gpus_requested: bool | None = None
    rejected_as: str = ""
    requires: tuple[str, ...] = ()
    """Evidence values that must be known, e.g. the missing outputs."""
    log: str = ""
    """Regex searched in each log line; the rule matches only if a line does. Named
    groups of the last matching line become template values."""
    extract: str = ""
    """Like ``log`` but only for values: the rule matches without it."""
    retry_attempt: bool | None = None
    """True: only for an attempt after the first (a retry); False: only the first."""

    @property
    def retryable(self) -> bool:
        """From the class table: a rule says which class and side, the table the rest."""
        return class_row(self.failure_class).retryable_for(self.attribution)


_NO_GPU = r"no CUDA-capable device is detected|Found no NVIDIA driver|CUDA_ERROR_NO_DEVICE|No CUDA GPUs are available"  # noqa: E501
_NOTHING_TO_CHANGE = "Nothing to change in your job"
_RETRIED = (
    "gridledger retries it (up to retry.max_attempts attempts in all), on another node when one "
    "can hold it, else on the same one"
)
_ONLY_FILES = (
    "Store only regular files inside $GRIDLEDGER_OUTPUT_DIR: no symbolic links, FIFOs, "
    "sockets, devices or folders (declare each file of a folder as its own output), no '..', "
    "and within the node's size caps (max_output_file_bytes per file, max_output_job_bytes "
    "per attempt)."
)
_EXEC = (
    r'exec: "?(?P<cmd>[^":]+)"?: (?P<why>executable file not found in \$PATH|no such file or '
    r"directory|permission denied)"
)

# fmt: off
RULES: tuple[Rule, ...] = (
    # ---- submit: rejected before anything was held (the api/scheduler wrote the numbers)
    Rule("submit.does_not_fit", "submit", "does_not_fit", "user",
         "{rejection_summary}", "{rejection_advice}", rejected_as="does_not_fit"),
    Rule("submit.invalid_spec", "submit", "invalid_spec", "user",
         "{rejection_summary}", "{rejection_advice}"),
    # ---- cancel: decided before anything the stopped container printed
    Rule("cancel.user", "cancel", "cancelled", "user",
         "The job was cancelled[ by {requested_by}][ ({cancel_reason})].",
         "Nothing to fix: submit the job again to run it."),
    # ---- queue / dispatch
    # A retry that found no room: the job was fine to run, the platform's retry of it was not
    # placed. Say which attempt failed first and what the retry preferred to avoid.
    Rule("queue.retry_no_capacity", "queue", "capacity_unavailable", "capacity",
         "Attempt {attempt}, the retry after {previous_class} on attempt {previous_attempt}"
         "[ on node {previous_node}][ of provider {previous_provider}], found no node with "
         "[{gpus} ]free GPU(s)[ of model {gpu_models}] before its queue deadline[ of "
         "{queue_timeout}][ ({detail})]. Your job's spec is not the problem.",
         "Submit the job again[ with resume_from: {checkpoint_job} to continue from its latest "
         "checkpoint]; accept more GPU models (resources.gpu_models) or raise "
         "limits.queue_timeout_s to give a retry more time to find a node.",
         retry_attempt=True),
    Rule("queue.no_capacity", "queue", "capacity_unavailable", "capacity",
         "No node with [{gpus} ]free GPU(s)[ of model {gpu_models}] became available within the "
         "queue timeout[ of {queue_timeout}][ ({detail})]. This is a capacity shortage, not a "
         "problem with your job.",
         "Submit again later, accept more GPU models (resources.gpu_models), or raise "
         "limits.queue_timeout_s to wait longer."),
    Rule("dispatch.timeout", "dispatch", "dispatch_timeout", "platform",
         "Node[ {node}] never accepted the attempt[ before its dispatch deadline {deadline}].",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}."),
    # ---- image
    Rule("image.not_found", "image", "image_not_found", "user",
         "The image {image} does not exist in the registry[ ({message})].",
         "Check the image name and tag, and that the image was pushed to the registry the "
         "nodes pull from.",
         image_reason="not_found"),
    Rule("image.registry_unreachable", "image", "image_pull_failed", "platform",
         "The image {image} could not be pulled: the registry was unreachable[ ({message})].",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}.",
         image_reason="registry_unreachable"),
    # ---- container start
    Rule("start.gpu_runtime_missing", "start", "cuda_unavailable", "platform",
         "Docker on node[ {node}] could not give the container its GPUs ({message}).",
         f"{_NOTHING_TO_CHANGE}: the node's GPU runtime is misconfigured; {_RETRIED}.",
         log=r"could not select device driver|nvidia-container-cli|invalid runtime name: nvidia"),
    Rule("start.entrypoint_not_found", "start", "entrypoint_not_found", "user",
         "The container could not start: the command[ '{cmd}'] was not found in the image "
         "({why}).",
         "Check spec.command: the program must be installed in the image (on its PATH) or given "
         "by a path that exists in the image; scripts need a valid shebang line.",
         error_kinds=("entrypoint_not_found",),
         extract=_EXEC),
    Rule("start.entrypoint_message", "start", "entrypoint_not_found", "user",
         "The container could not start: the command[ '{cmd}'] was not found or is not "
         "executable ({why}).",
         "Check spec.command: the program must be installed in the image (on its PATH) or given "
         "by a path that exists in the image, and be executable (chmod +x).",
         log=_EXEC),
    Rule("start.invalid_config", "start", "invalid_spec", "user",
         "Docker refused the container configuration derived from the job spec ({message}).",
         "Fix the resources or command in the spec that the message names.",
         error_kinds=("invalid_config",)),
    # The checkpoint to resume from is downloaded and verified before the container exists.
    Rule("start.checkpoint_corrupt", "start", "checkpoint_corrupt", "platform",
         "The checkpoint to resume from did not match its recorded sha256 when node[ {node}] "
         "downloaded it ({message}); the job was not started from data that is not the "
         "checkpoint it stored.",
         "Nothing to change in your job: the stored checkpoint is damaged. Submit the job again "
         "without resume_from, or resume from another job's checkpoint; the compute of this "
         "attempt is credited.",
         error_kinds=("checkpoint_checksum_mismatch",)),
    Rule("start.checkpoint_unavailable", "start", "container_start_failed", "platform",
         "Node[ {node}] could not download the checkpoint to resume from ({message}).",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}.",
         error_kinds=("resume_checkpoint_unavailable",)),
    # The agent resolves the spec's secrets before the container exists (services/agent).
    Rule("start.secret_missing", "start", "secret_missing", "user",
         "The job names secrets its tenant has not set: {message}; the container was not "
         "started.",
         "Set each one (`gridledger secret set NAME`; `gridledger secret list` shows yours), or "
         "fix the name in the spec's secrets, then submit the job again.",
         error_kinds=("secret_missing",)),
    Rule("start.secrets_unavailable", "start", "container_start_failed", "platform",
         "Node[ {node}] could not fetch the job's secrets ({message}).",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}.",
         error_kinds=("secrets_unavailable",)),
    Rule("start.daemon_error", "start", "container_start_failed", "platform",
         "Docker on node[ {node}] failed to start the container[ ({error_kind}: {message})].",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}."),
    # ---- the process ran and failed
    Rule("run.runtime_exceeded", "run", "runtime_exceeded", "user",
         "The job was stopped after reaching its maximum runtime[ of {max_runtime} "
         "(limits.max_runtime_s = {max_runtime_s})].",
         "Raise limits.max_runtime_s, or store checkpoints (spec.checkpoints) and submit a new "
         "job with resume_from set to this job to continue where it stopped.",
         runtime_exceeded=True),
    Rule("run.host_oom", "run", "host_out_of_memory", "user",
         "The container was killed for using more host memory (RAM) than its limit[ of "
         "{memory_limit}] (OOMKilled[, exit code {exit_code}]). This is RAM, not GPU memory.",
         "Raise resources.memory_gb[ (now {memory})] or use less RAM: fewer data-loader "
         "workers, stream the dataset instead of loading it whole.",
         oom_killed=True),
    Rule("run.gpu_oom", "run", "gpu_out_of_memory", "user",
         "The process ran out of GPU memory (CUDA out of memory[ while allocating {alloc}])"
         "[ on {gpu_model}][ with {gpu_total} in total].",
         "Reduce the batch size, use a smaller model or request a GPU with more memory"
         "[ (resources.gpu_models; this attempt ran on {gpu_model})].",
         log=r"CUDA out of memory|torch\.cuda\.OutOfMemoryError|CUDA error: out of memory"
         r"|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory",
         extract=r"Tried to allocate (?P<alloc>\d+(?:\.\d+)? ?[KMGT]i?B)(?:.*total capacity "
         r"of (?P<gpu_total>\d+(?:\.\d+)? ?[KMGT]i?B))?"),
    Rule("run.cuda_runtime_missing", "run", "cuda_unavailable", "user",
         "The process could not load the CUDA library {lib}: the image does not contain the "
         "CUDA runtime[ (exit code {exit_code})].",
         "Build the image from a CUDA base image (e.g. nvidia/cuda:12.4.1-runtime-ubuntu22.04) "
         "or install the CUDA build of your framework.",
         log=r"(?P<lib>lib(?:cudart|cublas\w*|cudnn\w*|nvrtc|cufft|curand|cusparse|cusolver)"
         r"\.so[\w.]*)"),
    Rule("run.cuda_driver_missing", "run", "cuda_unavailable", "platform",
         "The NVIDIA driver library ({lib}) was not mounted into the container on node[ {node}].",
         f"{_NOTHING_TO_CHANGE}: the node's GPU runtime is misconfigured; {_RETRIED}.",
         gpus_requested=True, log=r"(?P<lib>lib(?:cuda|nvidia-ml)\.so[\w.]*)"),
    Rule("run.torch_cpu_build", "run", "cuda_unavailable", "user",
         "The image has a CPU-only build of PyTorch (Torch not compiled with CUDA enabled).",
         "Install the CUDA build of PyTorch in the image (pip install torch --index-url "
         "https://download.pytorch.org/whl/cu124) or start from a pytorch/pytorch CUDA image.",
         log=r"Torch not compiled with CUDA enabled"),
    Rule("run.cuda_driver_too_old", "run", "cuda_unavailable", "user",
         "The image's CUDA runtime is newer than the NVIDIA driver on the node supports "
         "({line}).",
         "Use an image built for an older CUDA version (12.x images run on drivers >= 525), or "
         "restrict resources.gpu_models to nodes with a newer driver.",
         log=r"CUDA driver version is insufficient|NVIDIA driver on your system is too old"),
    Rule("run.no_gpu_requested", "run", "cuda_unavailable", "user",
         "The process looked for a GPU, but the job requested none (resources.gpus = 0).",
         "Set resources.gpus to the number of GPUs the job needs.",
         gpus_requested=False, log=_NO_GPU + r"|libcuda\.so"),
    # GPUs were assigned and the container saw none: the node's GPU runtime, not the job.
    Rule("run.no_gpu_visible", "run", "cuda_unavailable", "platform",
         "The process saw no GPU although[ {gpu_count}] GPU(s) were assigned to it on node"
         "[ {node}] ({line}).",
         f"{_NOTHING_TO_CHANGE} unless it overrides CUDA_VISIBLE_DEVICES or "
         f"NVIDIA_VISIBLE_DEVICES; {_RETRIED}.",
         gpus_requested=True, log=_NO_GPU),
    Rule("run.missing_module", "run", "missing_module", "user",
         "The process exited with code {exit_code}: Python could not import the module "
         "'{module}' (ModuleNotFoundError).",
         "Install '{package}' in the image (e.g. RUN pip install {package} in its Dockerfile), "
         "or fix the import if '{module}' is part of your code.",
         log=r"(?:ModuleNotFoundError|ImportError): No module named '?(?P<module>[\w.]+)'?"),
    Rule("run.import_name", "run", "missing_module", "user",
         "The process exited with code {exit_code}: '{name}' could not be imported from "
         "'{module}': the installed version of '{package}' is usually not the one the code "
         "expects.",
         "Pin the version of '{package}' the code was written for in the image.",
         log=r"ImportError: cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)'"),
    Rule("run.script_not_found", "run", "missing_file", "user",
         "The process exited with code {exit_code}: Python could not open the script "
         "'{path}' (No such file or directory).",
         "Check spec.command and the image's working directory: '{path}' must exist inside the "
         "image (COPY it in the Dockerfile) or be given as an absolute path.",
         log=r"can't open file '(?P<path>[^']+)'"),
    Rule("run.file_not_found", "run", "missing_file", "user",
         "The process exited with code {exit_code}: a file it reads does not exist ({path}).",
         "Make sure '{path}' is in the image or is downloaded by the job before it is read; "
         "relative paths start at the container's working directory.",
         log=r"FileNotFoundError: (?:\[Errno 2\] )?(?:No such file or directory: )?"
         r"'?(?P<path>[^'\s]+)'?"),
    Rule("run.command_not_found", "run", "entrypoint_not_found", "user",
         "The command[ {command0}] was not found in the image (exit code 127[: {line}]).",
         "Check spec.command: the program must be installed in the image (on its PATH) or "
         "given by a path that exists in the image.",
         exit_codes=(127,)),
    Rule("run.command_not_executable", "run", "entrypoint_not_found", "user",
         "The command[ {command0}] exists but could not be executed (exit code 126[: {line}]).",
         "Make the program executable (chmod +x in the Dockerfile) or run it through its "
         "interpreter, e.g. python train.py.",
         exit_codes=(126,)),
    # SIGKILL/SIGTERM without an OOM kill, a cancel, the runtime limit or a node shutdown: the
    # sender is unknown (a kill in the job, or something on the node). Say so, retry once.
    Rule("run.killed", "run", "unknown", "platform",
         "The process was killed by {signal_name}[ (exit code {exit_code})]. It was not "
         "OOM-killed, so this is not the host memory limit[ of {memory_limit}], and gridledger "
         "did not stop it (no cancel, runtime limit or node shutdown).",
         "gridledger retries it once, on another node when one can hold it. If it is killed "
         "again, look for a kill or a supervisor inside the job, or a child process killed for "
         "memory (raise "
         "resources.memory_gb).",
         signals=(9, 15), oom_killed=False),
    Rule("run.crashed", "run", "user_process_error", "user",
         "The process crashed with {signal_name}[ (exit code {exit_code})][: {last_line}].",
         "A native crash inside the job (a library or extension); check the last log lines, "
         "and the versions of the native libraries in the image.",
         signals=(4, 6, 7, 8, 11)),
    Rule("run.exit_nonzero", "run", "user_process_error", "user",
         "The process exited with code {exit_code}[; last log line: {last_line}].",
         "The job's own code failed; the last log lines are in the evidence. Fix it and submit "
         "again (set retry.retry_user_errors to retry such failures automatically)."),
    # ---- the process exited 0; outputs. What the job wrote or declared is the user's, first;
    # the platform's side only when the store itself refused or could not be reached.
    Rule("outputs.refused", "outputs", "output_refused", "user",
         "The process exited 0, but the required output {refused_outputs} was refused[: "
         "{refused_outputs_why}].",
         f"{_ONLY_FILES} Then submit the job again.",
         requires=("refused_outputs",)),
    Rule("outputs.missing", "outputs", "output_missing", "user",
         "The process exited 0 but did not write the required output {missing_outputs} under "
         "$GRIDLEDGER_OUTPUT_DIR.",
         "Write it under $GRIDLEDGER_OUTPUT_DIR (the path is relative to it), or mark it "
         "required: false in spec.outputs.",
         requires=("missing_outputs",)),
    Rule("outputs.store_failed", "outputs", "output_upload_failed", "platform",
         "The process exited 0, but storing the output {failed_outputs} in the artifact store "
         "failed[ ({store_message})].",
         "Your job did its work; the outputs that were not stored are lost. Run the job again "
         "to produce them; the compute of this attempt is credited.",
         requires=("failed_outputs",)),
    Rule("outputs.refused_optional", "outputs", "optional_output_refused", "user",
         "The process exited 0; the optional output or checkpoint {refused_optional} was "
         "refused and not stored[: {refused_optional_why}].",
         f"{_ONLY_FILES} The attempt's compute is billed: the job ran as it was written.",
         requires=("refused_optional",)),
    # ---- node, finishing
    Rule("node.lost", "node", "node_lost", "platform",
         "Node[ {node}] stopped sending heartbeats[ (last at {last_heartbeat})] and was "
         "declared lost[ at {deadline}].",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}, from the latest checkpoint if the job stored "
         "one (declare spec.checkpoints to lose less work).",
         trigger=("AttemptLost",)),
    Rule("node.agent_shutdown", "node", "node_lost", "platform",
         "The agent on node[ {node}] shut down during the attempt and stopped the container.",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}.",
         release_reasons=("agent_shutdown",)),
    Rule("finishing.timeout", "finishing", "finishing_timeout", "platform",
         "Node[ {node}] did not finish the attempt (outputs, release)[ before {deadline}]"
         "[ after the process exited with code {exit_code}].",
         f"{_NOTHING_TO_CHANGE}: {_RETRIED}."),
    # ---- publish: a record the job's history leads to is over its topic's limit
    Rule("publish.record_refused", "publish", "record_refused", "platform",
         "gridledger could not publish this job's {record_type} on {record_topic}: "
         "{size} is over the topic's limit of {limit}. The job was ended so that it does "
         "not wait for a record that can never be written; the compute it held is credited.",
         "Not a fault of your job: nothing is billed for it. Submit it again (a smaller spec "
         "or fewer attempts make smaller records); if this recurs, give the operator the job "
         "id: the refused record's details are on the dead-letter topic.",
         trigger=("RecordRefused",)),
    # ---- nothing matched
    Rule("fallback.unknown", "*", "unknown", "platform",
         "The attempt ended without a recognised cause[ (exit code {exit_code})]"
         "[; last log line: {last_line}].",
         "gridledger retries once. If it fails the same way, the evidence and logs show what "
         "the job did last."),
)
# fmt: on

_PIP_NAMES = {
    "cv2": "opencv-python",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "yaml": "PyYAML",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "attr": "attrs",
}
"""Import names whose pip package is named differently (advice says what to install)."""

_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_FIELD = re.compile(r"\{(\w+)\}")


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill ``{name}`` fields; drop a ``[...]`` segment when a field in it is unknown."""

    def optional(m: re.Match[str]) -> str:
        inner = m.group(1)
        return inner if all(values.get(n) for n in _FIELD.findall(inner)) else ""

    text = _OPTIONAL.sub(optional, template)
    return _FIELD.sub(lambda m: values.get(m.group(1)) or "(unknown)", text)


def _matches(rule: Rule, f: Facts) -> list[str] | None:
    """The log lines the rule matched ([] when it has no log matcher), or None."""
    checks = (
        rule.phase in ("*", f.phase),
        not rule.trigger or f.trigger in rule.trigger,
        not rule.exit_codes or f.exit_code in rule.exit_codes,
        not rule.signals or f.signal in rule.signals,
        rule.oom_killed is None or bool(f.oom_killed) == rule.oom_killed,
        rule.runtime_exceeded is None or f.runtime_exceeded == rule.runtime_exceeded,
        not rule.image_reason or f.image_reason == rule.image_reason,
        not rule.release_reasons or f.release_reason in rule.release_reasons,
        rule.gpus_requested is None or (f.gpus_requested > 0) == rule.gpus_requested,
        not rule.rejected_as or f.rejected_as == rule.rejected_as,
        not rule.error_kinds or f.error_kind in rule.error_kinds,
        rule.retry_attempt is None or (f.attempt > 1) == rule.retry_attempt,
        all(f.values.get(name) for name in rule.requires),
    )
    if not all(checks):
        return None
    if not rule.log:
        return []
    matched = [line for line in f.log_lines if re.search(rule.log, line)]
    return matched or None


def _values(rule: Rule, f: Facts, matched: Sequence[str]) -> dict[str, str]:
    values = dict(f.values)
    # The last matching line is the final error of a traceback: its groups are the specifics.
    for pattern, lines in ((rule.log, matched), (rule.extract, f.log_lines)):
        for line in reversed(lines):
            m = re.search(pattern, line) if pattern else None
            if m:
                values.update({k: _tidy(k, v) for k, v in m.groupdict().items() if v})
                values.setdefault("line", line.strip())
                break
    values.setdefault("why", values.get("message", ""))
    values.setdefault("cmd", values.get("command0", ""))
    module = values.get("module")
    if module:
        top = module.split(".")[0]
        values.setdefault("package", _PIP_NAMES.get(top, top))
    return values


def _evidence(rule: Rule, f: Facts, matched: Sequence[str], values: Mapping[str, str]) -> Evidence:
    lines = list(matched) or [line for line in f.log_lines if line.strip()]
    skip = {"line", "last_line", "command", "rejection_summary", "rejection_advice"}
    details = {k: v for k, v in values.items() if k not in skip}
    details.update(phase=f.phase, trigger=f.trigger)
    return Evidence(
        rule_id=rule.id,
        exit_code=f.exit_code,
        signal=f.signal,
        oom_killed=f.oom_killed,
        log_lines=lines[-MAX_EVIDENCE_LINES:],
        details=details,
    )


def classify_facts(f: Facts) -> Classification:
    """Apply the first matching rule of :data:`RULES` to already gathered facts."""
    rule, matched = RULES[-1], []
    for candidate in RULES:
        found = _matches(candidate, f)
        if found is not None:
            rule, matched = candidate, found
            break
    values = _values(rule, f, matched)
    return Classification(
        failure_class=rule.failure_class,
        attribution=rule.attribution,
        retryable=rule.retryable,
        summary=render(rule.summary, values),
        advice=render(rule.advice, values),
        evidence=_evidence(rule, f, matched, values),
        rule_id=rule.id,
        attempt=f.attempt,
        occurred_at=f.occurred_at,
    )


def classify(history: Sequence[Event], attempt: int, at: Event | None = None) -> Classification:
    """Classify why ``attempt`` of the job ended unsuccessfully.

    Args:
        history: the job's events (duplicates allowed), at least up to the event
            that ended the attempt. Later events do not change the answer.
        attempt: the attempt number (0 for a job that never got one: rejected,
            or no capacity before its first attempt).
        at: the ending to judge the attempt on; default its first one. The decider
            passes a late release that shows the watchdog's verdict was wrong.

    Returns:
        The classification of the first rule that matches; ``unknown`` when none does.
        Call it for attempts that did not succeed cleanly (see
        :func:`projections.history.is_clean_success`).
    """
    return classify_facts(gather(history, attempt, at))


def classify_refusal(event: RecordRefused, attempt: int) -> Classification:
    """The classification of a RecordRefused (the job's ``attempt`` when it came)."""
    f = Facts(
        attempt=attempt,
        phase="publish",
        trigger=event.type,
        occurred_at=event.occurred_at,
        values={
            "record_type": event.record_type,
            "record_topic": event.record_topic,
            "size": f"{event.size_bytes:,} bytes",
            "limit": f"{event.limit_bytes:,} bytes",
        },
    )
    return classify_facts(f)


def classify_rejection(event: JobRejected) -> Classification:
    """The classification of a JobRejected, for the job view (the API wrote the numbers)."""
    return classify([event], event.attempt)


def _tidy(name: str, value: str) -> str:
    """Quote a matched value the way a user wrote it.

    Python resolves a relative script against the working directory, so in an
    image whose WORKDIR is '/' it reports '//train.py' for 'train.py'.
    """
    if name == "path" and value.startswith("//"):
        return "/" + value.lstrip("/")
    return value
