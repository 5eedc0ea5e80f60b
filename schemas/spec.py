"""The job spec a user submits, with validation that names the field and the fix."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Dtype = Literal["fp32", "fp16", "bf16", "int8", "int4"]
ModelMode = Literal["inference", "training"]

MAX_COMMAND_BYTES = 64 * 1024
"""A command line longer than this is almost certainly data pasted by mistake."""

_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
SECRET_NAME_RULE = "1-128 letters, digits, '_', '.' or '-', starting with a letter or digit"
"""What ``gridledger secret set NAME`` and ``secrets:`` accept as a secret's name."""
MAX_SECRETS = 64

MAX_LABELS = 16
"""Labels per job: enough for project, team, cost centre and a few more."""
LABEL_KEY_RE = re.compile(r"^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$")
LABEL_KEY_RULE = (
    "1-63 characters of a-z, 0-9, '-', '_' or '.', starting and ending with a letter or digit"
)
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
LABEL_VALUE_RULE = (
    "0-63 characters of A-Z, a-z, 0-9, '-', '_' or '.', starting and ending with a letter or digit"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Strict):
    """What one attempt needs from a node."""

    gpus: int = Field(1, ge=0, le=16, description="number of GPUs on one node")
    gpu_models: list[str] = Field(
        default_factory=list, description="acceptable GPU models, e.g. ['A100-80GB']; empty = any"
    )
    min_vram_gb: float | None = Field(
        None, gt=0, description="GPU memory needed per job in GiB; overrides the model estimate"
    )
    memory_gb: float = Field(4.0, gt=0, le=2048, description="host memory limit of the container")
    cpus: float = Field(1.0, gt=0, le=256)


class ModelSpec(_Strict):
    """The model the job loads, used to estimate GPU memory before placement."""

    params_billion: float = Field(..., gt=0, le=10_000)
    dtype: Dtype = "fp16"
    mode: ModelMode = "inference"


class Limits(_Strict):
    """The job's time bounds: they make every job end, however it goes."""

    max_runtime_s: int = Field(3600, ge=1, le=30 * 24 * 3600)
    queue_timeout_s: int = Field(600, ge=1, le=7 * 24 * 3600)


class OutputSpec(_Strict):
    """A file or folder the job must leave under ``$GRIDLEDGER_OUTPUT_DIR``."""

    path: str = Field(..., min_length=1, max_length=512)
    required: bool = True

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise ValueError(
                "must be a path relative to $GRIDLEDGER_OUTPUT_DIR without '..', e.g. 'model.pt'"
            )
        return value


class RetrySpec(_Strict):
    """How often and how soon the job's failures are retried (platform failures by default)."""

    max_attempts: int = Field(3, ge=1, le=10, description="attempts in total, the first included")
    retry_user_errors: bool = Field(
        False, description="also retry failures attributed to the job itself (off by default)"
    )
    backoff_s: float = Field(5.0, ge=0, le=3600)
    backoff_cap_s: float = Field(300.0, ge=0, le=24 * 3600)


class Placement(_Strict):
    """Where the job prefers to run, in order of preference, and the nodes it avoids."""

    providers: list[str] = Field(default_factory=list, description="preferred providers, in order")
    regions: list[str] = Field(default_factory=list, description="preferred regions, in order")
    avoid_nodes: list[str] = Field(default_factory=list)


class JobSpec(_Strict):
    """A job as submitted: what to run, on what, and what it leaves behind."""

    name: str = Field("", max_length=200)
    image: str = Field(..., min_length=1, max_length=512)
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    model: ModelSpec | None = None
    limits: Limits = Field(default_factory=Limits)
    outputs: list[OutputSpec] = Field(default_factory=list)
    checkpoints: str | None = Field(
        None,
        description="folder under $GRIDLEDGER_OUTPUT_DIR where the job writes checkpoints",
    )
    retry: RetrySpec = Field(default_factory=RetrySpec)
    placement: Placement = Field(default_factory=Placement)
    resume_from: str | None = Field(
        None, description="job id whose latest checkpoint this job starts from"
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description=f"at most {MAX_LABELS} labels for grouping usage, e.g. "
        "{project: llm, cost-centre: cc-42}; keys "
        f"{LABEL_KEY_RULE}; values {LABEL_VALUE_RULE}",
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="environment variables set from the tenant's secrets at dispatch, "
        "{ENV_NAME: secret-name} (a list of names: each variable named as its secret); the "
        "spec, the ledger and the views hold the names only",
    )

    @field_validator("image")
    @classmethod
    def _image_ref(cls, value: str) -> str:
        if not _IMAGE_RE.match(value):
            raise ValueError(
                "must be an image reference such as 'gridledger/python:latest' "
                "(lower case, no spaces)"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            _check_env_name(key)
        return value

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets_as_map(cls, value: Any) -> Any:
        """``[name, ...]`` is ``{name: name, ...}``: each secret in the variable of its name."""
        if isinstance(value, list | tuple):
            return {str(name): name for name in value}
        return value

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if len(value) > MAX_SECRETS:
            raise ValueError(f"names {len(value)} secrets; a job may use at most {MAX_SECRETS}")
        for variable, name in value.items():
            if variable == name and not _ENV_NAME_RE.match(name):
                raise ValueError(
                    f"{name!r} is not a variable name: map it to one, e.g. {{'HF_TOKEN': {name!r}}}"
                )
            _check_env_name(variable)
            if not SECRET_NAME_RE.match(name):
                raise ValueError(f"{variable}: {name!r} is not a secret name ({SECRET_NAME_RULE})")
        both = sorted(set(value) & set(info.data.get("env") or {}))
        if both:
            raise ValueError(
                f"{', '.join(both)} also set in env; give each variable once "
                "(a secret's value belongs in `secrets`, never in `env`)"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_LABELS:
            raise ValueError(f"has {len(value)} labels; at most {MAX_LABELS} are allowed")
        for key, label in value.items():
            if not LABEL_KEY_RE.match(key):
                raise ValueError(f"key {key[:80]!r} is not a label key: {LABEL_KEY_RULE}")
            if not LABEL_VALUE_RE.match(label):
                raise ValueError(
                    f"value {label[:80]!r} of {key!r} is not a label value: {LABEL_VALUE_RULE}"
                )
        return value

    @field_validator("checkpoints")
    @classmethod
    def _checkpoint_dir(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value.split("/")):
            raise ValueError("must be a folder relative to $GRIDLEDGER_OUTPUT_DIR, e.g. 'ckpt'")
        return value

    @field_validator("command")
    @classmethod
    def _command_size(cls, value: list[str]) -> list[str]:
        size = sum(len(part.encode()) for part in value)
        if size > MAX_COMMAND_BYTES:
            raise ValueError(
                f"is {size} bytes; the limit is {MAX_COMMAND_BYTES}. "
                "Put long inputs in a file inside the image instead"
            )
        return value


def _check_env_name(key: str) -> None:
    """Refuse what cannot be an environment variable's name, or one gridledger sets."""
    if not _ENV_NAME_RE.match(key):
        raise ValueError(f"{key!r} is not a valid environment variable name")
    if key.startswith("GRIDLEDGER_"):
        raise ValueError(f"{key!r}: names starting with GRIDLEDGER_ are set by gridledger")
