"""Every scenario end to end: state, classification, decision and accounting."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

import pytest

from projections.accounting import POLICY_VERSION, account
from projections.decisions import verify
from projections.job_state import project
from schemas.events import (
    AttemptLost,
    AttemptSuperseded,
    Event,
    FailureClassified,
    JobCancelled,
    JobFailed,
    JobSucceeded,
    JobSucceededWithErrors,
    RetryScheduled,
    RetryWithdrawn,
)
from schemas.views import AccountingRecord, JobView
from tests.projections import scenarios
from tests.projections.histories import JobHistory

E = TypeVar("E", bound=Event)


def derived(h: JobHistory, cls: type[E]) -> list[E]:
    return [e for e in h.events if isinstance(e, cls)]


def only(h: JobHistory, cls: type[E]) -> E:
    found = derived(h, cls)
    assert len(found) == 1, found
    return found[0]


def outcome(h: JobHistory) -> tuple[JobView, AccountingRecord]:
    view, record = project(h.events), account(h.events, h.ticks)
    assert view.anomalies == []
    assert verify(h.events) == []  # replayed decisions equal the live ones
    assert record.policy_version == POLICY_VERSION
    for a in record.attempts:
        assert a.billable_gpu_seconds + a.credited_gpu_seconds == a.gpu_seconds
    return view, record


def classified(h: JobHistory) -> FailureClassified:
    event = only(h, FailureClassified)
    assert isinstance(event, FailureClassified)
    return event


def test_success_is_billed_and_final() -> None:
    h = scenarios.success()
    view, record = outcome(h)
    assert view.status == "succeeded" and view.terminal_event == "JobSucceeded"
    assert view.failure is None and derived(h, FailureClassified) == []
    assert [o.status for o in view.outputs] == ["stored"]
    assert [c.name for c in view.checkpoints] == ["step-500"]
    assert record.final and record.reconciled
    assert record.billable_gpu_seconds == record.gpu_seconds == 607.0
    assert record.credited_gpu_seconds == 0.0
    assert record.attempts[0].outcome == "succeeded"


def test_cuda_oom_names_the_allocation_and_bills_the_user() -> None:
    h = scenarios.cuda_oom()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("gpu_out_of_memory", "user", False)
    assert "CUDA out of memory while allocating 2.00 GiB" in c.summary
    assert "22.19 GiB in total" in c.summary
    assert c.advice.startswith("Reduce the batch size, use a smaller model or request a GPU")
    assert c.evidence.rule_id == "run.gpu_oom" and c.evidence.exit_code == 1
    assert any("OutOfMemoryError" in line for line in c.evidence.log_lines)
    failed = only(h, JobFailed)
    assert isinstance(failed, JobFailed)
    assert failed.reason.startswith("not retryable: the job's own code failed")
    assert "retry.retry_user_errors" in failed.reason
    assert view.status == "failed" and view.failure is not None
    assert view.failure.failure_class == "gpu_out_of_memory"
    assert record.billable_gpu_seconds == record.gpu_seconds > 0


def test_missing_module_names_module_and_package() -> None:
    c = classified(scenarios.missing_module())
    assert (c.failure_class, c.attribution, c.retryable) == ("missing_module", "user", False)
    assert "'transformers'" in c.summary and "ModuleNotFoundError" in c.summary
    assert "pip install transformers" in c.advice
    assert c.evidence.details["module"] == "transformers"


def test_missing_libcudart_is_the_image() -> None:
    c = classified(scenarios.missing_libcudart())
    assert (c.failure_class, c.attribution, c.retryable) == ("cuda_unavailable", "user", False)
    assert "libcudart.so.12" in c.summary
    assert "CUDA base image" in c.advice


def test_entrypoint_not_found_at_container_start() -> None:
    h = scenarios.entrypoint_not_found()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("entrypoint_not_found", "user", False)
    assert "'trian.py'" in c.summary and "executable file not found" in c.summary
    assert "spec.command" in c.advice
    assert view.attempts[0].start_error.startswith("entrypoint_not_found")
    assert record.billable_gpu_seconds == 5.0  # held from ComputeHeld to the release


def test_missing_data_file_names_the_path() -> None:
    c = classified(scenarios.missing_data_file())
    assert (c.failure_class, c.attribution, c.retryable) == ("missing_file", "user", False)
    assert "data/train.jsonl" in c.summary and "'data/train.jsonl'" in c.advice


def test_host_oom_quotes_the_memory_limit() -> None:
    c = classified(scenarios.host_oom())
    assert (c.failure_class, c.attribution, c.retryable) == ("host_out_of_memory", "user", False)
    assert "16 GiB" in c.summary and "OOMKilled" in c.summary and "not GPU memory" in c.summary
    assert "resources.memory_gb (now 16 GiB)" in c.advice
    assert c.evidence.oom_killed is True


def test_exit_137_without_oom_is_a_sigkill_not_host_oom() -> None:
    h = scenarios.sigkill_not_oom()
    view, record = outcome(h)
    first = derived(h, FailureClassified)[0]
    assert isinstance(first, FailureClassified)
    assert first.failure_class != "host_out_of_memory"
    assert (first.failure_class, first.retryable) == ("unknown", True)
    assert "SIGKILL" in first.summary and "not OOM-killed" in first.summary
    assert first.evidence.signal == 9 and first.evidence.oom_killed is False
    retry = only(h, RetryScheduled)
    assert isinstance(retry, RetryScheduled)
    assert retry.next_attempt == 2 and retry.avoid_nodes == ["node-a"]
    assert view.status == "succeeded"
    assert [a.outcome for a in record.attempts] == ["failed", "succeeded"]
    assert record.attempts[0].credited_gpu_seconds == record.attempts[0].gpu_seconds > 0
    assert record.attempts[1].billable_gpu_seconds == record.attempts[1].gpu_seconds > 0


def test_image_not_found_is_the_users_and_final() -> None:
    h = scenarios.image_not_found()
    view, _ = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("image_not_found", "user", False)
    assert "gridledger/trainr:1.0" in c.summary and "manifest unknown" in c.summary
    assert view.status == "failed" and derived(h, RetryScheduled) == []


def test_registry_unreachable_is_retried_until_the_budget_is_spent() -> None:
    h = scenarios.registry_unreachable()
    view, record = outcome(h)
    classes = {(e.failure_class, e.attribution, e.retryable) for e in derived(h, FailureClassified)}
    assert classes == {("image_pull_failed", "platform", True)}
    retries = [e for e in derived(h, RetryScheduled) if isinstance(e, RetryScheduled)]
    assert [(r.next_attempt, r.delay_s) for r in retries] == [(2, 5.0), (3, 10.0)]
    assert retries[1].avoid_nodes == ["node-a", "node-b"]
    assert retries[0].not_before == retries[0].occurred_at + timedelta(seconds=5)
    failed = only(h, JobFailed)
    assert isinstance(failed, JobFailed)
    assert failed.reason == "retry budget exhausted (3 of 3 attempts)"
    assert view.status == "failed" and len(view.attempts) == 3
    assert record.billable_gpu_seconds == 0 and record.credited_gpu_seconds == 93.0


def test_does_not_fit_is_rejected_with_numbers_and_owes_nothing() -> None:
    h = scenarios.does_not_fit()
    view, record = outcome(h)
    assert view.status == "rejected" and view.terminal_event == "JobRejected"
    assert view.fit is not None and not view.fit.fits
    assert view.failure is not None and view.failure.failure_class == "does_not_fit"
    assert "~38.4 GiB of GPU memory per GPU (16B params x 2 bytes fp16 x 1.2 inference)" in (
        view.failure.summary
    )
    assert "the largest GPU in the fleet is A10G with 24 GiB" in view.failure.summary
    assert view.failure.advice == "Request 2 GPUs or a smaller model."
    assert record.final and record.attempts == []
    assert record.held_seconds == record.billable_gpu_seconds == record.credited_gpu_seconds == 0


def test_capacity_unavailable_is_not_the_users_code_and_owes_nothing() -> None:
    h = scenarios.capacity_unavailable()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == (
        "capacity_unavailable",
        "capacity",
        False,
    )
    assert "not a problem with your job" in c.summary
    assert view.status == "failed" and record.final
    assert record.gpu_seconds == record.billable_gpu_seconds == 0


def test_node_lost_retries_from_checkpoint_on_another_node() -> None:
    h = scenarios.node_lost_then_resume()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("node_lost", "platform", True)
    retry = only(h, RetryScheduled)
    assert isinstance(retry, RetryScheduled)
    assert retry.resume_from is not None and retry.resume_from.name == "step-1000"
    assert retry.avoid_nodes == ["node-a"] and retry.avoid_providers == ["aws"]
    assert "resuming from checkpoint step-1000" in retry.reason
    assert view.status == "succeeded"
    assert view.attempts[1].node_id == "node-b"
    assert view.attempts[1].resume_from == retry.resume_from
    lost, ok = record.attempts
    assert (lost.outcome, lost.attribution, lost.release_source) == ("lost", "platform", "lost")
    assert lost.credited_gpu_seconds == lost.gpu_seconds > 0 and lost.billable_gpu_seconds == 0
    assert lost.released_at == view.attempts[0].last_heartbeat_at
    assert ok.billable_gpu_seconds == ok.gpu_seconds > 0 and ok.credited_gpu_seconds == 0
    assert record.final and record.reconciled


def test_a_retry_without_capacity_says_it_was_the_retry_and_credits_the_lost_attempt() -> None:
    h = scenarios.retry_no_capacity()
    view, record = outcome(h)
    failed = only(h, JobFailed)
    assert isinstance(failed, JobFailed)
    assert (view.status, failed.failure_class, failed.attribution) == (
        "failed",
        "capacity_unavailable",
        "capacity",
    )
    assert view.failure is not None and view.failure.rule_id == "queue.retry_no_capacity"
    summary = view.failure.summary
    assert summary.startswith("Attempt 2, the retry after node_lost on attempt 1 on node node-a")
    assert "of provider aws" in summary and "Your job's spec is not the problem" in summary
    assert "resume_from: job-1" in view.failure.advice  # a checkpoint exists to resume from
    (lost,) = record.attempts
    assert lost.outcome == "lost" and lost.billable_gpu_seconds == 0.0
    assert record.billable_gpu_seconds == 0.0 and record.final


def test_a_late_clean_end_before_the_retry_is_placed_withdraws_it_and_succeeds() -> None:
    h = scenarios.late_success_withdraws_the_retry()
    view, record = outcome(h)
    assert [e.type for e in h.events if e.producer == "retry-decider"] == [
        "RetryScheduled",
        "RetryWithdrawn",
        "JobSucceeded",
    ]
    withdrawn = only(h, RetryWithdrawn)
    assert isinstance(withdrawn, RetryWithdrawn) and withdrawn.next_attempt == 2
    assert "exited 0 and stored its outputs after all" in withdrawn.reason
    assert view.status == "succeeded" and view.failure is None
    (a,) = record.attempts
    # The real facts apply: billed up to the real release, which the meter confirms.
    release = [e for e in h.events if e.type == "ComputeReleased"][-1]
    assert a.outcome == "succeeded" and a.released_at == release.occurred_at
    assert a.billable_gpu_seconds == a.gpu_seconds == a.metered_gpu_seconds == 235.0
    assert a.credited_gpu_seconds == 0.0 and record.reconciled and record.final


def test_a_late_clean_end_while_the_retry_runs_wins_and_supersedes_the_retry() -> None:
    h = scenarios.late_success_supersedes_the_running_retry()
    view, record = outcome(h)
    succeeded = only(h, JobSucceeded)
    superseded = only(h, AttemptSuperseded)
    assert isinstance(superseded, AttemptSuperseded)
    assert (succeeded.attempt, superseded.attempt, superseded.winner) == (1, 2, 1)
    assert superseded.node_id == "node-b" and "earliest clean success" in superseded.reason
    assert derived(h, RetryWithdrawn) == []  # the retry had started: it is stopped instead
    assert view.status == "succeeded"
    assert [a.status for a in view.attempts] == ["lost", "superseded"]
    first, second = record.attempts
    assert first.outcome == "succeeded" and first.billable_gpu_seconds == first.gpu_seconds
    assert second.outcome == "superseded" and second.attribution == "platform"
    assert second.billable_gpu_seconds == 0.0 and second.credited_gpu_seconds == 30.0
    assert record.billable_gpu_seconds == first.gpu_seconds  # billed once
    assert record.final and record.reconciled


def test_a_late_failure_before_the_retry_is_placed_decides_the_job_on_its_real_facts() -> None:
    h = scenarios.late_failure_decides_on_the_real_facts()
    view, record = outcome(h)
    verdict, real = derived(h, FailureClassified)
    assert (verdict.failure_class, real.failure_class) == ("node_lost", "user_process_error")
    withdrawn = only(h, RetryWithdrawn)
    assert "its own facts arrived (user_process_error)" in withdrawn.reason
    failed = only(h, JobFailed)
    assert isinstance(failed, JobFailed) and failed.failure_class == "user_process_error"
    assert view.status == "failed" and view.failure is not None
    assert (
        view.failure.rule_id == "run.exit_nonzero" and "RuntimeError: boom" in view.failure.summary
    )
    (a,) = record.attempts
    # The job's own failure, billed like any: up to the real release, which the meter saw.
    assert (a.outcome, a.attribution, a.release_source) == ("failed", "user", "released")
    assert a.billable_gpu_seconds == a.gpu_seconds == a.metered_gpu_seconds and a.reconciled


def test_a_late_failure_after_the_retry_started_keeps_it_and_credits_to_the_last_heartbeat() -> (
    None
):
    h = scenarios.late_failure_keeps_the_running_retry()
    view, record = outcome(h)
    assert derived(h, RetryWithdrawn) == derived(h, AttemptSuperseded) == []
    assert only(h, JobSucceeded).attempt == 2
    assert view.status == "succeeded" and view.attempts[0].exit_code == 1  # recorded as it is
    lost, retry = record.attempts
    beat = next(e for e in h.events if isinstance(e, AttemptLost)).last_heartbeat_at
    assert lost.outcome == "lost" and lost.released_at == beat
    assert lost.credited_gpu_seconds == lost.gpu_seconds == 124.0
    # The meter saw the attempt run on to its real release. Over the window the lifecycle
    # counted (to the last heartbeat) the two agree; the ticks after it are shown apart,
    # neither billed nor credited.
    ticks = {t.tick_index: t for t in h.ticks if t.attempt == 1}
    assert beat is not None
    assert lost.reconciled and abs(lost.metered_gpu_seconds - lost.gpu_seconds) <= 30.0
    assert lost.uncounted_ticks == [i for i, t in ticks.items() if t.interval_start > beat] != []
    assert lost.metered_gpu_seconds + lost.uncounted_gpu_seconds == sum(
        t.gpu_seconds for t in ticks.values()
    )
    assert retry.outcome == "succeeded" and record.billable_gpu_seconds == retry.gpu_seconds


def test_upload_failure_after_exit_0_succeeds_with_errors_and_is_credited() -> None:
    h = scenarios.upload_failed()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution) == ("output_upload_failed", "platform")
    assert "503 Slow Down" in c.summary
    done = only(h, JobSucceededWithErrors)
    assert isinstance(done, JobSucceededWithErrors)
    assert "not supported yet" in done.summary
    assert view.status == "succeeded_with_errors"
    assert [o.status for o in view.outputs] == ["store_failed"]
    assert record.credited_gpu_seconds == record.gpu_seconds and record.billable_gpu_seconds == 0


def test_required_output_missing_is_the_users() -> None:
    h = scenarios.output_missing()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("output_missing", "user", False)
    assert "'model.pt'" in c.summary and "required: false" in c.advice
    assert view.status == "failed" and record.billable_gpu_seconds == record.gpu_seconds


def test_a_refused_required_output_fails_the_job_as_the_users_naming_path_and_rule() -> None:
    h = scenarios.output_refused()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("output_refused", "user", False)
    assert c.rule_id == "outputs.refused"
    assert "'model.pt' (refused_link)" in c.summary and "never followed" in c.summary
    assert "regular files" in c.advice and "symbolic links" in c.advice
    assert view.status == "failed" and view.outputs[0].status == "refused_link"
    assert record.billable_gpu_seconds == record.gpu_seconds > 0
    assert record.credited_gpu_seconds == 0


def test_a_declared_folder_never_makes_a_job_free() -> None:
    h = scenarios.optional_folder_refused()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution) == ("optional_output_refused", "user")
    assert "'.' (refused_folder)" in c.summary and "declare each file" in c.summary
    assert isinstance(only(h, JobSucceededWithErrors), JobSucceededWithErrors)
    assert view.status == "succeeded_with_errors"
    assert record.billable_gpu_seconds == record.gpu_seconds > 0
    assert record.credited_gpu_seconds == 0


def test_a_missing_optional_output_is_a_clean_success() -> None:
    h = scenarios.optional_output_missing()
    view, record = outcome(h)
    assert derived(h, FailureClassified) == []
    assert isinstance(only(h, JobSucceeded), JobSucceeded)
    assert view.status == "succeeded" and record.billable_gpu_seconds == record.gpu_seconds


def test_cancel_while_queued_owes_nothing() -> None:
    h = scenarios.cancel_while_queued()
    view, record = outcome(h)
    assert isinstance(only(h, JobCancelled), JobCancelled)
    assert derived(h, FailureClassified) == []
    assert view.status == "cancelled" and view.cancel_requested_at is not None
    assert record.final and record.attempts == [] and record.billable_gpu_seconds == 0


def test_cancel_while_running_bills_up_to_the_release() -> None:
    h = scenarios.cancel_while_running()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution) == ("cancelled", "user")
    assert c.rule_id == "cancel.user"  # not the SIGTERM exit code 143
    assert isinstance(only(h, JobCancelled), JobCancelled)
    assert view.status == "cancelled"
    (a,) = record.attempts
    released = view.attempts[0].released_at
    assert released is not None and a.released_at == released
    assert a.outcome == "cancelled" and a.billable_gpu_seconds == a.gpu_seconds == 127.0


def test_lost_contact_resolves_when_heartbeats_come_back() -> None:
    h = scenarios.lost_contact_recovers()
    states = [project(h.events[: i + 1]).status for i in range(len(h.events))]
    assert "lost_contact" in states
    back = states[states.index("lost_contact") + 1]
    assert back == "running"  # AttemptResponsive returns to the state it interrupted
    view, record = outcome(h)
    assert view.status == "succeeded" and view.deadline is None
    assert derived(h, FailureClassified) == [] and isinstance(only(h, JobSucceeded), JobSucceeded)
    assert record.billable_gpu_seconds == record.gpu_seconds


def test_dispatch_timeout_retries_elsewhere_and_nothing_was_held() -> None:
    h = scenarios.dispatch_timeout_then_success()
    view, record = outcome(h)
    c = classified(h)
    assert (c.failure_class, c.attribution, c.retryable) == ("dispatch_timeout", "platform", True)
    assert view.status == "succeeded"
    assert record.attempts[0].outcome == "not_held" and record.attempts[0].gpu_seconds == 0


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_every_scenario_ends_in_exactly_one_terminal_state(name: str) -> None:
    h = scenarios.SCENARIOS[name]()
    terminal = [
        e
        for e in h.events
        if type(e).__name__.startswith("Job")
        and e.type
        in ("JobSucceeded", "JobSucceededWithErrors", "JobFailed", "JobCancelled", "JobRejected")
    ]
    assert len(terminal) == 1
    assert project(h.events).terminal_event == terminal[0].type
