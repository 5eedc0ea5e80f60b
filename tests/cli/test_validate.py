"""`gridledger validate FILE` (offline) and `submit --dry-run` (the fit against the live fleet,
nothing recorded): the same problems as a submit, the scheduler's fit numbers, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.exits import Exit
from services.cli.main import main
from tests.api.conftest import Api
from tests.cli.conftest import gridledger
from tests.sink.scenario import node_facts

REPO = Path(__file__).resolve().parents[2]
BAD = "image: ''\nresources: {gpus: 99, memory_gb: -1}\ncolour: blue\n"


def test_validate_needs_no_api_and_says_what_a_valid_spec_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GRIDLEDGER_API_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.chdir(REPO)
    assert main(["validate", "examples/too-big.yaml"]) == Exit.OK
    assert capsys.readouterr().out == (
        "examples/too-big.yaml: valid; ~560 GiB of GPU memory per GPU "
        "(70B params x 2 bytes bf16 x 4.0 training)\n"
    )
    assert main(["validate", "examples/hello.yaml", "-o", "json"]) == Exit.OK
    checked = json.loads(capsys.readouterr().out)
    assert checked["valid"] is True and checked["spec"]["retry"]["max_attempts"] == 3

    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["validate", str(bad)]) == Exit.INVALID_SPEC
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}: the spec was not accepted:\n")
    for field in ("image", "resources.gpus", "resources.memory_gb", "colour"):
        assert f"  {field}: " in err, field
    assert err.count("    fix: ") == 4

    bad.write_text("image: [unclosed\n")
    assert main(["validate", str(bad)]) == Exit.INVALID_SPEC
    assert "(body): invalid YAML at line 2" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "missing.yaml")]) == Exit.USAGE


@pytest.mark.integration
async def test_dry_run_checks_the_fit_against_the_fleet_and_records_nothing(
    cli_env: Api,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = cli_env
    monkeypatch.chdir(REPO)
    assert await gridledger("submit", "examples/too-big.yaml", "--dry-run") == Exit.OK
    out = capsys.readouterr().out
    assert out.startswith("valid; it would queue (nothing was recorded)\n")
    assert "fit not checked: no node has registered yet" in out

    await api.ledger.append_many(node_facts("node-dry"))  # one A100-80GB
    await api.sink.catch_up()
    assert await gridledger("submit", "examples/too-big.yaml", "--dry-run") == Exit.JOB_FAILED
    out = capsys.readouterr().out
    assert out.startswith("valid, but it would be rejected: does_not_fit")
    assert "~560 GiB" in out and "A100-80GB with 80 GiB" in out
    assert await gridledger("submit", "examples/hello.yaml", "--dry-run", "-o", "json") == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["would"] == "queue" and checked["nodes_checked"] == 1
    assert checked["recorded"] is False and checked["fit"]["fits"] is True

    # An invalid spec: the API's problems are the ones validate finds offline.
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert await gridledger("submit", str(bad), "--dry-run", "-o", "json") == Exit.INVALID_SPEC
    from_api = json.loads(capsys.readouterr().out)
    assert await gridledger("validate", str(bad), "-o", "json") == Exit.INVALID_SPEC
    assert json.loads(capsys.readouterr().out) == from_api
    assert from_api["error"] == "invalid_spec" and len(from_api["problems"]) == 4

    # resume_from another tenant's (or no) job: the submit's 404, before any fit.
    bad.write_text("image: gridledger/python:latest\nresume_from: job-0123456789abcdef\n")
    assert await gridledger("submit", str(bad), "--dry-run") == Exit.NOT_FOUND
    assert "resume_from: no job" in capsys.readouterr().err

    topic = api.settings.topic("job-events")
    assert [r async for r in api.ledger.read_raw(topic)] == [], "a dry run records nothing"
    assert await gridledger("status", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == []
