"""A filled-in instance of every event and view, every optional field set, for codec tests."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from schemas.events import EVENT_TYPES, Event
from schemas.spec import JobSpec, Limits, ModelSpec, OutputSpec, Resources, RetrySpec
from schemas.views import VIEW_TYPES

T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)

SPEC = JobSpec(
    name="train-llama",
    image="gridledger/python:latest",
    command=["python3", "-c", "print('hi')"],
    env={"BATCH": "8"},
    model=ModelSpec(params_billion=7, dtype="bf16", mode="training"),
    outputs=[OutputSpec(path="model.pt"), OutputSpec(path="metrics.json", required=False)],
    checkpoints="ckpt",
    labels={"team": "vision"},
)
SPEC_PARTS: dict[Any, BaseModel] = {
    JobSpec: SPEC,
    Resources: Resources(gpus=2, gpu_models=["A100-80GB"], min_vram_gb=40.0),
    Limits: Limits(max_runtime_s=120, queue_timeout_s=60),
    RetrySpec: RetrySpec(max_attempts=2, retry_user_errors=True),
}
"""The spec and its parts as the events and views carry them (valid ones: their rules)."""


def _value(tp: Any, name: str, depth: int) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)), name, depth)
    if origin is Literal:
        return args[-1]
    if origin is list:
        return [_value(args[0], name, depth), _value(args[0], name, depth)]
    if origin is dict:
        return {"k1": _value(args[1], name, depth), "k2": _value(args[1], name, depth)}
    if tp is str:
        return f"{name}-value ünïcode"
    if tp is bool:
        return True
    if tp is int:
        return 7
    if tp is float:
        return 2.5
    if tp is datetime:
        return T0 + timedelta(seconds=depth + 1)
    if tp in SPEC_PARTS:
        return SPEC_PARTS[tp]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return sample(tp, depth + 1)
    raise TypeError(f"no sample for {tp!r}")


def sample(model: type[BaseModel], depth: int = 0) -> Any:
    """An instance of ``model`` with every field (optional ones included) set."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in ("type", "schema_version"):
            continue
        values[name] = _value(info.annotation, name, depth)
    if issubclass(model, Event):
        values.update(event_id=f"evt-{model.__name__}", job_id="job-1", attempt=1, occurred_at=T0)
    return model.model_validate(values)


def all_samples() -> list[BaseModel]:
    return [sample(cls) for cls in [*EVENT_TYPES.values(), *VIEW_TYPES.values()]]
