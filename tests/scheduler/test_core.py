"""The scheduler's decisions over literal event lists (no Kafka, explicit ``now``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from schemas.events import (
    AttemptAccepted,
    AttemptLost,
    AttemptScheduled,
    CancelRequested,
    CheckpointStored,
    ComputeReleased,
    ContainerStarted,
    DispatchTimedOut,
    JobFailed,
    JobQueued,
    JobRejected,
    JobSubmitted,
    NoCapacity,
    NodeHeartbeat,
    NodeRegistered,
    ProcessExited,
    RetryScheduled,
    derived_event_id,
)
from schemas.spec import JobSpec
from schemas.types import CheckpointRef, GpuDevice
from services.scheduler.core import FOLDED_TYPE_NAMES, SchedulerConfig, SchedulerState
from services.scheduler.inventory import check_fit_against

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def state() -> SchedulerState:
    return SchedulerState(
        SchedulerConfig(node_timeout_s=30, dispatch_timeout_s=60), check_fit_against
    )


def node(
    node_id: str, count: int = 1, gb: int = 80, at: datetime = T0, **kw: str
) -> NodeRegistered:
    gpus = [GpuDevice(index=i, model="A100-80GB", memory_total_mb=gb * 1024) for i in range(count)]
    return NodeRegistered(
        node_id=node_id, occurred_at=at, inventory_source="declared", gpus=gpus, **kw
    )


def submit(job_id: str, at: datetime = T0, **spec: object) -> JobSubmitted:
    fields: dict[str, object] = {"image": "gridledger/busybox:latest"}
    fields.update(spec)
    return JobSubmitted(job_id=job_id, occurred_at=at, tenant="t", spec=JobSpec(**fields))


def run(s: SchedulerState, *events, now: datetime = T0):
    for e in events:
        s.observe(e)
    return s.decide(now)


def test_submission_is_queued_then_placed_with_a_dispatch_deadline() -> None:
    s = state()
    sub = submit("j1", limits={"queue_timeout_s": 100})
    out = run(s, node("a"), sub)
    queued, scheduled = out
    assert isinstance(queued, JobQueued) and queued.attempt == 0
    assert queued.queue_deadline == T0 + timedelta(seconds=100)
    assert isinstance(scheduled, AttemptScheduled)
    assert (scheduled.attempt, scheduled.node_id, scheduled.gpu_indices) == (1, "a", [0])
    assert scheduled.dispatch_deadline == T0 + timedelta(seconds=60)
    assert scheduled.causation_id == queued.event_id
    assert run(s, sub, queued, scheduled) == []  # reading its own decisions back changes nothing


def test_impossible_job_is_rejected_with_the_numbers_before_anything_is_held() -> None:
    s = state()
    out = run(s, node("a", gb=24), submit("big", model={"params_billion": 70, "dtype": "fp16"}))
    assert len(out) == 1 and isinstance(out[0], JobRejected)
    rejected = out[0]
    assert rejected.failure_class == "does_not_fit" and rejected.fit is not None
    assert rejected.fit.required_vram_gb == 168.0 and rejected.fit.largest_gpu_vram_gb == 24.0
    assert "168" in rejected.summary and s.fleet.reservations == {}


def test_rejections_say_what_to_change_and_derive_from_the_event_that_led_to_the_check() -> None:
    """Pre-flight and late (the fleet was empty at submit) rejections alike: the wording the
    API and the CLI show, a cause, and ids that do not clash with the job's placement."""
    big = {"params_billion": 16, "dtype": "fp16"}
    s = state()
    sub = submit("now", model=big)
    (early,) = run(s, node("a", count=4, gb=24), sub)
    s = state()
    late_sub = submit("late", model=big)
    (queued,) = run(s, late_sub)
    (late,) = run(s, node("a", count=4, gb=24, at=T0 + timedelta(seconds=1)), now=T0)
    for rejected, cause in ((early, sub), (late, queued)):
        assert isinstance(rejected, JobRejected) and rejected.causation_id == cause.event_id
        assert rejected.producer == "scheduler" and rejected.attempt == 0
        assert rejected.summary == (
            "The job can never run on this fleet: job needs ~38.4 GiB of GPU memory per GPU "
            "(16B params x 2 bytes fp16 x 1.2 inference); the largest GPU in the fleet is "
            "A100-80GB with 24 GiB."
        )
        assert rejected.advice == "Request 2 GPUs or a smaller model."
    assert late.event_id not in {queued.event_id, late_sub.event_id}
    assert late.event_id != derived_event_id(queued.event_id, "scheduler")  # the placement's


