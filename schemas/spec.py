"""The job spec a user submits, with validation that names the field and the fix.

Every value a tenant sends is hostile until checked, so every field has a bound and
every string a character rule (the README's "Job spec limits" lists them):

- **strings** hold no control characters (C0, DEL, C1) and no lone surrogates: a
  NUL cannot be stored as text, and escape sequences in a name or a path would
  rewrite the terminal that shows them. Command arguments and env values
  (:data:`Text`) may hold tab and newline, which scripts (``sh -c``, ``python -c``)
  and multi-line values need; every other string (:data:`Line`) is one line
  without tabs;
- **numbers** are finite (no Infinity, no NaN) and in range, with floors for
  ``memory_gb`` and ``cpus`` so that a limit never rounds to Docker's "no limit";
- **lists and maps** have a bounded count and their items a bounded size
  (:data:`LIMITS`); the encoded spec has a bound of its own (:func:`encoded_size`,
  which the API checks against the ``api_max_spec_bytes`` setting);
- **environment names** the platform sets (:data:`RESERVED_ENV`) are refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

Dtype = Literal["fp32", "fp16", "bf16", "int8", "int4"]
ModelMode = Literal["inference", "training"]

# --------------------------------------------------------------------------- the bounds

LIMITS: dict[str, int] = {
    "name_chars": 200,
    "image_chars": 512,
    "command_items": 1024,
    "command_bytes": 64 * 1024,
    "env_items": 256,
    "env_name_chars": 128,
    "env_value_chars": 32 * 1024,
    "env_bytes": 64 * 1024,
    "outputs_items": 64,
    "path_chars": 512,
    "list_items": 32,
    "list_item_chars": 128,
    "job_id_chars": 64,
}
"""How far a spec may go: items of a list or map, characters of a string, UTF-8 bytes
of a whole list or map. The JSON Schema of the spec states the same numbers."""

MAX_COMMAND_BYTES = LIMITS["command_bytes"]
"""A command line longer than this is almost certainly data pasted by mistake."""

MIN_MEMORY_GB = 0.01
"""About 10 MiB: Docker refuses less than 6 MiB, and a limit of 0 means "no limit"."""
MIN_CPUS = 0.01
"""Docker's smallest CPU quota; less rounds to 0 nano-CPUs, which means "no limit"."""
MAX_VRAM_GB = 4096.0
"""Far above any GPU's memory: a larger per-GPU need is a typo."""

RESERVED_ENV: tuple[tuple[str, bool, str], ...] = (
    ("GRIDLEDGER_", True, "names starting with GRIDLEDGER_ are set by gridledger"),
    ("NVIDIA_", True, "names starting with NVIDIA_ are set by the GPU runtime"),
    ("CUDA_VISIBLE_DEVICES", False, "CUDA_VISIBLE_DEVICES is set from the job's GPUs"),
)
"""Environment names a job may not set: (name or prefix, is a prefix, why). Matched
case-insensitively, so no spelling of them reaches the container."""

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)
_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
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


def _any_case(text: str) -> str:
    """``text`` as a case-insensitive ECMA regex (JSON Schema has no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in text)


RESERVED_ENV_PATTERN = (
    "^("
    + "|".join(_any_case(name) + ("" if prefix else "$") for name, prefix, _ in RESERVED_ENV)
    + ")"
)
"""The reserved names as one JSON Schema pattern (the OpenAPI document's ``not``)."""


def reserved_env(name: str) -> str | None:
    """Why a job may not set the environment variable ``name``, or None."""
    upper = name.upper()
    for reserved, prefix, why in RESERVED_ENV:
        if upper.startswith(reserved) if prefix else upper == reserved:
            return why
    return None


# --------------------------------------------------------------------------- characters

LINE_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
"""A :data:`Line` as JSON Schema states it: no control character."""
TEXT_PATTERN = r"^[^\x00-\x08\x0b-\x1f\x7f-\x9f]*$"
"""A :data:`Text`: no control character but tab and newline."""
_LINE_BAD = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_TEXT_BAD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def character_problem(value: str, *, multiline: bool = False) -> str | None:
    """Why ``value`` may not be stored (its first bad character, and where), or None."""
    found = (_TEXT_BAD if multiline else _LINE_BAD).search(value)
    if found is None:
        return None
    code = ord(found.group())
    what = "a lone surrogate" if 0xD800 <= code <= 0xDFFF else "the control character"
    allowed = "only tab and newline are allowed" if multiline else "none is allowed"
    return f"contains {what} U+{code:04X} at position {found.start()}; {allowed}"


def _line(value: str) -> str:
    problem = character_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _text(value: str) -> str:
    problem = character_problem(value, multiline=True)
    if problem:
        raise ValueError(problem)
    return value


_AS_LINE = (AfterValidator(_line), Field(json_schema_extra={"pattern": LINE_PATTERN}))
_AS_TEXT = (AfterValidator(_text), Field(json_schema_extra={"pattern": TEXT_PATTERN}))

Line = Annotated[str, _AS_LINE[0], _AS_LINE[1]]
"""A one-line string: no control character (a length comes with each field)."""
Name = Annotated[
    str, StringConstraints(max_length=LIMITS["list_item_chars"]), _AS_LINE[0], _AS_LINE[1]
]
"""An item of a placement or GPU-model list, a cancel reason's words, a job id."""
PathText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=LIMITS["path_chars"]),
    _AS_LINE[0],
    _AS_LINE[1],
]
Argument = Annotated[str, _AS_TEXT[0], _AS_TEXT[1]]
"""A command argument: tab and newline allowed (scripts), other controls not."""
EnvName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=LIMITS["env_name_chars"]),
    AfterValidator(_line),
]
EnvValue = Annotated[
    str, StringConstraints(max_length=LIMITS["env_value_chars"]), _AS_TEXT[0], _AS_TEXT[1]
]


