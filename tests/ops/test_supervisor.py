"""The supervised set as real processes: readiness, a SIGKILL restarted, health, a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from schemas.errors import StackError
from services.ledger import Ledger
from services.ops.fleet import RestartPolicy, load_fleet
from services.ops.specs import ServiceSpec
from services.ops.supervisor import Supervisor, fetch_json
from services.settings import Settings
from tests.sink.pg import private_schema
from tests.sink.scenario import epoch_in_force, run_facts, submitted
from tests.waiting import eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FAST = RestartPolicy(initial_backoff_s=0.2, max_backoff_s=1.0)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def gone(pid: int) -> bool:
    """True when nothing runs under this pid any more.

    A zombie counts as gone: it has ended and only waits for its parent to read its
    status (an orphan's new parent, the container's init, may never do so).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def health(state: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "health", "--state", str(state), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    return done.returncode, json.loads(done.stdout)


def fleet_file(tmp_path: Path, node_id: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"""
env: {{GRIDLEDGER_LOG_FORMAT: json}}
services:
  - {{name: sink, command: [sink]}}
  - {{name: scheduler, command: [scheduler]}}
  - {{name: processors, command: [processors]}}
agents:
  - node_id: {node_id}
    inventory: {REPO / "services" / "ops" / "inventory.json"}
    args: [--shutdown-policy, stop]
"""
    )
    return path


async def test_the_set_is_ready_survives_a_sigkill_and_stops_without_leftovers(
    topics: Settings, tmp_path: Path
) -> None:
    async with private_schema(topics) as (settings, _pool):
        await _run_the_set(settings, tmp_path)


async def _run_the_set(settings: Settings, tmp_path: Path) -> None:
    node = f"ops-{uuid.uuid4().hex[:6]}"
    fleet = load_fleet(fleet_file(tmp_path, node))
    state = tmp_path / "state.json"
    supervisor = Supervisor(settings, tmp_path / "logs", policy=FAST, state_file=state)
    try:
        supervisor.start_all(fleet.specs(tmp_path))
        supervisor.wait_ready(timeout_s=180)
        names = {"sink", "scheduler", "processors", f"agent-{node}"}
        code, report = health(state)
        assert code == 0, report
        rows = {r["name"]: r for r in report["services"]}  # type: ignore[attr-defined]
        assert set(rows) == names
        checks = {c["name"] for c in rows[f"agent-{node}"]["checks"]}
        assert {"kafka", "docker", "commands", "lag"} <= checks
        assert {"kafka", "worker", "group", "lag"} <= {
            c["name"] for c in rows["processors"]["checks"]
        }
        assert {"kafka", "postgres", "consumer", "lag"} <= {
            c["name"] for c in rows["sink"]["checks"]
        }

        await _metrics_move_when_events_flow(settings, supervisor)

        # A crash: SIGKILL the scheduler's process; the supervisor starts a new one.
        first = supervisor.children["scheduler"].pids[-1]
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: supervisor.children["scheduler"].restarts == 1, 30, "a restart")
        second = supervisor.children["scheduler"].pids[-1]
        assert second != first and gone(first)
        supervisor.wait_ready(["scheduler"], timeout_s=120)
        body = fetch_json(f"{supervisor.ops_url('scheduler')}/healthz", 5)
        assert body is not None and body["pid"] == second
        log = (tmp_path / "logs" / "scheduler.log").read_text()
        assert "[supervisor] scheduler exited with signal 9" in log

        # Every service wrote JSON lines naming itself (GRIDLEDGER_LOG_FORMAT=json).
        sink_lines = [
            json.loads(line)
            for line in (tmp_path / "logs" / "sink.log").read_text().splitlines()
            if line.startswith("{")
        ]
        assert sink_lines and all(line["service"] == "sink" for line in sink_lines)
    finally:
        supervisor.stop()
    pids = [pid for child in supervisor.children.values() for pid in child.pids]
    assert len(pids) == 5
    assert [pid for pid in pids if not gone(pid)] == []
    code, report = health(state)
    assert code == 1 and report["ready"] is False