def test_a_retry_that_no_longer_fits_after_a_restart_rejects_the_job_not_the_attempt() -> None:
    # A restarted scheduler reads a retry's JobQueued before any node: the fit is checked
    # once one registers, and a fleet that can no longer hold the job rejects the job.
    big = {"params_billion": 16, "dtype": "fp16"}
    s = state()
    sub = submit("j", model=big)
    queued, scheduled = run(s, node("a"), sub)
    lost = AttemptLost(job_id="j", attempt=1, node_id="a", occurred_at=T0)
    retry = RetryScheduled(
        job_id="j", attempt=1, occurred_at=T0, next_attempt=2, delay_s=0, not_before=T0
    )
    (requeued,) = run(s, scheduled, lost, retry)
    assert isinstance(requeued, JobQueued) and requeued.attempt == 2
    restarted = state()
    assert run(restarted, sub, queued, scheduled, lost, retry, requeued) == []
    later = T0 + timedelta(seconds=1)
    (rejected,) = run(restarted, node("b", count=4, gb=24, at=later), now=later)
    assert isinstance(rejected, JobRejected) and rejected.failure_class == "does_not_fit"
    assert rejected.causation_id == requeued.event_id and rejected.attempt == 0


def test_a_placement_names_the_provider_region_model_and_tenant_billing_prices_by() -> None:
    s = state()
    _, placed = run(s, node("a", provider="p1", region="eu"), submit("j"))
    assert isinstance(placed, AttemptScheduled)
    assert (placed.provider, placed.region, placed.gpu_model, placed.tenant) == (
        "p1",
        "eu",
        "A100-80GB",
        "t",
    )


def test_no_capacity_says_what_was_needed_and_what_the_job_avoided() -> None:
    s = state()
    spec: dict[str, Any] = {
        "model": {"params_billion": 16, "dtype": "fp16"},
        "resources": {"gpus": 2, "gpu_models": ["A100-80GB", "H100"]},
        "placement": {"avoid_nodes": ["z", "b"]},
        "limits": {"queue_timeout_s": 10},
    }
    _, placed = run(s, node("a", count=2), submit("j", **spec))
    assert isinstance(placed, AttemptScheduled)
    run(s, submit("k", **spec))  # the second job waits: j holds both GPUs
    (late,) = [e for e in run(s, now=T0 + timedelta(seconds=11)) if isinstance(e, NoCapacity)]
    assert late.detail == (
        "no live node had 2 GPU(s) with at least 19.2 GiB each of A100-80GB, H100 free before "
        "the queue deadline (the job avoids b, z)"
    )


def test_empty_fleet_means_wait_not_reject() -> None:
    s = state()
    out = run(s, submit("j", model={"params_billion": 70}))
    assert [type(e) for e in out] == [JobQueued]
    later = T0 + timedelta(seconds=1)
    # Once a node registers, the deferred fit check runs and rejects the impossible job.
    out = run(s, node("a", gb=24, at=later), now=later)
    assert [type(e) for e in out] == [JobRejected]


def test_queue_deadline_without_capacity_is_no_capacity() -> None:
    s = state()
    busy = NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[])
    out = run(s, node("a"), busy, submit("j", limits={"queue_timeout_s": 5}))
    assert [type(e) for e in out] == [JobQueued]
    assert s.decide(T0 + timedelta(seconds=4)) == []
    out = s.decide(T0 + timedelta(seconds=5))
    assert [type(e) for e in out] == [NoCapacity]
    assert isinstance(out[0], NoCapacity) and out[0].queue_deadline == T0 + timedelta(seconds=5)
    assert s.decide(T0 + timedelta(seconds=6)) == []


