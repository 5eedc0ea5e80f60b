"""Job spec validation names the field and says how to fix it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.spec import JobSpec


def errors(payload):
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(payload)
    return {".".join(str(p) for p in e["loc"]): e["msg"] for e in info.value.errors()}


def test_minimal_spec_gets_defaults():
    spec = JobSpec.model_validate({"image": "gridledger/busybox:latest", "command": ["true"]})
    assert spec.resources.gpus == 1
    assert spec.retry.max_attempts == 3
    assert spec.limits.queue_timeout_s == 600


@pytest.mark.parametrize(
    "payload, field, words",
    [
        ({"command": ["true"]}, "image", "Field required"),
        ({"image": "x", "resources": {"gpus": -1}}, "resources.gpus", "greater than or equal to 0"),
        ({"image": "x", "colour": "blue"}, "colour", "Extra inputs are not permitted"),
        ({"image": "Bad Image"}, "image", "image reference"),
        ({"image": "x", "command": "python train.py"}, "command", "valid list"),
        ({"image": "x", "command": ["a" * 70_000]}, "command", "the limit is"),
        ({"image": "x", "outputs": [{"path": "/etc/passwd"}]}, "outputs.0.path", "relative"),
        ({"image": "x", "env": {"GRIDLEDGER_JOB_ID": "x"}}, "env", "set by gridledger"),
        ({"image": "x", "model": {"params_billion": "many"}}, "model.params_billion", "number"),
    ],
)
def test_invalid_specs_name_the_field(payload, field, words):
    problems = errors(payload)
    assert field in problems, problems
    assert words in problems[field]