def _utf8(values: Any) -> int:
    return sum(len(str(v).encode("utf-8", "surrogatepass")) for v in values)


def _bounded_bytes(what: str, size: int, limit: int, instead: str) -> None:
    if size > limit:
        raise ValueError(f"{what} is {size} bytes; the limit is {limit}. {instead}")


def _env_schema(schema: dict[str, Any]) -> None:
    """The env map's schema: names by pattern and never reserved, values as :data:`EnvValue`."""
    values = next(iter(schema.pop("patternProperties", {}).values()), None)
    values = values or schema.get("additionalProperties") or {"type": "string"}
    schema["additionalProperties"] = values
    schema["propertyNames"] = {
        "pattern": ENV_NAME_PATTERN,
        "maxLength": LIMITS["env_name_chars"],
        "not": {"pattern": RESERVED_ENV_PATTERN},
    }


# --------------------------------------------------------------------------- the spec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Resources(_Strict):
    """What one attempt needs from a node."""

    gpus: int = Field(1, ge=0, le=16, description="number of GPUs on one node")
    gpu_models: list[Name] = Field(
        default_factory=list,
        max_length=LIMITS["list_items"],
        description="acceptable GPU models, e.g. ['A100-80GB']; empty = any",
    )
    min_vram_gb: float | None = Field(
        None,
        gt=0,
        le=MAX_VRAM_GB,
        description="GPU memory needed per job in GiB; overrides the model estimate",
    )
    memory_gb: float = Field(
        4.0, ge=MIN_MEMORY_GB, le=2048, description="host memory limit of the container"
    )
    cpus: float = Field(1.0, ge=MIN_CPUS, le=256)


class ModelSpec(_Strict):
    """The model the job loads, used to estimate GPU memory before placement."""

    params_billion: float = Field(..., gt=0, le=10_000)
    dtype: Dtype = "fp16"
    mode: ModelMode = "inference"


class Limits(_Strict):
    """The job's time bounds: they make every job end, however it goes."""

    max_runtime_s: int = Field(3600, ge=1, le=30 * 24 * 3600)
    queue_timeout_s: int = Field(600, ge=1, le=7 * 24 * 3600)


def _relative(value: str | None, what: str) -> str | None:
    if value is not None and (value.startswith("/") or ".." in value.split("/")):
        raise ValueError(
            f"must be a {what} relative to $GRIDLEDGER_OUTPUT_DIR without '..', e.g. "
            + ("'model.pt'" if what == "path" else "'ckpt'")
        )
    return value


class OutputSpec(_Strict):
    """A file or folder the job must leave under ``$GRIDLEDGER_OUTPUT_DIR``."""

    path: PathText
    required: bool = True

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return _relative(value, "path") or value


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

    providers: list[Name] = Field(
        default_factory=list, max_length=LIMITS["list_items"], description="preferred, in order"
    )
    regions: list[Name] = Field(
        default_factory=list, max_length=LIMITS["list_items"], description="preferred, in order"
    )
    avoid_nodes: list[Name] = Field(default_factory=list, max_length=LIMITS["list_items"])