def test_capacity_is_freed_on_release_and_the_next_job_placed() -> None:
    s = state()
    q1, a1 = run(s, node("a"), submit("j1"))
    q2 = run(s, submit("j2"))
    assert [type(e) for e in q2] == [JobQueued]
    released = ComputeReleased(job_id="j1", attempt=1, node_id="a", occurred_at=T0)
    out = run(s, released)
    assert [type(e) for e in out] == [AttemptScheduled] and out[0].job_id == "j2"


def test_retry_is_queued_after_not_before_on_another_node_with_the_checkpoint() -> None:
    s = state()
    _, first = run(
        s,
        node("a", provider="p1"),
        node("b", provider="p2"),
        submit("j", placement={"providers": ["p1"]}),
    )
    assert first.node_id == "a"
    ckpt = CheckpointRef(job_id="j", attempt=1, name="c1", uri="file:///c1", sha256="x", bytes=1)
    lost = AttemptLost(job_id="j", attempt=1, node_id="a", occurred_at=T0)
    retry = RetryScheduled(
        job_id="j",
        attempt=1,
        occurred_at=T0,
        next_attempt=2,
        delay_s=2,
        not_before=T0 + timedelta(seconds=2),
        resume_from=ckpt,
        avoid_nodes=["a"],
    )
    out = run(s, lost, retry)
    assert [type(e) for e in out] == [JobQueued] and out[0].attempt == 2
    assert s.decide(T0 + timedelta(seconds=1)) == []
    (placed,) = s.decide(T0 + timedelta(seconds=2))
    assert isinstance(placed, AttemptScheduled)
    assert (placed.attempt, placed.node_id, placed.resume_from) == (2, "b", ckpt)


def test_spec_resume_from_resolves_the_latest_checkpoint_of_that_job() -> None:
    s = state()
    stored = [
        CheckpointStored(
            job_id="old",
            attempt=1,
            occurred_at=T0,
            name=f"c{i}",
            uri=f"file:///c{i}",
            sha256="s",
            bytes=1,
        )
        for i in range(2)
    ]
    decided = run(s, node("a", 2), submit("old"), *stored, submit("new", resume_from="old"))
    (placed,) = [e for e in decided if isinstance(e, AttemptScheduled) and e.job_id == "new"]
    assert placed.resume_from is not None and placed.resume_from.name == "c1"


def test_resume_from_another_tenants_job_gets_none_of_its_checkpoints() -> None:
    s = state()
    theirs = submit("theirs").model_copy(update={"tenant": "victim"})
    stored = CheckpointStored(
        job_id="theirs", attempt=1, occurred_at=T0, name="c", uri="file:///c", sha256="s", bytes=1
    )
    decided = run(s, node("a", 2), theirs, stored, submit("mine", resume_from="theirs"))
    (placed,) = [e for e in decided if isinstance(e, AttemptScheduled) and e.job_id == "mine"]
    assert placed.resume_from is None


def test_a_second_job_submitted_for_a_job_id_is_ignored_and_noted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = state()
    first = submit("j")
    intruder = JobSubmitted(
        job_id="j",
        occurred_at=T0,
        tenant="other",
        spec=JobSpec(image="gridledger/python:latest", resources={"gpus": 1}),
    )
    run(s, node("a"), first, intruder, first)  # the first again: a redelivery, not a second
    entry = s.jobs["j"]
    assert (entry.tenant, entry.submitted.event_id, entry.spec) == ("t", first.event_id, first.spec)
    assert len(s.anomalies) == 1 and intruder.event_id in s.anomalies[0]
    assert s.owners == {"j": "t"}
    assert [r.getMessage() for r in caplog.records if "second JobSubmitted" in r.getMessage()] == [
        s.anomalies[0]
    ]


def test_cancelled_and_terminal_jobs_leave_the_queue_and_free_capacity() -> None:
    s = state()
    busy = NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[])
    run(s, node("a"), busy, submit("j"))
    run(s, CancelRequested(job_id="j", occurred_at=T0))
    assert len(s.queue) == 0
    _, placed = run(
        s, submit("k"), NodeHeartbeat(node_id="a", occurred_at=T0, seq=2, free_gpu_indices=[0])
    )
    assert placed.job_id == "k" and s.fleet.reservations
    run(s, JobFailed(job_id="k", attempt=1, occurred_at=T0, failure_class="unknown"))
    assert s.fleet.reservations == {} and "k" in s.done


