"""Pre-flight fit: the VRAM estimate and the explanation with its numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projections.fit import NodeCapacity, check_fit, estimate_vram_gb, gpu_model_matches, rejected
from schemas.events import JobSubmitted
from schemas.types import GpuDevice
from tests.projections.histories import T0, fleet, job_spec


def model_spec(params: float, dtype: str = "fp16", mode: str = "inference", gpus: int = 1):
    return job_spec(
        model={"params_billion": params, "dtype": dtype, "mode": mode},
        resources={"gpus": gpus},
    )


@pytest.mark.parametrize(
    ("params", "dtype", "mode", "gpus", "expected"),
    [
        (16, "fp16", "inference", 1, 38.4),
        (7, "bf16", "training", 1, 56.0),
        (7, "bf16", "training", 2, 28.0),
        (70, "int4", "inference", 1, 42.0),
        (8, "int8", "inference", 1, 9.6),
        (1, "fp32", "training", 1, 16.0),
    ],
)
def test_estimate(params: float, dtype: str, mode: str, gpus: int, expected: float) -> None:
    assert estimate_vram_gb(model_spec(params, dtype, mode, gpus)) == pytest.approx(expected)


def test_explicit_requirement_wins_and_is_split_across_gpus() -> None:
    spec = job_spec(model={"params_billion": 70}, resources={"gpus": 2, "min_vram_gb": 30})
    assert estimate_vram_gb(spec) == 15.0
    assert estimate_vram_gb(job_spec()) == 0.0


def test_does_not_fit_explains_with_numbers_and_suggests_more_gpus() -> None:
    report = check_fit(model_spec(16), fleet(("a", "A10G", 4, 24), ("b", "A10G", 1, 24)))
    assert not report.fits
    assert report.explanation == (
        "job needs ~38.4 GiB of GPU memory per GPU (16B params x 2 bytes fp16 x 1.2 "
        "inference); the largest GPU in the fleet is A10G with 24 GiB — request 2 GPUs or a "
        "smaller model"
    )
    assert (report.required_vram_gb, report.largest_gpu_vram_gb, report.largest_gpu_model) == (
        38.4,
        24.0,
        "A10G",
    )
    assert report.max_gpus_per_node == 4 and report.gpus_requested == 1


@pytest.mark.parametrize(
    ("dtype", "advice"),
    [
        ("fp32", "use a lower precision (int8/int4) or a smaller model"),
        ("fp16", "use a lower precision (int8/int4) or a smaller model"),
        ("bf16", "use a lower precision (int8/int4) or a smaller model"),
        ("int8", "use a smaller model"),
        ("int4", "use a smaller model"),
    ],
)
def test_no_node_with_enough_gpus_suggests_precision_or_smaller_model(
    dtype: str, advice: str
) -> None:
    report = check_fit(model_spec(300, dtype, "training"), fleet(("a", "A10G", 2, 24)))
    assert not report.fits
    assert report.explanation.endswith(f"no node has enough GPUs for it; {advice}")


def test_more_gpus_are_suggested_for_small_gpus_too() -> None:
    # Half-GiB GPUs: 3 GiB fits on 6 of them, however small each share gets on the way.
    spec = job_spec(resources={"gpus": 1, "min_vram_gb": 3})
    gpus = [GpuDevice(index=i, model="A10G", memory_total_mb=512) for i in range(8)]
    report = check_fit(spec, [NodeCapacity(node_id="a", gpus=gpus)])
    assert not report.fits
    assert report.explanation.endswith("request 6 GPUs or a smaller model")


def test_fits_reports_the_numbers_too() -> None:
    report = check_fit(model_spec(7), fleet(("a", "A10G", 1, 24), ("b", "A100-80GB", 8, 80)))
    assert report.fits
    assert report.explanation.startswith("job needs ~16.8 GiB of GPU memory per GPU (7B params")
    assert "2 of 2 node(s) can hold it" in report.explanation


def test_multi_gpu_basis_shows_the_split() -> None:
    report = check_fit(model_spec(70, gpus=4), fleet(("b", "A100-80GB", 8, 80)))
    assert report.fits and report.required_vram_gb == 42.0
    assert report.estimate_basis == "70B params x 2 bytes fp16 x 1.2 inference / 4 GPUs"


def test_too_many_gpus_for_any_node() -> None:
    report = check_fit(model_spec(7, gpus=16), fleet(("b", "A100-80GB", 8, 80)))
    assert not report.fits
    assert "the most any node has is 8" in report.explanation


def test_gpu_model_filter_applies() -> None:
    spec = job_spec(resources={"gpus": 1, "gpu_models": ["H100"]})
    report = check_fit(spec, fleet(("a", "A10G", 1, 24)))
    assert not report.fits
    assert "resources.gpu_models (H100)" in report.explanation and "A10G" in report.explanation


def test_an_empty_fleet_proves_nothing() -> None:
    report = check_fit(model_spec(16), [])
    assert report.fits and "not checked" in report.explanation


@pytest.mark.parametrize(
    ("wanted", "model", "ok"),
    [
        ("A100-80GB", "NVIDIA A100-SXM4-80GB", True),
        ("a100", "NVIDIA A100-PCIE-40GB", True),
        ("A10", "NVIDIA A10G", False),
        ("H100", "NVIDIA H100 80GB HBM3", True),
        ("A100-80GB", "NVIDIA A100-PCIE-40GB", False),
        # The device's own name, as `gridledger nodes` shows it, is the model it is.
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", True),
    ],
)
def test_gpu_model_matching(wanted: str, model: str, ok: bool) -> None:
    assert gpu_model_matches(wanted, model) is ok


def test_the_need_placement_uses_is_the_need_the_report_shows() -> None:
    # 10 GiB over 3 GPUs: both say 3.33 GiB per GPU, so a node the report counts is one
    # placement takes.
    spec = job_spec(resources={"gpus": 3, "min_vram_gb": 10})
    report = check_fit(spec, fleet(("a", "A10G", 3, 24)))
    assert report.fits and report.required_vram_gb == 3.33
    assert estimate_vram_gb(spec) == report.required_vram_gb


def test_the_advice_never_asks_for_more_gpus_than_a_spec_may_request() -> None:
    # 170 GiB fits 17 GPUs of 10 GiB on the one node, but a spec may ask for 16 at most.
    with pytest.raises(ValidationError, match="16"):
        job_spec(resources={"gpus": 17})
    spec = job_spec(resources={"gpus": 1, "min_vram_gb": 170})
    report = check_fit(spec, fleet(("a", "A10G", 17, 10)))
    assert not report.fits
    assert report.explanation.endswith("no node has enough GPUs for it; use a smaller model")


def test_a_rejection_quoting_the_tenant_s_models_keeps_its_advice_whole() -> None:
    # The tenant's own text (dashes in a gpu_models item) cannot cut the message elsewhere.
    spec = job_spec(resources={"gpus": 1, "gpu_models": ["H100 — the big one"]})
    report = check_fit(spec, fleet(("a", "A10G", 1, 24)))
    cause = JobSubmitted(job_id="j", occurred_at=T0, tenant="t", spec=spec)
    event = rejected(cause, report, by="scheduler", producer="scheduler", now=T0)
    assert event.advice == "Accept one of those models."
    assert "(H100 — the big one); the fleet has A10G" in event.summary


def test_a_rejection_without_a_suggestion_says_what_to_change_anyway() -> None:
    spec = job_spec(resources={"gpus": 8})
    report = check_fit(spec, fleet(("a", "A10G", 4, 24)))
    cause = JobSubmitted(job_id="j", occurred_at=T0, tenant="t", spec=spec)
    event = rejected(cause, report, by="scheduler", producer="scheduler", now=T0)
    assert event.summary.endswith("the most any node has is 4 suitable GPU(s) of one model.")
    assert event.advice == "Request at most 4 GPUs or a smaller model."
    # A report whose explanation names no change keeps its numbers and gets the generic advice.
    bare = report.model_copy(update={"explanation": "no node has 8 GPUs"})
    event = rejected(cause, bare, by="scheduler", producer="scheduler", now=T0)
    assert event.summary == "The job can never run on this fleet: no node has 8 GPUs."
    assert event.advice == "Request fewer or smaller GPUs."


def test_the_report_s_numbers_count_only_the_models_the_job_accepts() -> None:
    # What `explain` shows of a fit: the largest acceptable GPU (to the hundredth of a GiB:
    # an A10G's 23,028 MiB is 22.49 GiB) and the most acceptable GPUs of one model a node has.
    a10g = [GpuDevice(index=i, model="NVIDIA A10G", memory_total_mb=23028) for i in range(4)]
    h100 = [
        GpuDevice(index=i, model="NVIDIA H100 80GB HBM3", memory_total_mb=81559) for i in (0, 1)
    ]
    nodes = [NodeCapacity(node_id="a", gpus=a10g), NodeCapacity(node_id="h", gpus=h100)]
    any_model = check_fit(job_spec(resources={"gpus": 3}), nodes)
    assert (any_model.largest_gpu_vram_gb, any_model.max_gpus_per_node) == (79.65, 4)
    only_a10g = check_fit(job_spec(resources={"gpus": 1, "gpu_models": ["A10G"]}), nodes)
    assert (only_a10g.largest_gpu_vram_gb, only_a10g.max_gpus_per_node) == (22.49, 4)
    only_h100 = check_fit(job_spec(resources={"gpus": 3, "gpu_models": ["H100"]}), nodes)
    assert not only_h100.fits and only_h100.max_gpus_per_node == 2
    none = check_fit(job_spec(resources={"gpus": 1, "gpu_models": ["B200"]}), nodes)
    assert not none.fits
    assert (none.largest_gpu_vram_gb, none.largest_gpu_model, none.max_gpus_per_node) == (
        0.0,
        "",
        0,
    )


def test_a_two_gpu_basis_shows_the_split() -> None:
    report = check_fit(
        job_spec(resources={"gpus": 2, "min_vram_gb": 30}), fleet(("a", "A10G", 2, 24))
    )
    assert report.fits and report.estimate_basis == "resources.min_vram_gb = 30 GiB / 2 GPUs"


def test_the_explanations_name_the_models_asked_for_and_the_ones_there() -> None:
    spec = job_spec(resources={"gpus": 1, "gpu_models": ["H100", "B200"]})
    report = check_fit(spec, fleet(("a", "A10G", 1, 24), ("b", "L4", 1, 24)))
    assert report.explanation == (
        "no GPU in the fleet is one of resources.gpu_models (H100, B200); "
        "the fleet has A10G, L4 — accept one of those models"
    )
    assert report.estimate_basis == "no model or min_vram_gb declared: no GPU memory requirement"
    cpu_only = check_fit(spec, [NodeCapacity(node_id="c")])
    assert cpu_only.explanation.endswith("the fleet has no GPUs — accept one of those models")


def test_a_need_equal_to_the_largest_gpu_fits_it_so_the_count_is_what_is_short() -> None:
    # 24 GiB per GPU on 24 GiB GPUs fits each GPU; what no node has is two of them.
    spec = job_spec(resources={"gpus": 2, "min_vram_gb": 48})
    report = check_fit(spec, fleet(("a", "A10G", 1, 24), ("b", "A10G", 1, 24)))
    assert not report.fits
    assert "the most any node has is 1 suitable GPU(s) of one model" in report.explanation
    assert "request at most 1 GPUs" in report.explanation
