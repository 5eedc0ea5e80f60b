"""Auditing without the cluster: `history JOB -o json`, `replay --file`, `--as-of`.

Against a real API, Kafka and Postgres (the CLI tests' fixture): the job's facts are
appended to the real ledger, its decisions are the ones the real deciders derive
(``projections.decisions.react_all``, what the processors append), and the sink folds
them into Postgres. The offline replay then runs in a process that can reach neither
Kafka nor Postgres.
"""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from projections.decisions import react_all
from schemas import codec
from schemas.events import EVENT_TYPES, ProcessExited
from services.cli.exits import Exit
from services.ledger import compose
from tests.api.conftest import OTHER_TOKEN, Api
from tests.cli.conftest import gridledger
from tests.offline import replay_offline
from tests.sink.scenario import node_facts, run_facts
from tests.waiting import eventually

pytestmark = pytest.mark.integration

SPEC = "name: audited\nimage: gridledger/python:latest\ncommand: [python3, train.py]\n"


async def _submit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec), "--json") == 0
    job_id: str = json.loads(capsys.readouterr().out)["job_id"]
    return job_id


async def _decide(api: Api, job_id: str) -> None:
    """Append the decisions the real deciders derive from the job's history, as the
    processors do, and let the sink fold everything."""
    while True:  # a decision is a fact the deciders react to in turn (FailureClassified)
        history = await compose.history(api.ledger, job_id)
        recorded = {e.event_id for e in history}
        new = [d for d in react_all(history) if d.event_id not in recorded]
        if not new:
            break
        await api.ledger.append_many(new)
    await api.sink.catch_up()


def _record(doc: dict[str, Any], cls: type) -> dict[str, Any]:
    (found,) = [r for r in doc["jobs"][0]["records"] if r["type"] == cls.__name__]
    return found