def test_a_replay_of_the_log_rebuilds_the_same_state_and_decides_nothing_new() -> None:
    live = state()
    log = [node("a", count=2), submit("j1"), submit("j2"), submit("j3")]
    for e in log:
        live.observe(e)
    decided = live.decide(T0)
    replayed = state()
    for e in log + decided + log:  # with duplicates
        replayed.observe(e)
    assert replayed.decide(T0) == []
    assert replayed.fleet.reservations == live.fleet.reservations
    assert list(replayed.queue) == list(live.queue) == ["j3"]


def test_an_unplaceable_kind_does_not_block_other_kinds_and_each_kind_is_fifo() -> None:
    s = state()
    out = run(
        s,
        node("a", count=2),
        NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[0]),
        submit("big", resources={"gpus": 2}),
        submit("small-1"),
        submit("small-2"),
    )
    placed = [e.job_id for e in out if isinstance(e, AttemptScheduled)]
    assert placed == ["small-1"]
    assert list(s.queue) == ["big", "small-2"]


def test_a_job_cancelled_before_its_preflight_or_retry_is_not_queued() -> None:
    s = state()
    sub = submit("j")
    assert run(s, node("a"), sub, CancelRequested(job_id="j", occurred_at=T0)) == []
    retry = RetryScheduled(
        job_id="j", attempt=1, occurred_at=T0, next_attempt=2, delay_s=0, not_before=T0
    )
    assert run(s, retry) == []


def test_the_folded_types_are_the_ones_the_service_may_not_skip() -> None:
    """The service skips records of other types unread (by header); this list is the contract."""
    assert {
        "NodeRegistered",
        "NodeHeartbeat",
        "NodeDrained",
        "CheckpointStored",
        "JobSubmitted",
        "JobQueued",
        "AttemptScheduled",
        "AttemptAccepted",
        "ComputeReleased",
        "AttemptLost",
        "DispatchTimedOut",
        "RetryScheduled",
        "NoCapacity",
        "CancelRequested",
        "FailureClassified",
        "JobSucceeded",
        "JobSucceededWithErrors",
        "JobFailed",
        "JobCancelled",
        "JobRejected",
    } == FOLDED_TYPE_NAMES


def test_events_of_other_types_change_nothing() -> None:
    s = state()
    run(s, node("a", count=2), submit("j1"), submit("j2"))
    before = (dict(s.fleet.reservations), list(s.queue), {j: e.phase for j, e in s.jobs.items()})
    others = [
        ContainerStarted(job_id="j1", attempt=1, occurred_at=T0, container_id="c1"),
        ProcessExited(job_id="j1", attempt=1, occurred_at=T0, exit_code=1),
    ]
    assert all(type(e).__name__ not in FOLDED_TYPE_NAMES for e in others)
    assert run(s, *others) == []
    after = (dict(s.fleet.reservations), list(s.queue), {j: e.phase for j, e in s.jobs.items()})
    assert after == before


def test_a_dispatch_timeout_after_the_node_accepted_keeps_the_gpus_held() -> None:
    """The classifier ignores a timeout appended after the acceptance (log order); so does
    the scheduler, or it would place a second attempt on a GPU the first still uses."""
    late = DispatchTimedOut(job_id="j1", attempt=1, occurred_at=T0, node_id="a", deadline=T0)
    s = state()
    run(s, node("a"), submit("j1"))
    accepted = AttemptAccepted(job_id="j1", attempt=1, occurred_at=T0, node_id="a")
    assert [type(e) for e in run(s, accepted, late, submit("j2"))] == [JobQueued]
    assert ("j1", 1) in s.fleet.reservations
    timed_out_first = state()
    run(timed_out_first, node("a"), submit("j1"))
    run(timed_out_first, late)
    assert ("j1", 1) not in timed_out_first.fleet.reservations