def scrape(
    supervisor: Supervisor, name: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a service's /metrics, keyed by (name, sorted labels)."""
    url = f"{supervisor.ops_url(name)}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def _metrics_move_when_events_flow(settings: Settings, supervisor: Supervisor) -> None:
    job_events = settings.topic("job-events")
    before = {name: scrape(supervisor, name) for name in ("sink", "processors", "scheduler")}
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    async with Ledger(settings, "test") as ledger:
        # The scripted decisions need the running scheduler's epoch, or the fence drops them.
        epoch = await eventually(lambda: epoch_in_force(ledger, job_id), "the scheduler leading")
        facts = run_facts(job_id, exit_code=0, leader_epoch=epoch).all()
        n_job_events = sum(1 for e in facts if settings.topic(type(e).TOPIC) == job_events)
        await ledger.append_many(facts)
        # A job left waiting: the scheduler has something to decide (queue or reject it).
        await ledger.append(submitted(f"job-{uuid.uuid4().hex[:12]}"))

    def consumed(name: str) -> float:
        now = scrape(supervisor, name)
        key = "gridledger_events_consumed_total"
        return sample(now, key, topic=job_events) - sample(before[name], key, topic=job_events)

    wait_until(lambda: consumed("sink") >= n_job_events + 1, 60, "the sink to count the events")
    wait_until(lambda: consumed("processors") >= n_job_events, 60, "the processors to count")
    # Counted when decoded; the row is there once the batch commits.
    wait_until(
        lambda: sample(scrape(supervisor, "sink"), "gridledger_jobs", status="succeeded") == 1,
        30,
        "the sink to show the job succeeded",
    )
    sink = scrape(supervisor, "sink")
    processors = scrape(supervisor, "processors")
    # The processors' own appends (views) and faust's sensor, in the same registry.
    assert (
        sample(processors, "gridledger_events_produced_total", topic=settings.topic("job-state"))
        >= 1
    )
    # faust's sensor sees the worker's commits (records arrive in batches, not via faust).
    commits = "faust_consumer_commit_latency_count"
    assert sum(v for (k, _), v in processors.items() if k == commits) >= 1
    assert any(k == "gridledger_consumer_lag" for k, _ in sink)
    latency = "gridledger_decision_latency_seconds_count"
    assert sample(processors, latency, decider="processors") >= 1  # the node command
    wait_until(
        lambda: sample(scrape(supervisor, "scheduler"), latency, decider="scheduler") >= 1,
        30,
        "the scheduler to decide on the submission",
    )


async def test_a_service_stopped_on_purpose_is_not_restarted(
    topics: Settings, tmp_path: Path
) -> None:
    supervisor = Supervisor(topics, tmp_path / "logs", policy=FAST)
    try:
        supervisor.start(ServiceSpec("scheduler", ["scheduler"]))
        supervisor.wait_ready(timeout_s=120)
        supervisor.kill("scheduler", signal.SIGKILL, restart=False)
        supervisor.poll()
        child = supervisor.children["scheduler"]
        assert child.state == "stopped" and child.restarts == 0 and len(child.pids) == 1
    finally:
        supervisor.stop()
    assert gone(supervisor.children["scheduler"].pids[0])


def test_restarts_back_off_doubling_up_to_the_cap() -> None:
    policy = RestartPolicy(initial_backoff_s=0.5, max_backoff_s=3)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_service_that_keeps_crashing_is_given_up_with_its_log(
    settings: Settings, tmp_path: Path
) -> None:
    """A real child that exits at once (a usage error): backoff doubles, then it is failed."""
    policy = RestartPolicy(initial_backoff_s=0.1, max_backoff_s=0.4, give_up_after=3)
    supervisor = Supervisor(settings, tmp_path / "logs", policy=policy)
    try:
        supervisor.start(ServiceSpec("broken", ["no-such-command"], ops_port=0))
        wait_until(lambda: supervisor.children["broken"].state == "failed", 60, "giving up")
        with pytest.raises(StackError, match="service broken exited with code 2") as raised:
            supervisor.check_alive()
        assert "No such command" in str(raised.value)  # the tail of its log
    finally:
        supervisor.stop()
    child = supervisor.children["broken"]
    assert child.restarts == 2 and len(child.pids) == 3
    log = (tmp_path / "logs" / "broken.log").read_text()
    assert [
        line.split("restarting in ")[1] for line in log.splitlines() if "restarting in" in line
    ] == [
        "0.1 s",
        "0.2 s",
    ]
    assert "3 crashes in a row, giving up" in log
    assert all(gone(pid) for pid in child.pids)
