"""The failure-class table: one row per class, the single source of what a class means.

Every rule of :data:`projections.failures.RULES` names one of these classes; the
retry decider (:func:`projections.retry.decide`) reads the row to know whether
the class is retried, on which side it is, what the retry prefers to avoid, how
many times it may recur and which terminal event ends a job that is not
retried; the accounting policy reads its billing side. The README's failure-class
table is checked against this one by a test
(``tests/projections/test_failure_classes.py``), so the docs cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

Side = Literal["user", "platform", "capacity"]
Avoid = Literal["", "node", "provider"]
"""What a retry prefers not to use again: nothing, the failed node, or the failed node
and its provider. A preference, never an exclusion (the scheduler falls back)."""
Terminal = Literal["JobFailed", "JobSucceededWithErrors", "JobCancelled", "JobRejected"]
Billing = Literal["by_side", "credited"]
"""Who pays for an attempt that failed with the class: the side its classification found
(the user's is billed, the platform's and capacity's credited), or never the user."""


@dataclass(frozen=True)
class FailureClass:
    """One row of the table."""

    name: str
    side: Side
    """Whose side the failure is usually on (a rule may find the platform at fault
    for a user-side class: see ``platform_cause``)."""
    retryable: bool
    """Retried by default (within ``retry.max_attempts`` and ``limit``)."""
    evidence: str
    """The typical evidence, as the README shows it."""
    avoid: Avoid = ""
    avoid_why: str = ""
    """Why the retry prefers another node (and provider): quoted in the decision."""
    opt_in: bool = False
    """``retry.retry_user_errors`` makes it retryable: user failures that can be
    transient (a flaky step, fragmentation, a data-dependent spike)."""
    limit: int | None = None
    """At most this many retries after failures of the class, whatever the budget left."""
    terminal: Terminal = "JobFailed"
    """The terminal event when the job is not retried."""
    why_not: str = "the job's own code failed"
    """Why it is not retried, for the decision's reason."""
    platform_cause: bool = False
    """Some rules find the platform at fault for this class (a node's GPU runtime):
    those classifications are platform-side, retried, and avoid the node."""
    billing: Billing = "by_side"
    """The billing side (:data:`Billing`): ``credited`` where nothing shows the failure
    was the user's (read by ``projections.accounting.AccountingPolicy.billable``)."""

    def retryable_for(self, side: str) -> bool:
        """Whether a classification of this class, found on ``side``, is retried."""
        return self.retryable or (self.platform_cause and side == "platform")

    def retried(self) -> str:
        """The README's "retried" cell, derived from the row."""
        if self.terminal == "JobRejected":
            return "never: rejected at submit"
        if self.terminal == "JobSucceededWithErrors":
            return "no: `succeeded_with_errors`"
        where = {
            "": "",
            "node": ", preferring another node",
            "provider": ", preferring another node and provider",
        }[self.avoid]
        if self.retryable:
            times = "once" if self.limit == 1 else "yes"
            return f"{times}{where}"
        if self.platform_cause:
            return "no (platform cause: yes, preferring another node)"
        return "no (opt-in)" if self.opt_in else "no"

    def billed(self) -> str:
        """The README's "billed" cell (an attempt that failed with the class), derived
        from the row."""
        if self.billing == "credited" or self.side != "user":
            return "no"
        return "yes (platform cause: no)" if self.platform_cause else "yes"


_NODE_WHY = "the fault may be the node's"
_PROVIDER_WHY = (
    "a node that vanishes or never answers is the kind of fault a provider has in "
    "several nodes at once"
)

# fmt: off
TABLE: tuple[FailureClass, ...] = (
    FailureClass("does_not_fit", "user", False,
                 "no node has `resources.gpus` GPUs of one allowed model with the VRAM each",
                 terminal="JobRejected", why_not="no node in the fleet can hold the job"),
    FailureClass("invalid_spec", "user", False, "the spec fails validation",
                 why_not="the job spec cannot run as submitted"),
    FailureClass("capacity_unavailable", "capacity", False,
                 "queue deadline passed without a placement",
                 why_not="no capacity became free before the queue deadline, and gridledger "
                 "does not extend a job's queue deadline on its own"),
    FailureClass("image_not_found", "user", False, "image absent, registry says not found",
                 why_not="the job's image does not exist"),
    FailureClass("secret_missing", "user", False,
                 "a secret the spec names (`secrets:`) is not set for the tenant at dispatch",
                 why_not="a secret the job needs is not set"),
    FailureClass("image_pull_failed", "platform", True, "registry unreachable",
                 avoid="node", avoid_why="the node's network or registry access may be at fault"),
    FailureClass("entrypoint_not_found", "user", False,
                 'exit 126/127, "executable file not found"',
                 why_not="the job's command is not in its image"),
    FailureClass("missing_module", "user", False,
                 "`ModuleNotFoundError`, `ImportError: No module named`",
                 why_not="the job's image lacks a Python module it imports"),
    FailureClass("cuda_unavailable", "user", False,
                 '`libcudart.so` missing, "Torch not compiled with CUDA enabled" (user); '
                 "assigned GPUs not visible, driver not mounted (platform)",
                 avoid="node", avoid_why="the node's GPU runtime is misconfigured",
                 why_not="the job's image cannot use CUDA", platform_cause=True),
    FailureClass("gpu_out_of_memory", "user", False,
                 "`CUDA out of memory`, `torch.cuda.OutOfMemoryError`", opt_in=True),
    FailureClass("host_out_of_memory", "user", False,
                 "the container was OOM-killed against its memory limit (exit 137 alone is "
                 "not OOM)", opt_in=True),
    FailureClass("missing_file", "user", False, "`FileNotFoundError`, \"can't open file\"",
                 why_not="a file the job reads does not exist"),
    FailureClass("user_process_error", "user", False, "any other non-zero exit", opt_in=True),
    FailureClass("runtime_exceeded", "user", False, "`limits.max_runtime_s` reached",
                 why_not="the job reached its declared maximum runtime"),
    FailureClass("node_lost", "platform", True,
                 "heartbeats stopped past the deadline; the agent shut down mid-attempt",
                 avoid="provider", avoid_why=_PROVIDER_WHY),
    FailureClass("dispatch_timeout", "platform", True, "the node never accepted the attempt",
                 avoid="provider", avoid_why=_PROVIDER_WHY),
    FailureClass("container_start_failed", "platform", True,
                 "the Docker daemon failed to start the container",
                 avoid="node", avoid_why="the node's Docker daemon failed"),
    FailureClass("checkpoint_corrupt", "platform", False,
                 "the checkpoint to resume from does not hash to its recorded sha256",
                 why_not="the stored checkpoint itself is damaged: a retry would download "
                 "the same bytes"),
    FailureClass("finishing_timeout", "platform", True,
                 "the process exited but the node never released",
                 avoid="node", avoid_why="the node stopped finishing its attempts"),
    FailureClass("output_upload_failed", "platform", False,
                 "process ok, artifact store failed", terminal="JobSucceededWithErrors",
                 why_not="retrying only the output upload is not supported yet, and rerunning "
                 "the whole job would redo work that already finished"),
    FailureClass("output_missing", "user", False, "process ok, a required output absent",
                 why_not="the job did not write a required output"),
    FailureClass("output_refused", "user", False,
                 "process ok, a required output is a link, FIFO, device, socket or folder, "
                 "leaves the output folder, or is over a size cap",
                 why_not="the job wrote or declared a required output that is never stored"),
    FailureClass("optional_output_refused", "user", False,
                 "process ok, an optional output or a checkpoint refused (as above)",
                 terminal="JobSucceededWithErrors",
                 why_not="the job's work is done and the refused file would be refused again"),
    FailureClass("record_refused", "platform", False,
                 "a record of the job (its view, its accounting record, a decision) was "
                 "larger than its topic takes, or a service could not apply it",
                 why_not="the same history would produce the same record again"),
    FailureClass("cancelled", "user", False, "user cancel", terminal="JobCancelled",
                 why_not="the user cancelled the job"),
    FailureClass("unknown", "platform", True,
                 "nothing matched (e.g. a SIGKILL nobody explains)", limit=1,
                 avoid="node", avoid_why=f"{_NODE_WHY}, and avoiding one node is cheap",
                 billing="credited"),
)
# fmt: on

CLASSES: Mapping[str, FailureClass] = {row.name: row for row in TABLE}
"""The table by class name."""

FAILURE_CLASSES: tuple[str, ...] = tuple(CLASSES)


def row(name: str) -> FailureClass:
    """The row of class ``name``; an unknown name (a class from a newer classifier)
    gets the ``unknown`` row's treatment under its own name (but for its billing: it is
    billed on the side its classification found)."""
    found = CLASSES.get(name)
    return found if found is not None else replace(CLASSES["unknown"], name=name)