def test_a_node_whose_attempt_was_lost_gets_nothing_until_it_heartbeats_again() -> None:
    s = state()
    run(s, node("a"), submit("j1"))
    lost_at = T0 + timedelta(seconds=20)
    lost = AttemptLost(job_id="j1", attempt=1, occurred_at=lost_at, node_id="a")
    # heard from 20 s ago, within the 30 s node timeout, but silent since the loss
    assert [type(e) for e in run(s, lost, submit("j2", at=lost_at), now=lost_at)] == [JobQueued]
    assert s.fleet.nodes["a"].suspect and s.fleet.free_indices("a") == [0]
    back = NodeHeartbeat(
        node_id="a", occurred_at=lost_at + timedelta(seconds=1), seq=1, free_gpu_indices=[0]
    )
    out = run(s, back, now=lost_at + timedelta(seconds=1))
    assert [(type(e), e.job_id, getattr(e, "node_id", "")) for e in out] == [
        (AttemptScheduled, "j2", "a")
    ]


def test_a_rebuild_reading_heartbeats_before_the_loss_still_keeps_the_node_out() -> None:
    """Suspicion is judged by time, not by the order the topics are read in."""
    s = state()
    run(s, node("a"), submit("j1"))
    before = NodeHeartbeat(
        node_id="a", occurred_at=T0 + timedelta(seconds=5), seq=1, free_gpu_indices=[0]
    )
    lost = AttemptLost(job_id="j1", attempt=1, occurred_at=T0 + timedelta(seconds=10), node_id="a")
    now = T0 + timedelta(seconds=11)
    out = run(s, before, lost, submit("j2", at=now), now=now)
    assert not any(isinstance(e, AttemptScheduled) for e in out)
    assert s.fleet.nodes["a"].suspect


# --------------------------------------------------------------------------- avoidance
# A retry's avoid_nodes / avoid_providers are a preference: other nodes first, then,
# after the fallback wait, the avoided provider, then the avoided node (never a silent
# or suspect one). The decision names what was avoided, why, and what it fell back to.

WAIT = 3.0


