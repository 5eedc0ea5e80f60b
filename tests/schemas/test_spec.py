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


CONTROLS = ["\x00", "\x07", "\x1b", "\r", "\x7f", "\x85", "\x9b", "\ud800"]


@pytest.mark.parametrize("char", CONTROLS)
@pytest.mark.parametrize(
    "payload, field",
    [
        (lambda c: {"image": "x", "name": f"a{c}"}, "name"),
        (lambda c: {"image": f"x{c}"}, "image"),
        (lambda c: {"image": "x", "command": ["sh", f"-c{c}"]}, "command.1"),
        (lambda c: {"image": "x", "env": {"A": f"v{c}"}}, "env.A"),
        (lambda c: {"image": "x", "outputs": [{"path": f"o{c}"}]}, "outputs.0.path"),
        (lambda c: {"image": "x", "checkpoints": f"c{c}"}, "checkpoints"),
        (lambda c: {"image": "x", "resume_from": f"job-{c}"}, "resume_from"),
        (lambda c: {"image": "x", "placement": {"regions": [c]}}, "placement.regions.0"),
        (lambda c: {"image": "x", "resources": {"gpu_models": [c]}}, "resources.gpu_models.0"),
    ],
)
def test_no_string_field_takes_a_control_character(payload, field, char):
    problems = errors(payload(char))
    assert any(f == field or f.startswith(field) for f in problems), problems


def test_tab_and_newline_are_allowed_only_in_command_arguments_and_env_values():
    spec = JobSpec.model_validate(
        {"image": "x", "command": ["sh", "-c", "a\n\tb"], "env": {"S": "1\n2\t3"}}
    )
    assert spec.command[2] == "a\n\tb" and spec.env["S"] == "1\n2\t3"
    assert "name" in errors({"image": "x", "name": "a\tb"})
    assert "env.A" in errors({"image": "x", "env": {"A": "a\rb"}})


@pytest.mark.parametrize(
    "resources, field",
    [
        ({"min_vram_gb": float("inf")}, "resources.min_vram_gb"),
        ({"min_vram_gb": float("nan")}, "resources.min_vram_gb"),
        ({"min_vram_gb": 1e9}, "resources.min_vram_gb"),
        ({"memory_gb": 1e-10}, "resources.memory_gb"),
        ({"memory_gb": float("inf")}, "resources.memory_gb"),
        ({"cpus": 1e-10}, "resources.cpus"),
        ({"cpus": float("nan")}, "resources.cpus"),
    ],
)
def test_numbers_are_finite_and_above_the_floors_docker_would_round_away(resources, field):
    assert field in errors({"image": "x", "resources": resources})


def test_the_floors_still_hold_a_real_limit_at_docker():
    from schemas.spec import MIN_CPUS, MIN_MEMORY_GB

    spec = JobSpec.model_validate(
        {"image": "x", "resources": {"memory_gb": MIN_MEMORY_GB, "cpus": MIN_CPUS}}
    )
    assert int(spec.resources.memory_gb * 1024**3) >= 6 * 1024**2  # Docker's minimum
    assert int(spec.resources.cpus * 1e9) >= 1  # 0 nano-CPUs would be no limit


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "nvidia_visible_devices",
        "CUDA_VISIBLE_DEVICES",
        "GRIDLEDGER_OUTPUT_DIR",
        "Gridledger_x",
    ],
)
def test_reserved_environment_names_are_refused_in_env_and_secrets(name):
    assert "reserved" in errors({"image": "x", "env": {name: "all"}})["env"]
    assert "reserved" in errors({"image": "x", "secrets": {name: "tok"}})["secrets"]


def test_names_near_the_reserved_ones_are_fine():
    spec = JobSpec.model_validate({"image": "x", "env": {"CUDA_HOME": "/c", "NVIDIAX": "1"}})
    assert set(spec.env) == {"CUDA_HOME", "NVIDIAX"}


def test_a_regex_dollar_lets_no_trailing_newline_through():
    assert "labels" in errors({"image": "x", "labels": {"team": "a\n"}})
    assert "secrets" in errors({"image": "x", "secrets": {"A": "tok\n"}})


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"command": ["x"] * 1025}, "command"),
        ({"env": {f"V{i}": "" for i in range(257)}}, "env"),
        ({"env": {"V": "x" * 32_769}}, "env.V"),
        ({"env": {f"V{i}": "x" * 30_000 for i in range(3)}}, "env"),
        (
            {"env": {"V" * 129: ""}},
            "env." + "V" * 129 + ".[key]",
        ),
        ({"outputs": [{"path": f"o{i}"} for i in range(65)]}, "outputs"),
        ({"outputs": [{"path": "o" * 513}]}, "outputs.0.path"),
        ({"placement": {"avoid_nodes": ["n"] * 33}}, "placement.avoid_nodes"),
        ({"placement": {"providers": ["p" * 129]}}, "placement.providers.0"),
        ({"resume_from": "job-" + "0" * 61}, "resume_from"),
    ],
)
def test_lists_maps_and_values_are_bounded(payload, field):
    problems = errors({"image": "x", **payload})
    assert field in problems, problems


def test_the_encoded_size_counts_escapes():
    from schemas.spec import encoded_size

    spec = JobSpec.model_validate({"image": "x", "command": ["\n" * 60_000]})
    assert encoded_size(spec) > 120_000  # each newline is two bytes once encoded
