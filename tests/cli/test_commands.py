"""The ``gridledger`` job commands against a real API over HTTP (piped: plain output)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services.cli.exits import Exit
from tests.api.conftest import Api
from tests.cli.conftest import gridledger
from tests.sink.scenario import node_facts, run_facts
from tests.waiting import eventually

pytestmark = pytest.mark.integration

SPEC = "name: cli-job\nimage: gridledger/python:latest\ncommand: [python3, train.py]\n"


async def test_submit_status_logs_history_usage_nodes_explain(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec), "--json") == 0
    job_id = json.loads(capsys.readouterr().out)["job_id"]

    await api.ledger.append_many(
        [*node_facts(), *run_facts(job_id, submit=False, exit_code=1).all()]
    )
    await api.sink.catch_up()

    assert await gridledger("status", job_id, "--json") == 0
    assert json.loads(capsys.readouterr().out)["status"] == "failed"
    assert await gridledger("status", job_id) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{job_id}  failed") and "missing_module (user)" in out
    assert await gridledger("status") == 0
    assert job_id in capsys.readouterr().out

    assert await gridledger("logs", job_id) == 0
    assert capsys.readouterr().out.endswith("ModuleNotFoundError: No module named 'transformers'\n")

    assert await gridledger("explain", job_id) == 0
    out = capsys.readouterr().out
    assert "What to do next" in out and "add transformers to the image" in out

    assert await gridledger("history", job_id) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TIME", "(UTC)", "DELTA", "T+", "ATT", "EVENT", "DETAIL"]
    assert "JobSubmitted" in lines[1] and "JobFailed" in lines[-1]

    assert await gridledger("usage", job_id, "--json") == 0
    assert json.loads(capsys.readouterr().out)["final"] is True
    assert await gridledger("usage") == 0
    assert "GPU-seconds billable" in capsys.readouterr().out

    assert await gridledger("nodes") == 0
    assert "node-a" in capsys.readouterr().out

    assert await gridledger("cancel", job_id) == Exit.CONFLICT
    assert "already failed" in capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "\x1b[" not in out + err


async def test_submit_wait_exits_0_only_when_the_job_succeeded(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    for exit_code, expected in ((0, 0), (1, 1)):
        waiting = asyncio.create_task(gridledger("submit", str(spec), "--wait"))
        job_id = None
        for _ in range(200):
            jobs = await (
                await api.client.get("/v1/jobs?status=submitted", headers=api.auth())
            ).json()
            if jobs["jobs"]:
                job_id = jobs["jobs"][0]["job_id"]
                break
            await asyncio.sleep(0.05)
        assert job_id, "the job was not submitted"
        await api.ledger.append_many(
            run_facts(job_id, submit=False, exit_code=exit_code).job_events
        )
        assert await asyncio.wait_for(waiting, 30) == expected
        err = capsys.readouterr().err
        assert f"submitted {job_id}" in err and ("succeeded" if expected == 0 else "failed") in err


async def test_an_invalid_spec_is_reported_field_by_field(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("image: gridledger/python:latest\nresources:\n  gpus: -1\n")
    assert await gridledger("submit", str(spec)) == Exit.INVALID_SPEC
    err = capsys.readouterr().err
    assert "resources.gpus:" in err and "fix: use a value at least 0" in err


async def test_logs_follow_prints_lines_until_the_job_ends(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec)) == 0
    job_id = capsys.readouterr().out.strip()
    script = run_facts(job_id, submit=False, lines=3)
    await api.ledger.append_many(script.job_events[:6])
    following = asyncio.create_task(gridledger("logs", job_id, "-f"))
    await api.ledger.append_many(script.log_chunks)
    printed: list[str] = []

    def all_lines_printed() -> bool:
        printed.append(capsys.readouterr().out)
        return "".join(printed) == "step 0\nstep 1\nstep 2\n"

    await eventually(all_lines_printed, "the followed lines to be printed")
    assert not following.done(), "follow must go on while the job is not over"
    await api.ledger.append_many(script.job_events[6:])
    assert await asyncio.wait_for(following, 20) == 0
    out, err = capsys.readouterr()
    assert "".join(printed) + out == "step 0\nstep 1\nstep 2\n"
    assert "[job succeeded]" in err
