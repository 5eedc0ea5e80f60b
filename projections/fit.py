"""Pre-flight fit: can any node of the fleet ever hold this job?

docs/architecture.md, "Principles": reject the impossible early.

The estimate is deliberately simple and explainable, because its numbers go
into the rejection message:

* ``resources.min_vram_gb`` wins when given (the spec documents it as the job's
  total need; it is divided across the requested GPUs like the estimate).
* Otherwise ``params_billion x bytes per parameter x factor``:

  - bytes: fp32 4, fp16/bf16 2, int8 1, int4 0.5.
  - inference x1.2: weights plus ~20 % for the KV cache, activations and the
    CUDA context at moderate batch sizes and context lengths.
  - training x4.0: weights, gradients and two Adam moments are four copies
    of the weights (16 bytes/param in fp32, 4x the 4-byte weights). Mixed
    precision with fp32 master weights is nearer 8x the fp16 weights, but ZeRO
    sharding, 8-bit optimisers and LoRA routinely cut it well below that. A
    rejection must only refuse jobs that cannot fit, so the estimate errs low;
    a job that needs more states it in ``min_vram_gb``.

  ``1e9 params x 1 byte`` is read as 1 GiB rather than 0.93: the ~7 % surplus
  stands in for the CUDA context and allocator fragmentation, and it keeps
  the numbers in messages easy to check by hand ("16B x 2 bytes x 1.2 = 38.4").
* The total is divided across the requested GPUs (tensor/pipeline parallel or
  sharded training): each of the ``gpus`` GPUs on one node must hold its share.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from projections.evidence import number
from schemas.events import Event, JobRejected
from schemas.spec import JobSpec
from schemas.types import FitReport, GpuDevice

BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}
MODE_FACTOR = {"inference": 1.2, "training": 4.0}


class NodeCapacity(BaseModel):
    """What one node of the fleet can hold (from NodeRegistered)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: str
    provider: str = ""
    region: str = ""
    gpus: list[GpuDevice] = Field(default_factory=list)


@lru_cache(maxsize=4096)
def _tokens(model: str) -> frozenset[str]:
    text = model.upper().replace("NVIDIA", " ").replace("TESLA", " ")
    return frozenset(t for t in re.split(r"[\s_-]+", text) if t)


def gpu_model_matches(wanted: str, model: str) -> bool:
    """True when a GPU named ``model`` (as NVML reports it) is the requested ``wanted``.

    Every token of the request must appear in the device name: 'A100-80GB' matches
    'NVIDIA A100-SXM4-80GB', 'A10' does not match 'A10G'. The scheduler must use
    this same function so that fit and placement agree.
    """
    return _tokens(wanted) <= _tokens(model)


def model_allowed(gpu_models: Sequence[str], model: str) -> bool:
    """True when ``model`` is one of the job's ``resources.gpu_models`` (any, when empty)."""
    return not gpu_models or any(gpu_model_matches(w, model) for w in gpu_models)


def holds(
    gpus: int, need_gb: float, gpu_models: Sequence[str], model: str, count: int, vram_gb: float
) -> bool:
    """The one rule of fit and placement: can ``count`` GPUs of ``model`` on one node, the
    smallest of them with ``vram_gb`` GiB, hold a job of ``gpus`` GPUs that needs
    ``need_gb`` GiB on each, restricted to ``gpu_models``?

    All of a job's GPUs come from one node and one model. Pre-flight asks it of each
    node's inventory (:func:`model_groups`), placement of each node's free GPUs
    (``services/scheduler/placement.py``), so a job that passes pre-flight can be placed
    once the GPUs are free, and one that never can is rejected at submit.
    """
    return count >= gpus and vram_gb >= need_gb and model_allowed(gpu_models, model)


def model_groups(gpus: Iterable[GpuDevice]) -> dict[str, tuple[int, float]]:
    """One node's GPUs by model: ``model -> (count, GiB of its smallest GPU)``."""
    out: dict[str, tuple[int, float]] = {}
    for gpu in gpus:
        count, vram = out.get(gpu.model, (0, _gib(gpu)))
        out[gpu.model] = (count + 1, min(vram, _gib(gpu)))
    return out


def _gib(gpu: GpuDevice) -> float:
    return gpu.memory_total_mb / 1024


def _total_and_basis(spec: JobSpec) -> tuple[float, str]:
    """The job's GPU memory in GiB, all GPUs together, and how it was computed."""
    if spec.resources.min_vram_gb is not None:
        return (
            spec.resources.min_vram_gb,
            f"resources.min_vram_gb = {number(spec.resources.min_vram_gb)} GiB",
        )
    if spec.model is None:
        return 0.0, "no model or min_vram_gb declared: no GPU memory requirement"
    m = spec.model
    per_param, factor = BYTES_PER_PARAM[m.dtype], MODE_FACTOR[m.mode]
    basis = f"{m.params_billion:g}B params x {per_param:g} bytes {m.dtype} x {factor:.1f} {m.mode}"
    return m.params_billion * per_param * factor, basis


def estimate_vram_gb(spec: JobSpec) -> float:
    """GPU memory each requested GPU must have, in GiB (0 when the spec gives no hint)."""
    total, _ = _total_and_basis(spec)
    return round(total / max(spec.resources.gpus, 1), 2)


def check_fit(spec: JobSpec, fleet: list[NodeCapacity]) -> FitReport:
    """Decide whether some node of ``fleet`` could ever hold the job, with the numbers.

    A job fits when one node has at least ``resources.gpus`` GPUs of one allowed
    model, each with at least :func:`estimate_vram_gb` (:func:`holds`, the rule
    placement applies too). An empty fleet proves
    nothing (nodes may not have registered yet): the report then says the fit
    was not checked and ``fits`` is True, so the job queues and meets the queue
    deadline instead of being rejected for a capacity problem.
    """
    gpus = spec.resources.gpus
    total, basis = _total_and_basis(spec)
    need = round(total / max(gpus, 1), 2)
    if gpus > 1 and total:
        basis += f" / {gpus} GPUs"
    wanted = spec.resources.gpu_models
    groups = [(n, model_groups(n.gpus)) for n in fleet]
    all_gpus = [g for n in fleet for g in n.gpus if model_allowed(wanted, g.model)]
    largest = max(all_gpus, key=_gib, default=None)
    largest_gb = round(_gib(largest), 2) if largest else 0.0
    max_per_node = max(
        (c for _, gs in groups for m, (c, _) in gs.items() if model_allowed(wanted, m)), default=0
    )
    holders = [n for n, gs in groups if _node_holds(spec, gs, gpus, need)]

    def report(fits: bool, explanation: str) -> FitReport:
        return FitReport(
            fits=fits,
            required_vram_gb=need,
            gpus_requested=gpus,
            largest_gpu_vram_gb=largest_gb,
            largest_gpu_model=largest.model if largest else "",
            max_gpus_per_node=max_per_node,
            estimate_basis=basis,
            explanation=explanation,
        )

    needs = f"job needs ~{number(need)} GiB of GPU memory per GPU ({basis})"
    if not fleet:
        return report(True, f"{needs}; fit not checked: no node has registered yet")
    if holders:
        return report(
            True,
            f"{needs} on {gpus} GPU(s); {len(holders)} of {len(fleet)} node(s) can hold it, "
            f"e.g. {holders[0].node_id}",
        )
    if not all_gpus:
        models = sorted({g.model for n in fleet for g in n.gpus})
        return report(
            False,
            f"no GPU in the fleet is one of resources.gpu_models ({', '.join(wanted)}); "
            f"the fleet has {', '.join(models) or 'no GPUs'} — accept one of those models",
        )
    if largest is not None and need > _gib(largest):
        return report(
            False,
            f"{needs}; the largest GPU in the fleet is {largest.model} with "
            f"{number(_gib(largest))} GiB — {_advice(spec, total, groups)}",
        )
    return report(
        False,
        f"{needs} on {gpus} GPUs of one model on one node; the most any node has is "
        f"{max_per_node} suitable GPU(s) of one model — request at most {max_per_node} GPUs "
        "or a smaller model",
    )


def _node_holds(
    spec: JobSpec, groups: dict[str, tuple[int, float]], gpus: int, need: float
) -> bool:
    """A node holds the job when one of its model groups does (any node, for no GPUs)."""
    wanted = spec.resources.gpu_models
    return gpus == 0 or any(holds(gpus, need, wanted, m, c, v) for m, (c, v) in groups.items())


def _advice(
    spec: JobSpec, total: float, groups: list[tuple[NodeCapacity, dict[str, tuple[int, float]]]]
) -> str:
    """Say how many GPUs would make the job fit, when some node has that many."""
    for n in range(max(spec.resources.gpus, 1) + 1, 17):
        if any(_node_holds(spec, gs, n, total / n) for _, gs in groups):
            return f"request {n} GPUs or a smaller model"
    lower = (
        "a lower precision (int8/int4) or "
        if spec.model and spec.model.dtype in ("fp32", "fp16", "bf16")
        else ""
    )
    return f"no node has enough GPUs for it; use {lower}a smaller model"


def rejected(
    cause: Event,
    report: FitReport,
    *,
    by: str,
    producer: str,
    now: datetime,
    suffix: str = "",
    leader_epoch: int = 0,
) -> JobRejected:
    """The JobRejected(does_not_fit) for a report that does not fit: the one builder.

    Derived by ``by`` from the event that led to the check (the JobSubmitted at
    pre-flight; the JobQueued when the fleet was empty at submit and the check ran
    once a node registered, with ``suffix`` "reject"), written by ``producer`` at
    ``now`` as leader ``leader_epoch``, with the report's numbers. The explanation reads
    "<the numbers> — <what to change>": the numbers become the summary and the suggestion
    the advice (a generic one when the explanation names none).
    """
    # The last dash: what comes before it may quote the tenant's own gpu_models, dashes and all.
    found, dash, fix = report.explanation.rpartition(" — ")
    if not dash:
        found, fix = report.explanation, ""
    return JobRejected.derived(
        cause,
        by,
        suffix,
        attempt=0,
        occurred_at=now,
        producer=producer,
        leader_epoch=leader_epoch,
        failure_class="does_not_fit",
        summary=f"The job can never run on this fleet: {found}.",
        advice=f"{fix[:1].upper()}{fix[1:]}." if fix else "Request fewer or smaller GPUs.",
        fit=report,
    )
