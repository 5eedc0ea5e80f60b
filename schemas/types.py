"""Small records nested inside events."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class FrozenModel(BaseModel):
    """Base of every value inside an event or a read model: immutable, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuDevice(FrozenModel):
    """One GPU of a node's inventory."""

    index: int
    model: str
    memory_total_mb: int
    uuid: str = ""


class GpuUsage(FrozenModel):
    """Live usage of one GPU, as read from NVML (zeros on a declared inventory)."""

    index: int
    utilization_pct: float = 0.0
    memory_used_mb: int = 0
    memory_total_mb: int = 0


class CheckpointRef(FrozenModel):
    """A stored checkpoint a new attempt can resume from."""

    job_id: str
    attempt: int
    name: str
    uri: str
    sha256: str
    bytes: int
    step: int | None = None
    stored_at: datetime | None = None


class Avoidance(FrozenModel):
    """Where a retry's placement would rather not go, and what it settled for.

    A retry decision's ``avoid_nodes``/``avoid_providers`` are a preference: the
    scheduler first tries every other node and provider; when none can hold the
    attempt within the fallback wait, it falls back to another node of an avoided
    provider (``provider``), then to an avoided node itself (``node``), never to
    one that is silent or suspect.
    """

    nodes: list[str] = Field(default_factory=list)
    providers: list[str] = Field(default_factory=list)
    fell_back_to: Literal["", "provider", "node"] = ""
    """"" = placed elsewhere as preferred; otherwise what it was allowed to reuse."""
    waited_s: float = 0.0
    """How long the attempt had been placeable, waiting for an alternative, when placed."""
    because: str = ""
    """Why they were avoided, e.g. "attempt 1 failed node_lost"."""


class Evidence(FrozenModel):
    """What a failure classification is based on, so a user can check it."""

    rule_id: str
    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool | None = None
    log_lines: list[str] = Field(default_factory=list)
    """The log lines that matched the rule (or the last lines when none matched)."""
    details: dict[str, str] = Field(default_factory=dict)
    """Other facts, e.g. the image, the deadline, the node."""


class FitReport(FrozenModel):
    """The numbers behind a pre-flight fit decision."""

    fits: bool
    required_vram_gb: float
    """Estimated GPU memory per GPU, in GiB."""
    gpus_requested: int
    largest_gpu_vram_gb: float
    largest_gpu_model: str
    max_gpus_per_node: int
    """The most GPUs of one allowed model on one node: a job's GPUs are one model."""
    estimate_basis: str
    """How the requirement was computed, e.g. '7B params x 2 bytes (fp16) x 1.2 inference'."""
    explanation: str