async def test_an_exported_history_replays_offline_and_a_tampered_one_does_not(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    job_id = await _submit(tmp_path, capsys)
    script = run_facts(job_id, submit=False, exit_code=1, finish=False)
    await api.ledger.append_many([*node_facts(), *script.all()])
    await _decide(api, job_id)

    assert await gridledger("history", job_id, "-o", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["format"], doc["format_version"]) == ("gridledger-history", 1)
    (job,) = doc["jobs"]
    records = job["records"]
    events = [r for r in records if r["topic"] == api.settings.topic("job-events")]
    ticks = [r for r in records if r["topic"] == api.settings.topic("meter-ticks")]
    assert [r["type"] for r in events][:2] == ["JobSubmitted", "JobQueued"]
    assert events[-1]["type"] == "JobFailed" and len(ticks) == 3
    offsets = [r["offset"] for r in events]
    assert offsets == sorted(offsets) and len({r["partition"] for r in events}) == 1
    for r in records:  # every record names a schema the file holds, and is its bytes
        described = doc["schemas"][r["fingerprint"]]
        assert described["name"] == r["type"]
        assert codec.fingerprint_hex(codec.fingerprint(described["schema"])) == r["fingerprint"]
        decoded = codec.decode_event(base64.b64decode(r["avro"]))
        assert decoded == EVENT_TYPES[r["type"]].model_validate(r["payload"])
    assert all(r["appended_at"] for r in events)  # job-events carry the broker's time
    live = job["live"]
    assert live["view"]["status"] == "failed" and live["accounting"]["final"] is True
    assert "billable_cost" not in live["accounting"] and "currency" in live["money"]
    assert [c["failure_class"] for c in live["classification"]] == ["missing_module"]
    assert [d["type"] for d in live["decisions"]] == ["FailureClassified", "JobFailed"]

    exported = tmp_path / "history.json"
    exported.write_text(json.dumps(doc))
    done = replay_offline(exported)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok   {job_id}: " in done.stdout and "replayed failed" in done.stdout
    assert done.stdout.rstrip().endswith("EQUAL")

    # An event changed, its Avro bytes re-encoded to match: only the refold can tell.
    tampered = copy.deepcopy(doc)
    exit_record = _record(tampered, ProcessExited)
    exit_record["payload"]["exit_code"] = 0
    changed = ProcessExited.model_validate(exit_record["payload"])
    exit_record["avro"] = base64.b64encode(codec.encode(changed)).decode()
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(tampered))
    assert await gridledger("replay", "--file", str(path), "-o", "json") == 1
    report = json.loads(capsys.readouterr().out)
    where = {d["where"]: d for d in report["jobs"][0]["differences"]}
    assert where["jobs[0].view.attempts[0].exit_code"]["exported"] == 1
    assert where["jobs[0].view.attempts[0].exit_code"]["replayed"] == 0
    assert "jobs[0].decisions[0].type" in where  # the rules no longer classify a failure

    # A payload edited without its bytes: the record no longer says what its bytes say.
    edited = copy.deepcopy(doc)
    _record(edited, ProcessExited)["payload"]["exit_code"] = 0
    path.write_text(json.dumps(edited))
    assert await gridledger("replay", "--file", str(path)) == 1
    out = capsys.readouterr().out
    index = edited["jobs"][0]["records"].index(_record(edited, ProcessExited))
    assert f"jobs[0].records[{index}].payload.exit_code: exported 0, replayed 1" in out
    assert out.rstrip().endswith("DIFFERENT")

    path.write_text('{"format": "something else"}')
    assert await gridledger("replay", "--file", str(path)) == 1
    assert "not a gridledger-history file" in capsys.readouterr().out

    # --all makes one file of every job of the tenant; --since leaves out older ones.
    assert await gridledger("history", "--all", "-o", "json") == 0
    assert [j["job_id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == [job_id]
    assert await gridledger("history", "--all", "--since", "0s", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == []
    assert await gridledger("history") == Exit.USAGE
    assert await gridledger("history", job_id, "--since", "1h") == Exit.USAGE

    # Another tenant's token cannot export the job (it looks like no job at all).
    assert await gridledger("history", job_id, "-o", "json", "--token", OTHER_TOKEN) == (
        Exit.NOT_FOUND
    )


async def test_as_of_shows_what_the_ledger_knew_then(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    before = datetime.now(UTC)
    await eventually(lambda: datetime.now(UTC) > before, what="the clock to move on")
    job_id = await _submit(tmp_path, capsys)
    script = run_facts(job_id, submit=False, exit_code=1, finish=False)
    exited = next(i for i, e in enumerate(script.job_events) if isinstance(e, ProcessExited))
    await api.ledger.append_many([*node_facts(), *script.job_events[:exited]])
    await api.sink.catch_up()
    running = datetime.now(UTC)
    await eventually(lambda: datetime.now(UTC) > running, what="the clock to move on")
    await api.ledger.append_many([*script.job_events[exited:], *script.meter_ticks])
    await _decide(api, job_id)

    assert await gridledger("status", job_id, "--as-of", running.isoformat(), "--json") == 0
    then = json.loads(capsys.readouterr().out)
    assert then["status"] == "running" and then["failure"] is None
    assert then["as_of"] == running.isoformat()
    assert await gridledger("explain", job_id, "--as-of", running.isoformat()) == 0
    out = capsys.readouterr().out
    assert "running" in out and "Running." in out and "What to do next" not in out
    assert f"As of {running.isoformat()}" in out

    now = datetime.now(UTC).isoformat()
    assert await gridledger("explain", job_id, "--as-of", now) == 0
    out = capsys.readouterr().out
    assert await gridledger("explain", job_id) == 0
    headline, as_of_line, *rest = out.splitlines()
    assert as_of_line == f"As of {now}: what the ledger held then, not what came after."
    assert [headline, *rest] == capsys.readouterr().out.splitlines()  # the live explanation
    assert "failed" in headline and "What to do next" in rest and "transformers" in out
    assert await gridledger("status", job_id, "--as-of", now, "--json") == 0
    known = json.loads(capsys.readouterr().out)
    assert known["failure"]["failure_class"] == "missing_module"
    assert known["accounting"]["final"] is True
    assert await gridledger("status", job_id, "--json") == 0
    live = json.loads(capsys.readouterr().out)
    assert known.pop("as_of") == now and known == live  # all of it known now: the live view

    assert await gridledger("status", job_id, "--as-of", before.isoformat()) == Exit.NOT_FOUND
    assert "was not on the ledger yet at" in capsys.readouterr().err
    assert await gridledger("status", "--as-of", now) == Exit.USAGE

    headers = api.auth()
    answer = await api.client.get(f"/v1/jobs/{job_id}?as_of=2026-12-01T10:00", headers=headers)
    assert answer.status == 422
    problem = await answer.json()
    assert problem["problems"][0]["field"] == "as_of"
    other = api.auth(OTHER_TOKEN)
    answer = await api.client.get(f"/v1/jobs/{job_id}", params={"as_of": now}, headers=other)
    assert answer.status == 404
    answer = await api.client.get(f"/v1/jobs/{job_id}/export", headers=other)
    assert answer.status == 404
