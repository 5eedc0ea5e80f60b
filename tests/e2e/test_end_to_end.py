"""End to end through the API: real Kafka, Postgres, Docker, agents and every service.

One module-scoped run of the demo's story (the same catalogue `gridledger demo`
uses) on its own topics, Postgres schema and API port; each test then checks
what a user sees for one job, and that ``replay --verify`` agrees afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from services.demo.run import Demo, DemoResult, table
from services.demo.scenarios import ALL_JOBS, NODE_LOST, DemoJob
from services.ledger.topics import delete_topics, ensure_topics
from services.ops.specs import free_port, settings_env
from services.settings import Settings, load_settings
from services.sink.db import drop_schema
from tests.offline import replay_offline
from tests.own_home import with_own_home

pytestmark = pytest.mark.integration


class Run:
    def __init__(self, settings: Settings, demo: Demo, result: DemoResult) -> None:
        self.settings = settings
        self.demo = demo
        self.result = result

    def doc(self, key: str) -> dict[str, Any]:
        return self.result.jobs[key]

    def accounting(self, key: str) -> dict[str, Any]:
        return self.demo.client_for(key).get(f"/v1/jobs/{self.result.ids[key]}/accounting")

    @property
    def env(self) -> dict[str, str]:
        """What the CLI needs to talk to this run's API."""
        return {**os.environ, **settings_env(self.settings), "NO_COLOR": "1"}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "services.cli.main", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tag = uuid.uuid4().hex[:8]
    settings = with_own_home(
        load_settings(),
        tmp_path_factory.mktemp("e2e-home"),
        topic_prefix=f"e2e-{tag}.",
        pg_schema=f"e2e_{tag}",
        api_port=free_port(),
    )
    asyncio.run(ensure_topics(settings))
    demo = Demo(settings, say=lambda line: print(line, flush=True), timeout_s=240)
    try:
        result = demo.run(keep_running=True)
        print(table(result))
        yield Run(settings, demo, result)
    finally:
        demo.services.stop()
        asyncio.run(delete_topics(settings))
        asyncio.run(drop_schema(settings, settings.pg_schema))


@pytest.mark.parametrize("job", ALL_JOBS, ids=lambda j: j.key)
def test_each_job_ends_as_the_user_expects(run: Run, job: DemoJob) -> None:
    doc = run.doc(job.key)
    expected = job.expected
    failure = doc.get("failure") or {}
    accounting = doc["accounting"]

    assert doc["status"] == expected.status, (doc.get("failure"), doc.get("anomalies"))
    assert accounting["final"] is True
    assert len(doc["attempts"]) == expected.attempts
    if expected.failure_class:
        assert failure["failure_class"] == expected.failure_class
        assert failure["attribution"] == expected.attribution
        assert failure["summary"] and failure["advice"]
        assert failure["evidence"]["rule_id"]
    if expected.billed:
        assert accounting["billable_gpu_seconds"] > 0
    else:
        assert accounting["billable_gpu_seconds"] == 0
    if expected.credited:
        assert accounting["credited_gpu_seconds"] > 0
    else:
        assert accounting["credited_gpu_seconds"] == 0
    total = accounting["billable_gpu_seconds"] + accounting["credited_gpu_seconds"]
    assert total == pytest.approx(accounting["gpu_seconds"], abs=1e-6)


def test_jobs_rejected_or_never_placed_hold_nothing(run: Run) -> None:
    for key in ("does-not-fit", "no-capacity"):
        accounting = run.doc(key)["accounting"]
        assert accounting["held_seconds"] == 0
        assert accounting["gpu_seconds"] == 0
    rejection = run.doc("does-not-fit")["failure"]
    assert "GiB" in rejection["summary"] + rejection["advice"]


def test_messages_quote_the_evidence(run: Run) -> None:
    oom = run.doc("cuda-oom")["failure"]
    assert "2.00 GiB" in oom["summary"]
    assert "batch size" in oom["advice"]
    assert any("CUDA out of memory" in line for line in oom["evidence"]["log_lines"])
    assert "transformers" in run.doc("missing-module")["failure"]["summary"]
    assert "data/train.jsonl" in run.doc("missing-data")["failure"]["summary"]
    assert "train-model" in (
        run.doc("bad-entrypoint")["failure"]["summary"]
        + " ".join(run.doc("bad-entrypoint")["failure"]["evidence"]["log_lines"])
    )
    host = run.doc("host-oom")["failure"]
    assert host["evidence"]["oom_killed"] is True


def test_successful_job_stored_checkpoints_outputs_and_streamed_its_logs(run: Run) -> None:
    doc = run.doc("train-ok")
    assert [c["name"] for c in doc["checkpoints"]] == [
        "ckpt/step-1.pt",
        "ckpt/step-2.pt",
        "ckpt/step-3.pt",
    ] or len(doc["checkpoints"]) == 3
    assert all(len(c["sha256"]) == 64 for c in doc["checkpoints"])
    assert [o["status"] for o in doc["outputs"]] == ["stored"]
    assert "saved model.pt" in run.result.followed_lines
    logs = run.cli("logs", run.result.ids["train-ok"])
    assert logs.returncode == 0, logs.stderr
    assert "step 1/3" in logs.stdout and "saved model.pt" in logs.stdout


def test_node_lost_is_retried_elsewhere_from_the_checkpoint(run: Run) -> None:
    doc = run.doc(NODE_LOST.key)
    first, second = doc["attempts"]
    assert first["node_id"] != second["node_id"]
    assert first["failure_class"] == "node_lost"
    assert second["resume_from"]["name"].endswith("step-1.pt")
    lines = run.cli("logs", run.result.ids[NODE_LOST.key]).stdout
    assert "resumed from" in lines and "finished" in lines

    per_attempt = {a["attempt"]: a for a in run.accounting(NODE_LOST.key)["attempts"]}
    assert per_attempt[1]["attribution"] == "platform"
    assert per_attempt[1]["credited_gpu_seconds"] > 0
    assert per_attempt[1]["billable_gpu_seconds"] == 0
    assert per_attempt[2]["billable_gpu_seconds"] > 0
    assert per_attempt[2]["credited_gpu_seconds"] == 0


def test_cancel_releases_compute_and_bills_up_to_release(run: Run) -> None:
    doc = run.doc("long-run")
    attempt = doc["attempts"][0]
    assert attempt["released_at"] is not None
    per_attempt = run.accounting("long-run")["attempts"][0]
    assert per_attempt["billable_gpu_seconds"] > 0
    assert per_attempt["released_at"] is not None


def test_explain_and_history_speak_plainly(run: Run) -> None:
    explain = run.cli("explain", run.result.ids["cuda-oom"])
    assert explain.returncode == 0, explain.stderr
    assert "GPU memory" in explain.stdout and "user" in explain.stdout.lower()
    history = run.cli("history", run.result.ids[NODE_LOST.key])
    assert history.returncode == 0, history.stderr
    for event in ("AttemptLost", "RetryScheduled", "JobSucceeded"):
        assert event in history.stdout


def test_a_real_history_replays_offline_and_as_of_shows_the_job_before_it_failed(
    run: Run, tmp_path: Path
) -> None:
    job_id = run.result.ids["cuda-oom"]
    api = run.demo.client_for("cuda-oom")  # what `history JOB -o json` and `--as-of` ask
    exported = api.get(f"/v1/jobs/{job_id}/export")
    path = tmp_path / "history.json"
    path.write_text(json.dumps(exported))
    offline = replay_offline(path)  # no broker, no database, no API where it runs
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert offline.stdout.rstrip().endswith("EQUAL")

    records = exported["jobs"][0]["records"]
    appended = [
        (r["type"], datetime.fromisoformat(r["appended_at"])) for r in records if r["appended_at"]
    ]
    exited = next(at for kind, at in appended if kind == "ProcessExited")
    running = max(at for _, at in appended if at < exited).isoformat()  # the last before it
    then = api.get(f"/v1/jobs/{job_id}?" + urllib.parse.urlencode({"as_of": running}))
    assert then["status"] in ("running", "starting") and then["failure"] is None
    failed_at = next(at for kind, at in appended if kind == "JobFailed").isoformat()
    after = api.get(f"/v1/jobs/{job_id}/explain?" + urllib.parse.urlencode({"as_of": failed_at}))
    assert "What to do next" in after["text"] and "batch size" in after["text"]


def test_every_job_has_exactly_one_terminal_event(run: Run) -> None:
    terminal_types = {
        "JobSucceeded",
        "JobSucceededWithErrors",
        "JobFailed",
        "JobCancelled",
        "JobRejected",
    }
    for key, job_id in run.result.ids.items():
        events = run.demo.client_for(key).get(f"/v1/jobs/{job_id}/events")["events"]
        terminals = [e["type"] for e in events if e["type"] in terminal_types]
        assert len(terminals) == 1, (key, terminals)


def test_replay_verify_agrees_with_the_live_ledger(run: Run) -> None:
    verify = run.cli("replay", "--verify", "--catch-up", "60")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_outputs_live_in_the_object_store_and_a_refused_upload_names_the_stores_error(
    run: Run,
) -> None:
    trained = run.result.ids["train-ok"]
    listing = run.demo.client_for("train-ok").get(f"/v1/jobs/{trained}/artifacts")
    stored = {(a["kind"], a["path"]) for a in listing["artifacts"]}
    assert ("output", "model.pt") in stored
    assert {("checkpoint", f"ckpt/step-{i}.pt") for i in (1, 2, 3)} <= stored
    assert all(a["uri"].startswith("s3://") for a in listing["artifacts"])
    # The store itself refused the revoked credential of the upload-fails job's tenant.
    summary = run.doc("upload-fails")["failure"]["summary"]
    assert "report.txt" in summary and "InvalidAccessKeyId" in summary


def test_submit_follow_prints_the_log_and_exits_with_the_jobs_code(
    run: Run, tmp_path: Path
) -> None:
    following = {}
    for code in (0, 3):  # both at once: each waits for its container
        spec = tmp_path / f"exit-{code}.json"
        spec.write_text(
            json.dumps(
                {
                    "name": f"follow-exit-{code}",
                    "image": "gridledger/busybox:latest",
                    "command": ["sh", "-c", f"echo first line; echo to stderr >&2; exit {code}"],
                    "resources": {"gpus": 1, "memory_gb": 1},
                    "retry": {"max_attempts": 1},
                }
            )
        )
        following[code] = subprocess.Popen(
            [sys.executable, "-m", "services.cli.main", "submit", "-f", str(spec)]
            + ["--timeout", "240"],
            env=run.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for code, process in following.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == code, out + err
        assert out == "first line\n"
        assert "to stderr\n" in err
        assert ("succeeded" if code == 0 else "exited with code 3") in err, err
