"""``replay --verify`` on a populated ledger: passes as is, fails when a row is tampered with."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from projections.decisions import settle
from projections.job_state import project
from schemas.events import Event, JobFailed, JobSubmitted
from schemas.spec import JobSpec
from services.cli.main import main
from services.ledger import Ledger, compose
from services.replay.job import replay_job
from services.replay.verify import verify
from services.settings import Settings
from services.sink.consumer import build_sink
from tests.sink.scenario import at, node_facts, run_facts

pytestmark = pytest.mark.integration


def populated() -> list[Event]:
    """Facts of three jobs with the decisions the processors would have appended."""
    out: list[Event] = [*node_facts()]
    for job_id, start, code, exited in (
        ("job-ok", 0, 0, True),
        ("job-bad", 100, 1, True),
        ("job-run", 200, 0, False),
    ):
        script = run_facts(job_id, start=start, exit_code=code, finish=False, exited=exited)
        out += [*settle(script.job_events), *script.log_chunks, *script.meter_ticks]
    return out


async def populate(
    settings: Settings, ledger: Ledger, pool: asyncpg.Pool, after: list[Event] | None = None
) -> None:
    await ledger.append_many([*populated(), *(after or [])])
    sink = await build_sink(settings, ledger, pool)
    task = asyncio.create_task(sink.run())
    try:
        await sink.catch_up()
    finally:
        sink.stop()
        await asyncio.wait_for(task, 10)


async def test_verify_passes_on_a_populated_ledger(pg: tuple[Settings, asyncpg.Pool]) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await populate(settings, ledger, pool)
        report = await verify(settings, ledger, strict=True, catch_up_s=2)
    assert report.ok, "\n".join(report.lines())
    assert report.jobs == 3 and report.records > 30
    assert not report.drift and not report.lag
    assert report.lines()[-1] == "VERIFIED"


async def test_verify_fails_when_a_row_is_tampered_with(pg: tuple[Settings, asyncpg.Pool]) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await populate(settings, ledger, pool)
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE accounting_records SET billable_gpu_seconds = 0 WHERE job_id = 'job-ok'"
            )
            await conn.execute("DELETE FROM log_chunks WHERE job_id = 'job-bad' AND seq = 0")
            await conn.execute("UPDATE jobs SET status = 'succeeded' WHERE job_id = 'job-bad'")
        report = await verify(settings, ledger, catch_up_s=2)
    assert not report.ok
    assert report.table_counts["accounting_records"] == 1
    assert report.table_counts["log_chunks"] == 1
    assert report.table_counts["jobs"] == 1
    assert report.table_counts["job_events"] == 0
    text = "\n".join(report.lines())
    assert "accounting_records job-ok: billable_gpu_seconds: live 0.0 != rebuilt" in text
    assert "log_chunks job-bad/1/stdout/0: in the ledger but missing from the live table" in text
    assert "jobs job-bad: status: live 'succeeded' != rebuilt 'failed'" in text
    assert text.endswith("FAILED")


async def test_decision_drift_is_informational_unless_strict(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    # A job whose terminal decision was written by hand rather than by the rules.
    script = run_facts("job-x", finish=False)
    hand = JobFailed(
        job_id="job-x", attempt=1, occurred_at=at(50), producer="someone", failure_class="unknown"
    )
    async with Ledger(settings, "test") as ledger:
        await ledger.append_many([*script.job_events, hand])
        await populate(settings, ledger, pool)
        relaxed = await verify(settings, ledger, catch_up_s=2)
        strict = await verify(settings, ledger, strict=True, catch_up_s=2)
        replayed = await replay_job(ledger, "job-x")
    assert relaxed.ok and relaxed.drift
    assert {d.kind for d in relaxed.drift if d.job_id == "job-x"} == {"missing", "unexpected"}
    assert not strict.ok
    assert replayed.view is not None and replayed.view.status == "failed"
    assert [e.type for e in replayed.implied] == ["JobSucceeded"]
    assert any("decision drift" in line for line in replayed.lines())


async def test_replay_cli_exit_codes(
    pg: tuple[Settings, asyncpg.Pool],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await populate(settings, ledger, pool)
    monkeypatch.setenv("GRIDLEDGER_TOPIC_PREFIX", settings.topic_prefix)
    monkeypatch.setenv("GRIDLEDGER_PG_SCHEMA", settings.pg_schema)
    args = ["replay", "--verify", "--catch-up", "2"]
    assert await asyncio.to_thread(main, args) == 0
    assert "VERIFIED" in capsys.readouterr().out
    async with pool.acquire() as conn:
        await conn.execute("DELETE FROM job_events WHERE job_id = 'job-ok' AND seq = 2")
    assert await asyncio.to_thread(main, args) == 1
    out = capsys.readouterr().out
    assert "\x1b[" not in out, "no colour codes when not on a terminal"
    assert "job_events" in out and out.rstrip().endswith("FAILED")
    assert await asyncio.to_thread(main, ["replay", "--job", "job-bad"]) == 0
    out = capsys.readouterr().out
    assert "missing_module" in out and "no decision drift" in out


async def test_the_job_state_topic_is_compared_with_the_rebuilt_views(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    async with Ledger(settings, "test") as ledger:
        await populate(settings, ledger, pool)
        histories = {j: await compose.history(ledger, j) for j in ("job-ok", "job-bad", "job-run")}
        await ledger.publish("job-state", "job-ok", project(histories["job-ok"]))
        await ledger.publish("job-state", "job-bad", project(histories["job-bad"][:-2]))
        forged = project(histories["job-run"]).model_copy(update={"status": "succeeded"})
        await ledger.publish("job-state", "job-run", forged)
        report = await verify(settings, ledger, catch_up_s=2)
    assert not report.ok
    assert len(report.job_state_differences) == 1
    assert report.job_state_differences[0].startswith("job-run: ")
    assert "status" in report.job_state_differences[0]
    assert any("earlier point" in note for note in report.job_state_notes)


async def test_a_second_job_submitted_replays_to_the_same_rows(
    pg: tuple[Settings, asyncpg.Pool],
) -> None:
    settings, pool = pg
    intruder = JobSubmitted(
        job_id="job-ok",
        occurred_at=at(1.5),
        producer="api/x",
        tenant="other",
        spec=JobSpec(image="gridledger/python:latest", env={"THEIRS": "1"}),
    )
    async with Ledger(settings, "test") as ledger:
        await populate(settings, ledger, pool, after=[intruder])  # after job-ok's own
        report = await verify(settings, ledger, strict=True, catch_up_s=2)
    assert report.ok, "\n".join(report.lines())
    assert not report.drift
    row = await pool.fetchrow("SELECT tenant, view::text AS view FROM jobs WHERE job_id = 'job-ok'")
    assert row["tenant"] == "dev" and "THEIRS" not in row["view"]
    assert "a second JobSubmitted for this job id; ignored" in row["view"]