def fallback_state() -> SchedulerState:
    return SchedulerState(
        SchedulerConfig(node_timeout_s=30, dispatch_timeout_s=60, retry_fallback_s=WAIT),
        check_fit_against,
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fail_and_retry(s: SchedulerState, job: str, node_id: str, cls: str, **avoid: list[str]):
    """Attempt 1 of ``job`` ended on ``node_id`` and was classified ``cls``; attempt 2 is
    due at 1 s."""
    from schemas.events import FailureClassified
    from schemas.types import Evidence

    ended = (
        AttemptLost(job_id=job, attempt=1, node_id=node_id, occurred_at=at(0.5))
        if cls == "node_lost"
        else ComputeReleased(job_id=job, attempt=1, node_id=node_id, occurred_at=at(0.5))
    )
    classified = FailureClassified(
        job_id=job,
        attempt=1,
        occurred_at=at(0.5),
        failure_class=cls,
        attribution="platform",
        retryable=True,
        summary="",
        advice="",
        evidence=Evidence(rule_id="r"),
        rule_id="r",
        classifier_version="1",
    )
    retry = RetryScheduled(
        job_id=job,
        attempt=1,
        occurred_at=at(0.5),
        next_attempt=2,
        delay_s=0.5,
        not_before=at(1),
        **avoid,
    )
    (queued,) = run(s, ended, classified, retry, now=at(0.5))
    assert isinstance(queued, JobQueued) and queued.attempt == 2
    return queued


def test_a_one_node_fleet_retries_on_its_node_after_the_fallback_wait() -> None:
    # exit 137 without an OOM kill: unknown, retried once "on another node" - there is none.
    s = fallback_state()
    _, first = run(s, node("a", provider="p1"), submit("j"))
    assert first.node_id == "a"
    fail_and_retry(s, "j", "a", "unknown", avoid_nodes=["a"])
    assert s.decide(at(1)) == []
    assert s.decide(at(1 + WAIT - 0.1)) == []  # still hoping for another node
    (placed,) = s.decide(at(1 + WAIT))
    assert isinstance(placed, AttemptScheduled) and (placed.attempt, placed.node_id) == (2, "a")
    assert placed.avoidance is not None
    assert placed.avoidance.model_dump() == {
        "nodes": ["a"],
        "providers": [],
        "fell_back_to": "node",
        "waited_s": WAIT,
        "because": "attempt 1 failed unknown",
    }
    assert placed.reason == (
        "avoided node a, where attempt 1 failed unknown; no other node could hold it within "
        "3 s, so it fell back to the same node a (provider p1), which is live and not suspect"
    )


def test_a_lost_node_s_provider_is_used_for_its_spare_never_the_suspect_node() -> None:
    s = fallback_state()
    _, first = run(s, node("a", provider="p1"), node("b", provider="p1"), submit("j"))
    assert isinstance(first, AttemptScheduled) and first.node_id == "a"
    fail_and_retry(s, "j", "a", "node_lost", avoid_nodes=["a"], avoid_providers=["p1"])
    assert s.decide(at(1)) == []  # b is of the avoided provider: wait for another one
    (placed,) = s.decide(at(1 + WAIT))
    assert isinstance(placed, AttemptScheduled) and placed.node_id == "b"
    assert placed.avoidance is not None and placed.avoidance.fell_back_to == "provider"
    assert placed.reason == (
        "avoided node a and provider p1, where attempt 1 failed node_lost; no node of another "
        "provider could hold it within 3 s, so it fell back to provider p1 on node b "
        "(provider p1)"
    )


def test_another_provider_wins_without_waiting_and_the_event_says_what_was_avoided() -> None:
    s = fallback_state()
    run(s, node("a", provider="p1"), node("b", provider="p1"), node("c", provider="p2"))
    _, first = run(s, submit("j", placement={"providers": ["p1"]}))
    assert first.node_id == "a"
    fail_and_retry(s, "j", "a", "node_lost", avoid_nodes=["a"], avoid_providers=["p1"])
    (placed,) = s.decide(at(1))
    assert isinstance(placed, AttemptScheduled)
    assert placed.node_id == "c" and placed.avoidance is not None
    assert placed.avoidance.fell_back_to == "" and placed.avoidance.waited_s == 0
    assert placed.reason == (
        "placed on node c (provider p2), avoiding node a and provider p1, where attempt 1 "
        "failed node_lost"
    )


def test_a_suspect_or_silent_node_is_never_the_fallback_and_no_capacity_says_so() -> None:
    s = fallback_state()
    _, first = run(s, node("a", provider="p1"), submit("j", limits={"queue_timeout_s": 20}))
    queued = fail_and_retry(s, "j", "a", "node_lost", avoid_nodes=["a"], avoid_providers=["p1"])
    # a was declared lost and has not been heard from since: suspect.
    assert s.decide(at(1 + WAIT)) == []
    assert s.decide(at(15)) == []
    (none,) = s.decide(queued.queue_deadline)
    assert isinstance(none, NoCapacity) and none.attempt == 2
    assert (
        none.detail
        == (
            "no live node had 1 GPU(s) with at least 0.0 GiB each free before the queue deadline "
            "(a retry avoiding node a and provider p1, where attempt 1 failed node_lost; after 3 s "
            "it was offered those too, but no node was live, not suspect and free)"
        )
        or "avoiding node a and provider p1" in none.detail
    )
    # Heard from again after the loss: no longer suspect, so a later retry may use it.


def test_a_node_heard_again_after_its_loss_takes_the_retry_back() -> None:
    s = fallback_state()
    run(s, node("a", provider="p1"), submit("j"))
    fail_and_retry(s, "j", "a", "node_lost", avoid_nodes=["a"], avoid_providers=["p1"])
    assert s.decide(at(1 + WAIT)) == []  # suspect
    beat = NodeHeartbeat(node_id="a", occurred_at=at(5), seq=9, free_gpu_indices=[0])
    (placed,) = run(s, beat, now=at(5))
    assert placed.node_id == "a" and placed.avoidance is not None
    assert placed.avoidance.fell_back_to == "node" and placed.avoidance.waited_s == 4


def test_the_job_s_own_avoid_nodes_stay_a_hard_rule() -> None:
    s = fallback_state()
    run(s, node("a"))
    (queued,) = run(s, submit("j", placement={"avoid_nodes": ["a"]}))
    assert isinstance(queued, JobQueued)
    assert s.decide(at(100)) == []


def test_a_node_s_liveness_is_judged_by_when_it_was_heard_not_by_its_clock() -> None:
    behind = fallback_state()
    behind.observe(node("slow", at=T0 - timedelta(seconds=120)), heard_at=T0)
    (_, placed) = run(behind, submit("j"))
    assert isinstance(placed, AttemptScheduled) and placed.node_id == "slow"

    ahead = fallback_state()
    ahead.observe(node("fast", at=T0 + timedelta(seconds=120)), heard_at=T0)
    (queued,) = run(ahead, submit("k"), now=at(31))  # heard 31 s ago: silent (timeout 30)
    assert isinstance(queued, JobQueued)
    assert ahead.decide(at(31)) == []


def test_two_gpus_of_two_models_on_the_only_node_are_rejected_at_submit_not_left_to_wait() -> None:
    """Fit and placement are one rule: a gpus: 2 job on a node of one RTX 4090 and one RTX
    3090 can never be placed, so pre-flight rejects it instead of it ending
    capacity_unavailable at its queue deadline."""
    gpus = [
        GpuDevice(index=0, model="NVIDIA GeForce RTX 4090", memory_total_mb=24 * 1024),
        GpuDevice(index=1, model="NVIDIA GeForce RTX 3090", memory_total_mb=24 * 1024),
    ]
    mixed = NodeRegistered(node_id="mixed", occurred_at=T0, inventory_source="declared", gpus=gpus)
    s = state()
    out = run(s, mixed, submit("two", resources={"gpus": 2}))
    assert [type(e) for e in out] == [JobRejected]
    assert isinstance(out[0], JobRejected) and out[0].failure_class == "does_not_fit"
    assert "suitable GPU(s) of one model" in out[0].summary
    assert out[0].advice == "Request at most 1 GPUs or a smaller model."
    out = run(s, submit("one", resources={"gpus": 1}))
    assert [type(e) for e in out] == [JobQueued, AttemptScheduled]


def test_a_rejection_is_the_same_event_whichever_instance_decides_it_and_occurs_then() -> None:
    """Two scheduler instances (or one after a restart) derive the same rejection id, so the
    ledger keeps one; its producer names the instance and it occurs when the check ran."""
    big = {"params_billion": 16, "dtype": "fp16"}
    later = T0 + timedelta(seconds=7)
    sub = submit("now", model=big)
    decided = []
    for producer in ("scheduler/host-1", "scheduler/host-2"):
        s = SchedulerState(SchedulerConfig(producer=producer), check_fit_against)
        (early,) = run(s, node("a", count=4, gb=24), sub, now=later)
        decided.append(early)
    one, two = decided
    assert isinstance(one, JobRejected) and one.event_id == two.event_id
    assert one.event_id == derived_event_id(sub.event_id, "scheduler")
    assert (one.producer, two.producer) == ("scheduler/host-1", "scheduler/host-2")
    assert one.occurred_at == later and one.attempt == 0
    s = SchedulerState(SchedulerConfig(producer="scheduler/host-1"), check_fit_against)
    (queued,) = run(s, submit("late", model=big))
    (late,) = run(s, node("a", count=4, gb=24, at=later), now=later)
    assert isinstance(late, JobRejected) and late.occurred_at == later
    assert late.event_id == derived_event_id(queued.event_id, "scheduler", "reject")
    assert late.producer == "scheduler/host-1"


def _lost_and_retried(not_before_s: float, reason: str = "") -> SchedulerState:
    s = state()
    run(s, node("a"), node("b"), submit("j", limits={"queue_timeout_s": 30}))
    lost = AttemptLost(job_id="j", attempt=1, node_id="a", occurred_at=T0)
    retry = RetryScheduled(
        job_id="j",
        attempt=1,
        occurred_at=T0,
        next_attempt=2,
        delay_s=not_before_s,
        not_before=T0 + timedelta(seconds=not_before_s),
        reason=reason,
    )
    for e in (lost, retry):
        s.observe(e)
    return s


def test_the_queue_deadline_counts_from_submission_not_from_the_check() -> None:
    # The scheduler read the submission 3 s late: the user's queue_timeout_s still counts
    # from when the job was submitted.
    s = state()
    busy = NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[])
    (queued,) = run(s, node("a"), busy, submit("j", limits={"queue_timeout_s": 5}),
                    now=T0 + timedelta(seconds=3))  # fmt: skip
    assert isinstance(queued, JobQueued)
    assert queued.queue_deadline == T0 + timedelta(seconds=5)
    assert queued.occurred_at == T0 + timedelta(seconds=3)