class JobSpec(_Strict):
    """A job as submitted: what to run, on what, and what it leaves behind."""

    name: Line = Field("", max_length=LIMITS["name_chars"])
    image: Line = Field(..., min_length=1, max_length=LIMITS["image_chars"])
    command: list[Argument] = Field(
        default_factory=list,
        max_length=LIMITS["command_items"],
        description=f"at most {MAX_COMMAND_BYTES} bytes in all; tab and newline allowed",
    )
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        max_length=LIMITS["env_items"],
        description=f"at most {LIMITS['env_bytes']} bytes in all (names and values); values "
        "may hold tab and newline; GRIDLEDGER_*, NVIDIA_* and CUDA_VISIBLE_DEVICES are reserved",
        json_schema_extra=_env_schema,
    )
    resources: Resources = Field(default_factory=Resources)
    model: ModelSpec | None = None
    limits: Limits = Field(default_factory=Limits)
    outputs: list[OutputSpec] = Field(default_factory=list, max_length=LIMITS["outputs_items"])
    checkpoints: PathText | None = Field(
        None,
        description="folder under $GRIDLEDGER_OUTPUT_DIR where the job writes checkpoints",
    )
    retry: RetrySpec = Field(default_factory=RetrySpec)
    placement: Placement = Field(default_factory=Placement)
    resume_from: Line | None = Field(
        None,
        min_length=1,
        max_length=LIMITS["job_id_chars"],
        description="id of one of your jobs whose latest checkpoint this job starts from",
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
        _bounded_bytes(
            "the environment",
            _utf8(value) + _utf8(value.values()),
            LIMITS["env_bytes"],
            "Put large inputs in a file inside the image instead",
        )
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
            if variable == name and not _ENV_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a variable name: map it to one, e.g. {{'HF_TOKEN': {name!r}}}"
                )
            _check_env_name(variable)
            if not SECRET_NAME_RE.fullmatch(name):
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
            if not LABEL_KEY_RE.fullmatch(key):
                raise ValueError(f"key {key[:80]!r} is not a label key: {LABEL_KEY_RULE}")
            if not LABEL_VALUE_RE.fullmatch(label):
                raise ValueError(
                    f"value {label[:80]!r} of {key!r} is not a label value: {LABEL_VALUE_RULE}"
                )
        return value

    @field_validator("checkpoints")
    @classmethod
    def _checkpoint_dir(cls, value: str | None) -> str | None:
        return _relative(value, "folder")

    @field_validator("command")
    @classmethod
    def _command_size(cls, value: list[str]) -> list[str]:
        _bounded_bytes(
            "the command",
            _utf8(value),
            MAX_COMMAND_BYTES,
            "Put long inputs in a file inside the image instead",
        )
        return value


def _check_env_name(key: str) -> None:
    """Refuse what cannot be an environment variable's name, or one the platform sets."""
    if not _ENV_NAME_RE.fullmatch(key):
        raise ValueError(f"{key!r} is not a valid environment variable name")
    why = reserved_env(key)
    if why:
        raise ValueError(f"{key!r} is reserved: {why}")


def encoded_size(spec: JobSpec) -> int:
    """The spec's size as the ledger and the views carry it (compact JSON, UTF-8 bytes)."""
    data = spec.model_dump(mode="json")
    return len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())


def canonical(spec: JobSpec) -> bytes:
    """The spec's canonical encoding: compact JSON with sorted keys, UTF-8, of the fields
    that differ from their defaults, so a field added later with a default (the compatible
    change, docs/wire-format.md) leaves an older spec's encoding as it was."""
    data = spec.model_dump(mode="json", exclude_defaults=True)
    return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def spec_digest(spec: JobSpec) -> str:
    """``sha256:`` and the hex SHA-256 of :func:`canonical`: the one fingerprint of a spec,
    equal for equal specs. AttemptScheduled and the views carry it instead of the spec
    (only JobSubmitted carries the whole spec); the API's ``Idempotency-Key`` compares it."""
    return "sha256:" + hashlib.sha256(canonical(spec)).hexdigest()


def carried(spec: JobSpec, digest: str = "") -> dict[str, Any]:
    """What an AttemptScheduled and a JobView carry of a job's spec instead of the whole of
    it (which only JobSubmitted carries): its digest, image, resources and limits, the
    fields of the same names. ``digest``: the one JobSubmitted recorded (computed here
    when it is "", a record written before JobSubmitted had it)."""
    return {
        "spec_digest": digest or spec_digest(spec),
        "image": spec.image,
        "resources": spec.resources,
        "limits": spec.limits,
    }
