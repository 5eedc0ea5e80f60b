"""Retry decisions: budgets, backoff, placement hints, resume point, final reasons."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from projections.failures import Classification
from projections.job_state import submitted_fields
from projections.retry import DEFAULT_POLICY, RetryPolicy, decide, latest_checkpoint
from schemas.types import CheckpointRef, Evidence
from schemas.views import AttemptView, JobView
from tests.projections.histories import T0, job_spec


def view(*failed: tuple[str, str], **spec: object) -> JobView:
    """A job whose attempts 1..n ran on node-1..node-n (provider p1..pn) and failed as given."""
    attempts = [
        AttemptView(
            attempt=i, node_id=f"node-{i}", provider=f"p{i}", failure_class=cls, attribution=who
        )
        for i, (cls, who) in enumerate(failed, start=1)
    ]
    fields = submitted_fields(job_spec(**spec))
    return JobView(job_id="j", **fields, attempts=attempts, attempt=len(attempts))


def failure(
    cls: str, attempt: int = 1, who: str = "platform", retryable: bool = True
) -> Classification:
    return Classification(
        failure_class=cls,
        attribution=who,
        retryable=retryable,
        summary="s",
        advice="a",
        evidence=Evidence(rule_id="r"),
        rule_id="r",
        attempt=attempt,
        occurred_at=T0,
    )


def ckpt(name: str, minute: int, attempt: int = 1) -> CheckpointRef:
    return CheckpointRef(
        job_id="j",
        attempt=attempt,
        name=name,
        uri=f"file:///{name}",
        sha256="x",
        bytes=1,
        stored_at=T0 + timedelta(minutes=minute),
    )


def test_platform_failure_is_retried_with_backoff_and_hints() -> None:
    d = decide(view(("node_lost", "platform")), failure("node_lost"))
    assert d.action == "retry" and d.next_attempt == 2
    assert d.delay_s == 5.0 and d.not_before == T0 + timedelta(seconds=5)
    assert d.avoid_nodes == ["node-1"] and d.avoid_providers == ["p1"]
    assert d.policy_version == DEFAULT_POLICY.version


@pytest.mark.parametrize(("attempt", "delay"), [(1, 5.0), (2, 10.0), (3, 12.0), (4, 12.0)])
def test_exponential_backoff_is_capped(attempt: int, delay: float) -> None:
    failed = [("dispatch_timeout", "platform")] * attempt
    v = view(*failed, retry={"max_attempts": 10, "backoff_s": 5, "backoff_cap_s": 12})
    d = decide(v, failure("dispatch_timeout", attempt))
    assert d.action == "retry" and d.delay_s == delay


def test_budget_exhausted() -> None:
    v = view(*[("node_lost", "platform")] * 3)
    d = decide(v, failure("node_lost", 3))
    assert (d.action, d.terminal) == ("final", "JobFailed")
    assert d.reason == "retry budget exhausted (3 of 3 attempts)"


def test_job_budget_comes_from_the_spec() -> None:
    d = decide(view(("node_lost", "platform"), retry={"max_attempts": 1}), failure("node_lost"))
    assert d.reason == "retry budget exhausted (1 of 1 attempts)"


def test_user_errors_are_not_retried() -> None:
    d = decide(
        view(("user_process_error", "user")),
        failure("user_process_error", who="user", retryable=False),
    )
    assert (d.action, d.terminal) == ("final", "JobFailed")
    assert d.reason.startswith("not retryable: the job's own code failed")


def test_user_errors_are_retried_when_the_job_opts_in() -> None:
    v = view(("gpu_out_of_memory", "user"), retry={"retry_user_errors": True})
    d = decide(v, failure("gpu_out_of_memory", who="user", retryable=False))
    assert d.action == "retry" and d.avoid_nodes == []  # not the node's fault


def test_opting_in_does_not_retry_deterministic_errors() -> None:
    v = view(("missing_module", "user"), retry={"retry_user_errors": True})
    d = decide(v, failure("missing_module", who="user", retryable=False))
    assert d.action == "final" and "lacks a Python module" in d.reason


def test_unknown_is_retried_once() -> None:
    first = decide(view(("unknown", "platform")), failure("unknown"))
    assert first.action == "retry"
    second = decide(view(("unknown", "platform"), ("unknown", "platform")), failure("unknown", 2))
    assert (second.action, second.terminal) == ("final", "JobFailed")
    assert "retried 1 time(s) at most" in second.reason


def test_a_class_from_a_newer_classifier_is_retried_once_like_unknown() -> None:
    new = "a_class_from_a_newer_classifier"
    first = decide(view((new, "platform")), failure(new))
    assert (first.action, first.avoid_nodes, first.avoid_providers) == ("retry", ["node-1"], [])
    # the decision names the class it got, with the unknown row's reason to avoid the node
    assert f"{new} on node-1 of provider p1: " in first.avoid_reason
    assert first.avoid_reason.endswith(
        f"({new} on node-1 of provider p1: {DEFAULT_POLICY.row('unknown').avoid_why}); when "
        "nothing else can hold it, falls back to node node-1 (never to a node still silent)"
    )
    second = decide(view((new, "platform"), (new, "platform")), failure(new, 2))
    assert (second.action, second.terminal) == ("final", "JobFailed")
    assert f"{new} failures are retried 1 time(s) at most" in second.reason


def test_a_failure_of_an_attempt_the_view_does_not_hold_is_retried_avoiding_nothing() -> None:
    # The classification can come before the view holds its attempt: a retry, no node named.
    d = decide(view(), failure("node_lost"))
    assert (d.action, d.next_attempt, d.avoid_nodes, d.avoid_providers) == ("retry", 2, [], [])
    assert d.avoid_reason == "" and d.reason == "node_lost is retryable: attempt 2 of 3 after 5 s"


def test_every_decision_names_the_policy_version_it_was_made_under() -> None:
    policy = RetryPolicy(version="retry-policy-test")
    retried = decide(view(("node_lost", "platform")), failure("node_lost"), policy)
    final = decide(view(("missing_module", "user")), failure("missing_module", who="user"), policy)
    assert (retried.action, final.action) == ("retry", "final")
    assert retried.policy_version == final.policy_version == "retry-policy-test"


def test_class_limits_come_from_the_class_table() -> None:
    classes = dict(DEFAULT_POLICY.classes)
    classes["unknown"] = dataclasses.replace(classes["unknown"], limit=2)
    policy = RetryPolicy(classes=classes)
    d = decide(
        view(("unknown", "platform"), ("unknown", "platform")), failure("unknown", 2), policy
    )
    assert d.action == "retry"


def test_cancel_and_upload_failure_have_their_own_terminal_events() -> None:
    cancelled = decide(
        view(("cancelled", "user")), failure("cancelled", who="user", retryable=False)
    )
    assert cancelled.terminal == "JobCancelled"
    upload = decide(
        view(("output_upload_failed", "platform")), failure("output_upload_failed", retryable=False)
    )
    assert upload.terminal == "JobSucceededWithErrors"
    assert "not supported yet" in upload.reason


def test_capacity_is_final_and_says_it_was_not_the_job() -> None:
    d = decide(view(), failure("capacity_unavailable", 0, who="capacity", retryable=False))
    assert d.terminal == "JobFailed" and "queue deadline" in d.reason


def test_a_job_that_does_not_fit_is_not_retried_and_its_decision_ends_it_failed() -> None:
    d = decide(view(), failure("does_not_fit", 0, who="user", retryable=False))
    assert (d.action, d.terminal) == ("final", "JobFailed")
    assert d.reason == "not retryable: no node in the fleet can hold the job"


def test_a_cancelled_job_ends_cancelled_by_the_user_whatever_its_budget() -> None:
    d = decide(view(retry={"max_attempts": 5}), failure("cancelled", who="user", retryable=False))
    assert (d.action, d.terminal, d.reason) == ("final", "JobCancelled", "cancelled by the user")


def test_a_user_class_the_platform_caused_is_retried_and_the_user_s_own_is_not() -> None:
    on_platform = decide(view(("cuda_unavailable", "platform")), failure("cuda_unavailable"))
    on_user = decide(
        view(("cuda_unavailable", "user")), failure("cuda_unavailable", who="user", retryable=False)
    )
    assert (on_platform.action, on_user.action, on_user.terminal) == ("retry", "final", "JobFailed")
    assert on_user.reason == "not retryable: the job's image cannot use CUDA"


def test_resume_from_the_latest_checkpoint_of_any_attempt() -> None:
    v = view(("node_lost", "platform"), ("node_lost", "platform"), retry={"max_attempts": 5})
    v = v.model_copy(update={"checkpoints": [ckpt("a", 1), ckpt("c", 9, 2), ckpt("b", 5)]})
    d = decide(v, failure("node_lost", 2))
    assert d.resume_from is not None and d.resume_from.name == "c"
    assert d.avoid_nodes == ["node-2"]


def test_an_untimed_checkpoint_never_beats_a_timed_one_and_ties_go_to_the_later() -> None:
    v = view(("node_lost", "platform"), retry={"max_attempts": 5})
    untimed = ckpt("untimed", 0).model_copy(update={"stored_at": None})
    v = v.model_copy(update={"checkpoints": [ckpt("timed", 3), untimed]})
    assert decide(v, failure("node_lost")).resume_from == ckpt("timed", 3)
    # two stored at the same time: the one folded last
    v = v.model_copy(update={"checkpoints": [ckpt("first", 3), ckpt("second", 3), untimed]})
    assert decide(v, failure("node_lost")).resume_from == ckpt("second", 3)


def test_resume_from_what_the_job_was_submitted_with() -> None:
    given = ckpt("from-other-job", 0)
    v = view(("node_lost", "platform"))
    v = v.model_copy(update={"attempts": [v.attempts[0].model_copy(update={"resume_from": given})]})
    assert latest_checkpoint(v) == given
    assert decide(v, failure("node_lost")).resume_from == given


def test_avoided_nodes_accumulate() -> None:
    v = view(("node_lost", "platform"), ("image_pull_failed", "platform"))
    v = v.model_copy(update={"avoid_nodes": ["node-1"], "avoid_providers": ["p1"]})
    d = decide(v, failure("image_pull_failed", 2))
    assert d.avoid_nodes == ["node-1", "node-2"]
    assert d.avoid_providers == ["p1"]  # a registry problem is not the provider's


def test_the_decision_names_the_avoided_node_and_provider_as_a_preference() -> None:
    v = view(("node_lost", "platform"))
    d = decide(v, failure("node_lost"))
    assert "node_lost on node-1 of provider p1" in d.avoid_reason
    assert "prefers a node other than node-1 and a provider other than p1" in d.reason
    assert "falls back to provider p1, then to node node-1" in d.reason
    assert "on another node" not in d.reason  # a preference, not a promise


def test_a_node_only_class_names_the_node_and_keeps_the_provider() -> None:
    d = decide(view(("unknown", "platform")), failure("unknown"))
    assert d.avoid_nodes == ["node-1"] and d.avoid_providers == []
    assert "unknown on node-1 of provider p1" in d.avoid_reason
    assert "provider other than" not in d.reason


def test_nothing_avoided_says_nothing_about_nodes() -> None:
    v = view(("gpu_out_of_memory", "user"), retry={"retry_user_errors": True})
    d = decide(v, failure("gpu_out_of_memory", who="user", retryable=False))
    assert d.avoid_reason == "" and "node" not in d.reason
