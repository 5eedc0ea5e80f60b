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


def test_labels_are_kept_within_their_bounds():
    spec = JobSpec.model_validate(
        {"image": "x", "labels": {"project": "llm", "cost-centre": "CC_42.a", "empty": ""}}
    )
    assert spec.labels == {"project": "llm", "cost-centre": "CC_42.a", "empty": ""}
    longest = {"k" * 63: "V" * 63}
    assert JobSpec.model_validate({"image": "x", "labels": longest}).labels == longest
    assert JobSpec.model_validate({"image": "x", "labels": {f"k{i}": "" for i in range(16)}})


@pytest.mark.parametrize(
    "labels, words",
    [
        ({"Project": "x"}, "is not a label key: 1-63 characters of a-z"),
        ({"k" * 64: "x"}, "is not a label key"),
        ({"": "x"}, "is not a label key"),
        ({"-team": "x"}, "is not a label key"),
        ({"team": "a b"}, "is not a label value: 0-63 characters"),
        ({"team": "v" * 64}, "is not a label value"),
        ({"team": "x-"}, "is not a label value"),
        ({"team": "\x1b[31m"}, "is not a label value"),
        ({f"k{i}": "" for i in range(17)}, "has 17 labels; at most 16 are allowed"),
    ],
)
def test_bad_labels_say_the_rule(labels, words):
    assert words in errors({"image": "x", "labels": labels})["labels"]
