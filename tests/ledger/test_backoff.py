"""The one retry rule: capped exponential backoff with jitter, an outage told in two lines."""

from __future__ import annotations

import logging

import pytest

from services.backoff import Backoff, Outage, retrying, route_client_logs
from services.settings import Settings


def test_delays_grow_to_the_cap_and_jitter_stays_in_the_upper_half():
    backoff = Backoff(initial_s=0.5, cap_s=8.0)
    assert [backoff.nominal(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    for n in range(7):
        low, high = backoff.delay(n, rand=lambda: 0.0), backoff.delay(n, rand=lambda: 1.0)
        assert (low, high) == (backoff.nominal(n) / 2, backoff.nominal(n))
    assert backoff.nominal(10_000) == 8.0  # a day-long outage does not overflow


def test_jitter_spreads_clients_that_lost_the_dependency_together():
    delays = {round(Backoff(1.0, 1.0).delay(0), 6) for _ in range(50)}
    assert len(delays) > 40 and all(0.5 <= d <= 1.0 for d in delays)


@pytest.mark.parametrize(("initial", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_a_backoff_that_cannot_work_is_refused_with_its_values(initial, cap):
    with pytest.raises(ValueError, match=f"got {initial}, {cap}"):
        Backoff(initial, cap)


def test_services_take_the_backoff_from_settings():
    backoff = Settings(reconnect_initial_s=0.1, reconnect_max_s=3.0).reconnect_backoff()
    assert (backoff.initial_s, backoff.cap_s) == (0.1, 3.0)


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(caplog):
    outage = Outage("Postgres at 127.0.0.1:1")
    with caplog.at_level(logging.INFO, logger="gridledger.outage"):
        for i in range(25):
            outage.down(ConnectionRefusedError(f"refused {i}"))
        assert outage.is_down and outage.tries == 25
        outage.up()
        outage.up()  # already back: nothing more to say
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "Postgres at 127.0.0.1:1 is unreachable (ConnectionRefusedError: refused 0)" in lines[0]
    assert "Postgres at 127.0.0.1:1 is back after" in lines[1] and "25 failed tries" in lines[1]
    assert not outage.is_down


async def test_retrying_waits_out_transient_errors_on_the_backoff():
    calls, slept = [], []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionRefusedError("not yet")
        return "done"

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    outage = Outage("Kafka at test")
    result = await retrying(
        flaky,
        outage=outage,
        transient=lambda exc: isinstance(exc, OSError),
        backoff=Backoff(1.0, 4.0),
        sleep=sleep,
    )
    assert result == "done" and len(calls) == 4
    assert [0.5 <= slept[0] <= 1.0, 1.0 <= slept[1] <= 2.0, 2.0 <= slept[2] <= 4.0] == [True] * 3
    assert not outage.is_down


async def test_retrying_raises_a_bug_or_a_bad_configuration_at_once():
    async def broken() -> None:
        raise ValueError("schema name 'X' is not allowed")

    async def sleep(seconds: float) -> None:
        raise AssertionError("a non-transient error must not be retried")

    with pytest.raises(ValueError, match="not allowed"):
        await retrying(
            broken,
            outage=Outage("Postgres"),
            transient=lambda exc: isinstance(exc, OSError),
            backoff=Backoff(),
            sleep=sleep,
        )


def test_a_client_librarys_per_retry_errors_become_the_outages_one_line(caplog):
    library = logging.getLogger("fakeclient")
    child = logging.getLogger("fakeclient.conn")
    outage = Outage("Kafka at 127.0.0.1:2")
    route_client_logs("fakeclient", outage)
    with caplog.at_level(logging.INFO):
        for _ in range(30):
            child.error("Unable connect to node with id 1: [Errno 111] Connect call failed")
            library.error("Unable to update metadata from [1]")
        library.warning("Topic foo is not available during auto-create initialization")
    messages = [r.getMessage() for r in caplog.records]
    assert outage.tries == 60
    assert sum("is unreachable" in m for m in messages) == 1
    from_library = [r.getMessage() for r in caplog.records if r.name.startswith("fakeclient")]
    # What is not about reaching the broker still reaches the log, and only that.
    assert from_library == ["Topic foo is not available during auto-create initialization"]
