"""`-o name`, `-o jsonpath=EXPR`, `-o wide` wherever -o is offered, and `--timeout` on every
wait (`submit --wait`, `cancel --wait`, `status --watch`, `logs -f`): against a real API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.exits import Exit
from services.cli.jsonpath import JsonPath, JsonPathError
from services.cli.main import main
from tests.api.conftest import Api
from tests.cli.conftest import gridledger
from tests.sink.scenario import node_facts, run_facts

HELLO = str(Path(__file__).resolve().parents[2] / "examples" / "hello.yaml")
SPEC = "name: out-job\nimage: gridledger/python:latest\ncommand: [python3, train.py]\n"

DOC = {"jobs": [{"job_id": "job-a", "n": 1, "failure": None}, {"job_id": "job-b", "n": 2}]}


@pytest.mark.parametrize(
    ("expr", "printed"),
    [
        ("{.jobs[*].job_id}", "job-a\njob-b"),
        ("$.jobs[-1].n", "2"),
        (".jobs[0]['failure']", "null"),
        ("{..n}", "1\n2"),
        ("jobs[5].job_id", ""),  # missing: nothing, as kubectl's default
        ("{.jobs[0]}", '{"job_id": "job-a", "n": 1, "failure": null}'),
    ],
)
def test_jsonpath_picks_like_kubectl(expr: str, printed: str) -> None:
    assert JsonPath.compile(expr).render(DOC) == printed


@pytest.mark.parametrize("expr", ["", "{}", ".jobs[", ".jobs[?(@.n>1)]", "jobs..", "a b"])
def test_jsonpath_outside_the_subset_says_what_it_cannot_read(expr: str) -> None:
    with pytest.raises(JsonPathError):
        JsonPath.compile(expr)


def test_a_bad_output_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", HELLO, "-o", "jsonpath={.jobs[?(@)]}"]) == Exit.USAGE
    assert "cannot read" in capsys.readouterr().err
    assert main(["validate", HELLO, "-o", "xml"]) == Exit.USAGE
    assert (
        "'xml' is none of table, wide, json, yaml, name, jsonpath=EXPR" in capsys.readouterr().err
    )


@pytest.mark.integration
async def test_name_jsonpath_and_wide(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = cli_env
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec), "-o", "name") == 0
    job_id = capsys.readouterr().out.strip()
    assert job_id.startswith("job-")
    assert await gridledger("submit", str(spec), "-o", "jsonpath={.job_id}") == 0
    other = capsys.readouterr().out.strip()
    await api.ledger.append_many(
        [*node_facts(), *run_facts(job_id, submit=False, exit_code=1).all()]
    )
    await api.sink.catch_up()

    assert await gridledger("status", "-o", "name") == 0
    assert capsys.readouterr().out.split() == [other, job_id], "newest first, one a line"
    assert await gridledger("nodes", "-o", "name") == 0
    assert capsys.readouterr().out == "node-a\n"
    assert await gridledger("status", job_id, "-o", "jsonpath={.failure.failure_class}") == 0
    assert capsys.readouterr().out == "missing_module\n"
    assert await gridledger("status", "-o", "jsonpath={[*].status}") == 0
    assert capsys.readouterr().out.split() == ["submitted", "failed"]
    assert await gridledger("usage", job_id, "-o", "jsonpath={.job_id}") == 0
    assert capsys.readouterr().out == f"{job_id}\n"

    assert await gridledger("status") == 0
    narrow = capsys.readouterr().out.splitlines()
    assert await gridledger("status", "-o", "wide") == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].startswith(narrow[0].rstrip()) and "SIDE" in wide[0] and "SUMMARY" in wide[0]
    assert "user" in wide[2] and "missing the Python module 'transformers'" in wide[2]
    assert await gridledger("nodes", "-o", "wide") == 0
    assert "INVENTORY NOTE" in capsys.readouterr().out
    assert await gridledger("explain", job_id, "-o", "wide") == 0  # no wide form: the table
    assert "missing_module" in capsys.readouterr().out


@pytest.mark.integration
async def test_every_wait_gives_up_at_its_timeout_and_says_the_job_goes_on(
    cli_env: Api, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No scheduler runs here: the job stays submitted, so each wait runs into its timeout."""
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    assert await gridledger("submit", str(spec), "--wait", "--timeout", "1s", "-o", "json") == 9
    err = capsys.readouterr().err
    assert "gave up waiting after 1 s (--timeout): job-" in err and "is still submitted" in err
    job_id = err.split("): ")[1].split()[0]
    watch = ("status", job_id, "--watch", "--interval", "0.1")
    assert await gridledger(*watch, "--timeout", "0.5") == Exit.TIMED_OUT
    assert "it goes on (`gridledger status" in capsys.readouterr().err
    assert (
        await gridledger("status", "--watch", "--interval", "0.1", "--timeout", "0.3", "-o", "json")
        == 0
    )
    assert json.loads(capsys.readouterr().out.splitlines()[0])["job_id"] == job_id
    assert await gridledger("logs", job_id, "-f", "--timeout", "0.5") == Exit.TIMED_OUT
    assert f"{job_id} is still not ended; it goes on" in capsys.readouterr().err
    assert await gridledger("cancel", job_id, "--wait", "--timeout", "0.5") == Exit.TIMED_OUT
    assert "is still submitted" in capsys.readouterr().err
    assert await gridledger(*watch, "--timeout", "soon") == Exit.USAGE
    assert "'soon' is no duration" in capsys.readouterr().err
