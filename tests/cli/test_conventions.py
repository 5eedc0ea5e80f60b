"""What a user of kubectl or dstack expects, against a real API over HTTP (piped output):
-o json|yaml on every command, distinct exit codes, login and profiles, filters and
paging, --watch, logs filters, local times, and a cancel that says what it waits for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.events import LogChunk
from services.cli.exits import Exit
from tests.api.conftest import DEV_TOKEN, Api
from tests.cli.conftest import api_url, gridledger
from tests.sink.scenario import at, node_facts, run_facts

pytestmark = pytest.mark.integration

SPEC = "name: conv\nimage: gridledger/python:latest\ncommand: [python3, train.py]\n"


async def submit(api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec)) == 0
    return capsys.readouterr().out.strip()


async def failed_job(api: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    job_id = await submit(api, tmp_path, capsys)
    stderr = LogChunk(
        job_id=job_id,
        attempt=1,
        occurred_at=at(7.05),
        producer="agent/node-a",
        stream="stderr",
        seq=0,
        first_line=1,
        line_count=2,
        data="warn: one\nwarn: two\n",
    )
    await api.ledger.append_many(
        [*node_facts(), *run_facts(job_id, submit=False, exit_code=1).all(), stderr]
    )
    await api.sink.catch_up()
    return job_id


def unstamped(document: Any) -> Any:
    """A document without the time it was made (a history export's ``exported_at``)."""
    if isinstance(document, dict):
        return {k: v for k, v in document.items() if k != "exported_at"}
    return document


async def test_every_api_command_prints_the_same_document_as_json_and_yaml(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = await failed_job(cli_env, tmp_path, capsys)
    commands = [
        ["status"],
        ["status", job_id],
        ["explain", job_id],
        ["history", job_id],
        ["usage"],
        ["usage", job_id],
        ["nodes"],
        ["profiles"],
    ]
    for command in commands:
        assert await gridledger(*command, "-o", "json") == 0, command
        as_json = unstamped(json.loads(capsys.readouterr().out))
        assert await gridledger(*command, "--json") == 0, command
        assert unstamped(json.loads(capsys.readouterr().out)) == as_json, command
        assert await gridledger(*command, "-o", "yaml") == 0, command
        assert unstamped(yaml.safe_load(capsys.readouterr().out)) == as_json, command
    assert await gridledger("explain", job_id, "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["failure"]["failure_class"] == "missing_module"

    assert await gridledger("logs", job_id, "-o", "json") == 0
    chunks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(c["stream"], c["seq"]) for c in chunks} >= {("stdout", 0), ("stderr", 0)}
    assert await gridledger("logs", job_id, "-o", "yaml", "--stream", "stderr") == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["data"] for d in docs] == ["warn: one\nwarn: two\n"]


async def test_exit_codes_tell_failed_not_found_unauthorised_and_conflict_apart(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = await failed_job(cli_env, tmp_path, capsys)
    for command in ("status", "explain", "history", "logs", "usage", "cancel"):
        assert await gridledger(command, "job-000000000000") == Exit.NOT_FOUND, command
    capsys.readouterr()
    assert await gridledger("status", job_id, "--watch", "--interval", "0.1") == Exit.JOB_FAILED
    assert await gridledger("cancel", job_id) == Exit.CONFLICT
    assert "already failed" in capsys.readouterr().err
    assert await gridledger("status", "--token", "tok-wrong") == Exit.NOT_AUTHORISED
    assert "(the token came from --token)" in capsys.readouterr().err

    assert await gridledger("logs", job_id, "--attempt", "7") == Exit.NOT_FOUND
    err = capsys.readouterr().err
    assert f"job {job_id} (failed) has attempt(s) 1; there is no attempt 7" in err
    assert "Traceback" not in err


async def test_login_checks_the_token_then_the_cli_works_from_any_folder(
    api: Api,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    private_config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("GRIDLEDGER_HOME", str(elsewhere / ".gridledger"))  # no local stack
    url = api_url(api)

    code = await gridledger("login", "--api", url, "--token", "tok-wrong")
    assert code == Exit.NOT_AUTHORISED and not private_config.exists()
    assert await gridledger("status") == Exit.NOT_AUTHORISED
    capsys.readouterr()

    assert await gridledger("login", "--api", url, "--token", DEV_TOKEN, "--profile", "t") == 0
    assert f"logged in to {url}; profile 't' saved" in capsys.readouterr().out
    assert DEV_TOKEN in private_config.read_text()
    spec = elsewhere / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec)) == 0
    job_id = capsys.readouterr().out.strip()
    assert await gridledger("status", "-o", "json") == 0
    assert [j["job_id"] for j in json.loads(capsys.readouterr().out)] == [job_id]

    assert await gridledger("profiles", "-o", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["default_profile"] == "t"
    assert DEV_TOKEN not in json.dumps(listed), "tokens are masked"
    assert await gridledger("--profile", "other", "status") == Exit.USAGE
    assert await gridledger("logout") == 0
    assert DEV_TOKEN not in private_config.read_text()
    assert await gridledger("status") == Exit.NOT_AUTHORISED


async def test_status_filters_by_state(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    ids = [await submit(api, tmp_path, capsys) for _ in range(5)]
    await api.ledger.append_many(run_facts(ids[0], submit=False, exit_code=1).job_events)
    await api.sink.catch_up()

    assert await gridledger("status", "--status", "failed", "-o", "json") == 0
    assert [j["job_id"] for j in json.loads(capsys.readouterr().out)] == [ids[0]]
    assert await gridledger("status", "--status", "submitted,failed", "--json") == 0
    assert len(json.loads(capsys.readouterr().out)) == 5
    assert await gridledger("status", "--status", "bogus") == Exit.USAGE
    assert "unknown bogus" in capsys.readouterr().err


async def test_status_pages_on_the_order_key_and_never_skips(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two at a time, every job shows exactly once, newest first, and each page but the
    last says how to get the next (tests/api/test_pagination.py has ids out of order)."""
    api = cli_env
    ids = [await submit(api, tmp_path, capsys) for _ in range(5)]
    seen: list[str] = []
    args = ["status", "--limit", "2", "-o", "json"]
    while True:
        assert await gridledger(*args) == 0
        out, err = capsys.readouterr()
        seen += [j["job_id"] for j in json.loads(out)]
        if not err:
            break
        assert "more exist" in err and len(seen) < len(ids), err
        args = [*args[:5], "--cursor", err.split("--cursor ")[1].split()[0]]
    assert seen == list(reversed(ids)), "each job once, newest first"
    assert await gridledger("status", "--all", "--limit", "1", "--json") == 0
    out, err = capsys.readouterr()
    assert [j["job_id"] for j in json.loads(out)] == list(reversed(ids)) and err == ""


async def test_status_watch_prints_each_change_until_the_job_ends(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    job_id = await submit(api, tmp_path, capsys)
    script = run_facts(job_id, submit=False)
    await api.ledger.append_many(script.job_events[:6])
    await api.sink.catch_up()
    watching = asyncio.create_task(
        gridledger("status", job_id, "--watch", "--interval", "0.1", "-o", "json")
    )
    await api.ledger.append_many(script.job_events[6:])
    assert await asyncio.wait_for(watching, 30) == Exit.OK
    states = [json.loads(line)["status"] for line in capsys.readouterr().out.splitlines()]
    assert states[-1] == "succeeded" and len(states) == len(set(states)), states


async def test_logs_tail_since_stream_and_timestamps(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = await failed_job(cli_env, tmp_path, capsys)
    assert await gridledger("logs", job_id, "--tail", "2") == 0
    out, err = capsys.readouterr()
    assert out == "step 2\nModuleNotFoundError: No module named 'transformers'\n"
    assert await gridledger("logs", job_id, "--tail", "1", "--stream", "stderr") == 0
    assert capsys.readouterr().err == "warn: two\n"
    assert await gridledger("logs", job_id, "--since", "2026-11-30T09:00:07.15Z") == 0
    assert (
        capsys.readouterr().out == "step 2\nModuleNotFoundError: No module named 'transformers'\n"
    )
    assert await gridledger("logs", job_id, "--since", "1m") == 0
    assert capsys.readouterr().out == "", "every chunk was read long before a minute ago"
    assert await gridledger("logs", job_id, "--since", "last week") == Exit.USAGE
    assert "neither a duration" in capsys.readouterr().err

    assert await gridledger("logs", job_id, "--timestamps", "--stream", "stdout") == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "2026-11-30 09:00:07.000 UTC step 0",
        "2026-11-30 09:00:07.100 UTC step 1",
    ]


async def test_logs_tail_zero_follow_shows_only_new_lines(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    job_id = await submit(api, tmp_path, capsys)
    script = run_facts(job_id, submit=False, lines=4)
    await api.ledger.append_many([*script.job_events[:6], *script.log_chunks[:2]])
    await api.sink.catch_up()
    following = asyncio.create_task(gridledger("logs", job_id, "-f", "--tail", "0"))
    # A line only shows once the follow is live: until then each marker may land in the
    # part that --tail 0 cuts, so append new ones until one comes through.
    out = ""
    for seq in range(100, 400):
        marker = script.log_chunks[0].model_copy(update={"seq": seq, "data": f"marker {seq}\n"})
        await api.ledger.append(marker)
        for _ in range(10):
            await asyncio.sleep(0.05)
            out += capsys.readouterr().out
            if "marker" in out:
                break
        if "marker" in out:
            break
    assert "marker" in out, "the follow never delivered a new line"
    await api.ledger.append_many(script.log_chunks[2:])
    await api.ledger.append_many(script.job_events[6:])
    assert await asyncio.wait_for(following, 30) == 0
    out += capsys.readouterr().out
    assert "step 0" not in out and "step 1" not in out, "what --tail 0 cut never comes back"
    assert out.endswith("step 2\nstep 3\n")


async def test_times_are_local_with_their_zone_or_utc(
    cli_env: Api,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job_id = await failed_job(cli_env, tmp_path, capsys)
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    assert await gridledger("history", job_id) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TIME (IST)")
    assert lines[2].startswith("14:30:01.000"), "09:00:01 UTC is 14:30:01 in India"
    assert await gridledger("history", job_id, "--utc") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TIME (UTC)") and lines[2].startswith("09:00:01.000")
    assert await gridledger("nodes") == 0
    assert "LAST HEARTBEAT (IST)" in capsys.readouterr().out


async def test_cancelling_a_running_job_says_it_waits_for_the_stop_grace(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    job_id = await submit(api, tmp_path, capsys)
    await api.ledger.append_many(run_facts(job_id, submit=False).job_events[:6])
    await api.sink.catch_up()
    assert await gridledger("cancel", job_id) == 0
    out = capsys.readouterr().out
    assert f"cancel requested for {job_id} (running)" in out
    assert "stop grace (10 s by default)" in out and "SIGKILL" in out


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; its exit code and output."""
    import os
    import subprocess
    import sys

    main_fd, child_fd = os.openpty()
    os.set_inheritable(child_fd, True)
    child = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", *args],
        stdin=subprocess.DEVNULL,
        stdout=child_fd,
        stderr=child_fd,
        env={**os.environ, **env, "TERM": "xterm-256color", "COLUMNS": "160"},
        close_fds=True,
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main_fd)
    return child.wait(timeout=60), b"".join(chunks).decode(errors="replace")


async def test_a_terminal_gets_rich_tables_and_a_live_watch(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    job_id = await failed_job(cli_env, tmp_path, capsys)
    env = {"GRIDLEDGER_API_URL": api_url(cli_env), "GRIDLEDGER_TOKEN": DEV_TOKEN}
    env["GRIDLEDGER_CONFIG"] = os.environ["GRIDLEDGER_CONFIG"]
    code, out = await asyncio.to_thread(_on_a_terminal, ["status"], env)
    assert code == 0 and job_id in out
    assert "\x1b[" in out, "colours on a terminal"
    code, out = await asyncio.to_thread(
        _on_a_terminal, ["status", job_id, "--watch", "--interval", "0.2"], env
    )
    assert code == Exit.JOB_FAILED
    assert "missing_module" in out and "\x1b[?25l" in out, "rich's live display hides the cursor"