def test_a_retry_s_queue_deadline_counts_from_when_it_may_start() -> None:
    # Decided before its backoff ends: from not_before. Decided after it (a scheduler that
    # was down): from the decision, so the retry gets its whole queue_timeout_s.
    s = _lost_and_retried(not_before_s=10)
    (early,) = s.decide(T0 + timedelta(seconds=4))
    assert isinstance(early, JobQueued) and early.attempt == 2
    assert early.queue_deadline == T0 + timedelta(seconds=10 + 30)
    s = _lost_and_retried(not_before_s=10)
    late, placed = s.decide(T0 + timedelta(seconds=25))
    assert isinstance(late, JobQueued) and isinstance(placed, AttemptScheduled)
    assert late.queue_deadline == T0 + timedelta(seconds=25 + 30)


def test_a_queued_job_says_why_it_waits() -> None:
    busy = NodeHeartbeat(node_id="a", occurred_at=T0, seq=1, free_gpu_indices=[])
    (known,) = run(state(), node("a"), busy, submit("j"))
    assert isinstance(known, JobQueued) and known.reason == "waiting for capacity"
    (unknown,) = run(state(), submit("j"))
    assert isinstance(unknown, JobQueued)
    assert (
        unknown.reason == "waiting for capacity (no node registered yet; fit checked when one is)"
    )


