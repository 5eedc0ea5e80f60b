"""``gridledger logs -f`` resumes after a dropped connection: every line once, none lost.

The CLI follows a real API (own topics and schema, the sink in-process) through a
forwarder that drops the connection mid-stream and refuses new ones for a while,
as a restarted API process would; lines appended meanwhile arrive after the
reconnect. What it printed is compared with the stored log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.api.conftest import Api
from tests.cli.conftest import gridledger
from tests.cli.test_conventions import submit
from tests.cutter import Cutter
from tests.sink.scenario import run_facts
from tests.waiting import eventually

pytestmark = pytest.mark.integration


async def test_a_dropped_follow_resumes_after_the_last_line_with_no_gap_and_no_repeat(
    cli_env: Api,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = cli_env
    job_id = await submit(api, tmp_path, capsys)
    script = run_facts(job_id, submit=False, lines=10)
    chunks = script.log_chunks
    await api.ledger.append_many([*script.job_events[:6], *chunks[:4]])
    await api.sink.catch_up()

    server = api.client.server
    cutter = await Cutter((str(server.host), int(server.port or 0))).start()
    monkeypatch.setenv("GRIDLEDGER_API_URL", cutter.url)
    printed: list[str] = []
    said: list[str] = []

    def printed_through(n: int) -> bool:
        out, err = capsys.readouterr()
        printed.append(out)
        said.append(err)
        return "".join(printed).endswith(f"step {n}\n")

    try:
        following = asyncio.create_task(gridledger("logs", job_id, "-f", "--tail", "3"))
        await eventually(lambda: printed_through(3), "the first lines to be printed")
        cutter.cut()  # mid-stream, and new connections refused
        await api.ledger.append_many(chunks[4:8])
        await api.sink.catch_up()
        cutter.let_through()
        await eventually(lambda: printed_through(7), "the lines appended while it was cut off")
        await api.ledger.append_many([*chunks[8:], *script.job_events[6:]])
        assert await asyncio.wait_for(following, 60) == 0
    finally:
        await cutter.close()
    out, err = capsys.readouterr()
    # --tail 3 of the first four lines, then every later line once, in order.
    assert "".join(printed) + out == "".join(f"step {i}\n" for i in range(1, 10))
    assert cutter.connections >= 2
    stderr = "".join(said) + err
    assert stderr.count("connection to the API lost") == 1, stderr
    assert "[job succeeded]" in stderr