@pytest.mark.parametrize(
    ("why", "reason"),
    [("node lost: node-X", "retry of attempt 1: node lost: node-X"), ("", "retry of attempt 1")],
)
def test_a_retry_s_queueing_says_which_attempt_it_retries_and_why(why: str, reason: str) -> None:
    (queued,) = _lost_and_retried(not_before_s=10, reason=why).decide(T0)
    assert isinstance(queued, JobQueued) and queued.reason == reason


def test_an_ended_job_s_id_cannot_be_taken_by_another_submission() -> None:
    # Once a job has ended, a JobSubmitted reusing its id (another tenant's, say) makes no
    # new job: the id keeps its owner, so resume_from never reaches the old job's checkpoints.
    s = state()
    run(s, node("a"), submit("j"))
    ended = JobFailed(job_id="j", attempt=1, occurred_at=T0, failure_class="user_process_error",
                      attribution="user", summary="exit 1", advice="fix it")  # fmt: skip
    run(s, ended)
    intruder = JobSubmitted(
        job_id="j",
        occurred_at=T0 + timedelta(seconds=1),
        tenant="other",
        spec=JobSpec(image="gridledger/python:latest", resources={"gpus": 1}),
    )
    assert run(s, intruder, now=T0 + timedelta(seconds=1)) == []
    assert "j" not in s.jobs and s.owners == {"j": "t"}


def test_the_scheduler_notes_each_ignored_submission_and_keeps_the_latest_hundred() -> None:
    s = state()
    run(s, submit("j"))
    intruders = [
        JobSubmitted(job_id="j", event_id=f"forged-{i}", occurred_at=T0, tenant="other",
                     spec=JobSpec(image="gridledger/python:latest"))
        for i in range(150)
    ]  # fmt: skip
    run(s, *intruders)
    assert len(s.anomalies) == 100
    assert s.anomalies[-1] == (
        "j: a second JobSubmitted forged-149 (tenant other) ignored; the job was already submitted"
    )
    assert "forged-50 " in s.anomalies[0]
