"""The web console in headless Chromium, against the real set of services.

One module-scoped installation (sink, API, scheduler, processors, two agents on
the Docker daemon) on its own topics, Postgres schema and API port, as the demo
runs it. The browser signs in with the dev tenant's token, follows a running
job's logs live, reads a failed job's explanation, watches a job whose node is
killed being retried elsewhere, and checks the timeline, the job list and the
fleet page. Screenshots of every page go to the test run's temporary folder
(printed; set GRIDLEDGER_SCREENSHOTS to keep them somewhere else).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import asyncpg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from schemas.views import JOB_STATUSES, TERMINAL_STATUSES, AttemptStatus
from services.api.models import NodeDocument
from services.cli.client import resolve_token
from services.demo.run import Demo
from services.demo.scenarios import BUSYBOX, JOBS, NODE_LOST
from services.ledger.topics import delete_topics, ensure_topics
from services.ops.specs import free_port
from services.settings import Settings, load_settings
from tests.console import a11y, browser
from tests.own_home import with_own_home

pytestmark = pytest.mark.integration

TICKS = 30
TICKER = {
    "name": "ticker",
    "image": BUSYBOX,
    "command": [
        "sh",
        "-c",
        f"for i in $(seq 1 {TICKS}); do echo tick $i; sleep 0.5; done; echo ticker done",
    ],  # fmt: skip
}
# Runs until cancelled; ends at once on SIGTERM (a shell as PID 1 has no default handler).
SLEEPER = {
    "name": "sleeper",
    "image": BUSYBOX,
    "command": ["sh", "-c", "trap 'exit 143' TERM; while true; do sleep 1; done"],
    "resources": {"gpus": 1, "memory_gb": 0.25},
}
MISSING_MODULE = next(j for j in JOBS if j.key == "missing-module")
ROW = "#jobs tr[data-job]"
NODE_STATUS = NodeDocument.model_fields["status"].annotation
STATES_OF_A_SUCCESS = ["submitted", "queued", "scheduled", "starting", "running", "finishing",
                       "succeeded"]  # fmt: skip


@dataclass
class Console:
    settings: Settings
    demo: Demo
    driver: WebDriver
    token: str
    shots: Path

    @property
    def base(self) -> str:
        return f"http://{self.settings.api_host}:{self.settings.api_port}"

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        print(f"screenshot: {path}")
        return path

    def full_shot(self, name: str) -> Path:
        """The whole page, not just the window (resized to the document's height)."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1440, max(1000, int(height) + 40))
        try:
            return self.shot(name)
        finally:
            self.driver.set_window_size(1440, 1000)

    def submit(self, spec: dict[str, Any]) -> str:
        return str(self.demo.client.post("/v1/jobs", json.dumps(spec).encode())["job_id"])

    def job(self, job_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.demo.client.get(f"/v1/jobs/{job_id}")
        return doc

    def text(self, css: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def states(self, lane: str) -> list[str]:
        return [
            str(e.get_attribute("data-state"))
            for e in self.driver.find_elements(By.CSS_SELECTOR, f'[data-lane="{lane}"] .seg')
        ]

    def settled(self, job_id: str) -> bool:
        doc = self.job(job_id)
        return doc["status"] in TERMINAL_STATUSES and bool(
            (doc.get("accounting") or {}).get("final")
        )


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    why = browser.missing()
    if why and os.environ.get("CI"):
        pytest.fail(why)
    if why:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:8]
    settings = with_own_home(
        load_settings(),
        tmp_path_factory.mktemp("console-home"),
        topic_prefix=f"console-{tag}.",
        pg_schema=f"console_{tag}",
        api_port=free_port(),
    )
    shots = Path(os.environ.get("GRIDLEDGER_SCREENSHOTS") or tmp_path_factory.mktemp("screens"))
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots in {shots}")
    asyncio.run(ensure_topics(settings))
    demo = Demo(settings, say=lambda line: print(line, flush=True))
    driver = None
    try:
        demo.start_services()
        driver = browser.start()
        yield Console(settings, demo, driver, resolve_token(settings, None), shots)
    finally:
        if driver is not None:
            driver.quit()
        demo.services.stop()
        asyncio.run(delete_topics(settings))
        asyncio.run(_drop_schema(settings))


async def _drop_schema(settings: Settings) -> None:
    conn = await asyncpg.connect(settings.dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{settings.pg_schema}" CASCADE')
    finally:
        await conn.close()


# --------------------------------------------------------------------------- the tests
# They share the installation and run in file order: sign in first.


def test_sign_in_asks_for_a_token_and_refuses_a_wrong_one(console: Console) -> None:
    driver = console.driver
    console.open("/console")
    driver.execute_script("localStorage.clear()")
    driver.refresh()
    field = browser.wait_for(lambda: driver.find_element(By.ID, "token"), 20, "the sign-in form")
    assert field.accessible_name == "API token", "the field is labelled"
    console.shot("01-sign-in")
    field.send_keys("not-a-token")
    driver.find_element(By.CSS_SELECTOR, "#signin button").click()
    browser.wait_for(
        lambda: "not accepted" in console.text(".signin"), 20, "the wrong token to be refused"
    )
    driver.find_element(By.ID, "token").send_keys(console.token)
    driver.find_element(By.CSS_SELECTOR, "#signin button").click()
    browser.wait_for(lambda: driver.find_elements(By.ID, "jobs"), 20, "the job list")
    assert driver.execute_script("return localStorage.getItem('gridledger.token')") == console.token
    assert "token" in console.text(".who")


def test_a_running_jobs_logs_follow_live_and_the_timeline_shows_each_state(
    console: Console,
) -> None:
    driver = console.driver
    job_id = console.submit(TICKER)
    console.open(f"/console/jobs/{job_id}")
    browser.wait_for(lambda: driver.find_elements(By.ID, "logs"), 30, "the job page")

    def lines() -> int:
        return int(driver.find_element(By.ID, "logs").get_attribute("data-lines") or 0)

    first = browser.wait_for(lambda: lines() >= 3 and lines(), 120, "the first log lines")
    # The log lines come straight from the job's partition; the status from the read model,
    # a poll later.
    browser.wait_for(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, "#head .pill").get_attribute("data-status")
            == "running"
        ),
        30,
        "the page to say running",
    )
    assert "ticker done" not in console.text("#logs")
    assert "following live" in console.text("#logstate")
    console.shot("02-job-running-logs-following")
    # More lines arrive on the same page, without a reload, while the job still runs.
    more = browser.wait_for(lambda: lines() >= first + 4 and lines(), 60, "more lines, live")
    assert more > first and "ticker done" not in console.text("#logs")

    browser.wait_for(
        lambda: "end of logs" in console.text("#logs"),
        120,
        "the stream to end",
        context=lambda: (
            f"job: {console.job(job_id)['status']}; page logs: "
            + driver.execute_script("return document.getElementById('logs').textContent")[-300:]
            + f"; log state: {console.text('#logstate')}"
        ),
    )
    text = console.text("#logs")
    assert [f"tick {i}" in text for i in range(1, TICKS + 1)] == [True] * TICKS
    assert "ticker done" in text and "job succeeded" in text
    browser.wait_for(
        lambda: console.states("job") == STATES_OF_A_SUCCESS,
        60,
        "every state on the timeline",
        context=lambda: f"job lane: {console.states('job')}",
    )
    assert console.states("attempt-1")[:4] == ["scheduled", "starting", "running", "finishing"]
    assert driver.find_elements(By.CSS_SELECTOR, '[data-window="finishing"]')
    events = driver.find_elements(By.CSS_SELECTOR, "#events tbody tr")
    types = [e.get_attribute("data-type") for e in events]
    assert types[0] == "JobSubmitted" and "JobSucceeded" in types
    assert len(driver.find_elements(By.CSS_SELECTOR, '[data-lane="events"] .tick')) == len(types)
    browser.wait_for(lambda: console.text("#accounting").startswith("Final"), 60, "final usage")
    assert float(console.text("#billable")) > 0
    assert "None stored" in console.text("#outbox")
    console.full_shot("03-job-succeeded")


def test_a_failed_job_shows_the_cli_explanation_and_red_status(console: Console) -> None:
    driver = console.driver
    job_id = console.submit(MISSING_MODULE.spec)
    console.open(f"/console/jobs/{job_id}")
    browser.wait_for(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, "#head .pill").get_attribute("data-status")
            == "failed"
        ),
        180,
        "the job to fail",
    )
    explained = browser.wait_for(
        lambda: "What to do next" in console.text("#explain") and console.text("#explain"),
        30,
        "the explanation",
    )
    cli = console.demo.client.get(f"/v1/jobs/{job_id}/explain")["text"]
    assert explained.split() == cli.split(), "the console shows the text the CLI prints"
    assert "transformers" in explained and "Whose side" in explained
    assert console.states("job")[-1] == "failed"
    colour = driver.find_element(By.CSS_SELECTOR, "#head .pill").value_of_css_property("color")
    assert colour == "rgba(203, 33, 45, 1)", colour  # --s-failed (light)
    console.full_shot("04-job-failed-explained")


def test_a_lost_node_shows_two_attempt_lanes_the_waits_and_a_silent_node(
    console: Console,
) -> None:
    driver = console.driver
    demo = console.demo
    job_id = console.submit(NODE_LOST.spec)
    console.open("/console")
    browser.wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, f'tr[data-job="{job_id}"]'), 30, "its row"
    )
    driver.execute_script("window.__noReload = true")
    browser.wait_for(lambda: console.job(job_id).get("checkpoints"), 180, "a first checkpoint")
    node = console.job(job_id)["attempts"][-1]["node_id"]
    demo.kill_node(node)
    row = f'tr[data-job="{job_id}"]'
    pill = f"{row} .pill"
    browser.wait_for(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, pill).get_attribute("data-status")
            in ("lost_contact", "retrying")
            or driver.find_element(By.CSS_SELECTOR, row).get_attribute("data-attempt") == "2"
        ),
        120,
        "the list to show the job losing contact or on its second attempt",
    )
    console.shot("05-jobs-live-during-retry")
    browser.wait_for(lambda: console.settled(job_id), 240, "the retry to finish")
    browser.wait_for(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, pill).get_attribute("data-status") == "succeeded"
        ),
        30,
        "the list to turn succeeded without a reload",
    )
    assert driver.execute_script("return window.__noReload") is True
    assert "node-lost: " in console.text("#changes") and "→ succeeded" in console.text("#changes")
    assert console.driver.find_element(By.ID, "changes").get_attribute("aria-live") == "polite"

    console.open(f"/console/jobs/{job_id}")
    browser.wait_for(lambda: console.states("attempt-2"), 30, "the second attempt's lane")
    job_states = console.states("job")
    for state in ("running", "lost_contact", "retrying", "succeeded"):
        assert state in job_states, f"{state} missing from {job_states}"
    assert console.states("attempt-1")[-1] == "lost"
    labels = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".lane .label")]
    assert any(node in label for label in labels), labels
    lost = driver.find_element(By.CSS_SELECTOR, '[data-window="lost_contact"]')
    assert lost.get_attribute("data-outcome") == "lost"
    assert driver.find_elements(By.CSS_SELECTOR, '[data-window="backoff"]')
    browser.wait_for(lambda: console.text("#accounting").startswith("Final"), 60, "final usage")
    assert float(console.text("#credited")) > 0, "the lost attempt is credited"
    stored = {
        (row.get_attribute("data-path"), row.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text)
        for row in driver.find_elements(By.CSS_SELECTOR, "#outputs tbody tr")
    }
    assert ("model.pt", "output") in stored and ("ckpt/step-1.pt", "checkpoint") in stored
    console.full_shot("06-job-node-lost-retried")

    console.open("/console/fleet")
    card = f'[data-node="{node}"]'
    browser.wait_for(
        lambda: driver.find_element(By.CSS_SELECTOR, card).get_attribute("data-status") == "silent",
        120,
        f"{node} to show silent",
    )
    mine = driver.find_element(By.CSS_SELECTOR, f"{card} .mine")
    assert mine.get_attribute("data-count") == "0", "a lost attempt is not running there"
    assert "unknown" in console.text(card)
    tiles = {
        (t.get_attribute("data-state"), t.text.split()[-1])
        for t in driver.find_elements(By.CSS_SELECTOR, ".gpu")
    }
    assert {state for state, word in tiles if state == word} == {s for s, _ in tiles}, tiles
    assert ("unknown", "unknown") in tiles and {"free", "busy"} & {s for s, _ in tiles}
    console.shot("07-fleet")


def test_the_job_list_filters_by_status_and_pages(console: Console) -> None:
    driver = console.driver
    console.open("/console")
    browser.wait_for(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job]")) >= 3,
        30,
        "the jobs",
    )
    console.shot("08-jobs")
    driver.find_element(By.CSS_SELECTOR, '[data-filter="failed"]').click()
    browser.wait_for(
        lambda: (
            {
                p.get_attribute("data-status")
                for p in driver.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job] .pill")
            }
            == {"failed"}
        ),
        30,
        "only failed jobs",
    )
    assert "filter=failed" in driver.current_url
    pressed = {
        str(c.get_attribute("data-filter")): c.get_attribute("aria-pressed")
        for c in driver.find_elements(By.CSS_SELECTOR, "[data-filter]")
    }
    assert pressed.pop("failed") == "true" and set(pressed.values()) == {"false"}, pressed
    driver.find_element(By.CSS_SELECTOR, '[data-filter="all"]').click()
    browser.wait_for(
        lambda: (
            "succeeded"
            in {
                p.get_attribute("data-status")
                for p in driver.find_elements(By.CSS_SELECTOR, "#jobs tr[data-job] .pill")
            }
        ),
        30,
        "all jobs again",
    )


# --------------------------------------------------------------------------- accessibility


@pytest.fixture(scope="module")
def sleepers(console: Console) -> Iterator[list[str]]:
    """Two jobs that run until cancelled (the polling and the cancel tests)."""
    jobs = [console.submit(SLEEPER), console.submit(SLEEPER)]
    yield jobs
    for job_id in jobs:
        if console.job(job_id)["status"] not in TERMINAL_STATUSES:
            console.demo.client.post(f"/v1/jobs/{job_id}/cancel")


def assert_aa_contrast(console: Console, page: str, dark_shot: str = "") -> None:
    """Every text and control edge of the page as rendered now, in both colour schemes."""
    driver = console.driver
    try:
        for scheme, background in (("light", "rgb(246, 247, 249)"), ("dark", "rgb(13, 17, 23)")):
            a11y.prefer(driver, scheme)
            seen = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
            assert seen == background, f"{page}: the {scheme} theme is not applied ({seen})"
            result = a11y.contrast(driver)
            assert result["texts"] >= 5, f"{page}: hardly any text measured ({result})"
            failures = "\n".join(str(f) for f in result["failures"])
            assert not failures, f"{page} ({scheme}) fails WCAG AA contrast:\n{failures}"
            if scheme == "dark" and dark_shot:
                console.full_shot(dark_shot)
    finally:
        a11y.prefer(driver, "light")


def test_a_hidden_tab_stops_polling_and_catches_up_when_shown(
    console: Console, sleepers: list[str]
) -> None:
    driver = console.driver
    job_id = sleepers[0]
    console.open(f"/console/jobs/{job_id}")
    browser.wait_for(lambda: driver.find_elements(By.ID, "cancel"), 30, "the job page")
    # Captured on the window: before the page's own listener on the document resumes polling.
    driver.execute_script(
        "performance.setResourceTimingBufferSize(100000); window.__seen = [];"
        "window.addEventListener('visibilitychange', () =>"
        " window.__seen.push([document.visibilityState, performance.now()]), true);"
    )
    polls = (
        "return performance.getEntriesByType('resource').filter((e) =>"
        " e.name.includes('/v1/') && !e.name.includes('/logs')).map((e) => [e.startTime, e.name])"
    )

    def asked(after: float = 0) -> list[tuple[float, str]]:
        return [(t, name) for t, name in driver.execute_script(polls) if t > after]

    before = len(asked())
    browser.wait_for(lambda: len(asked()) >= before + 5, 30, "the page to poll its endpoints")
    page = driver.current_window_handle
    driver.switch_to.new_window("tab")  # the job's tab is now in the background
    console.open("/console/fleet")
    nodes = (
        "return performance.getEntriesByType('resource')"
        ".filter((e) => e.name.includes('/v1/nodes')).length"
    )
    # The visible tab goes on polling: its page load and two refreshes (3 s apart) span
    # more than two of the hidden page's 2 s intervals.
    busy = browser.wait_for(
        lambda: driver.find_elements(By.CSS_SELECTOR, ".gpu.busy"), 60, "a sleeper's GPU busy"
    )
    assert all(tile.text.split()[-1] == "busy" for tile in busy), [t.text for t in busy]
    assert_aa_contrast(console, "the fleet with busy GPUs")
    browser.wait_for(lambda: driver.execute_script(nodes) >= 3, 30, "the fleet tab to poll")
    driver.close()
    driver.switch_to.window(page)
    seen = browser.wait_for(
        lambda: (lambda s: len(s) >= 2 and s)(driver.execute_script("return window.__seen")),
        20,
        "the job's tab to be hidden and shown again",
    )
    assert [state for state, _ in seen] == ["hidden", "visible"], seen
    hidden_at, shown_at = seen[0][1], seen[1][1]
    # A refresh under way when the tab was hidden may finish (its later calls start after);
    # none begins (each begins with the job's document).
    while_hidden = [name for t, name in asked(hidden_at) if t < shown_at]
    begun = [name for name in while_hidden if name.endswith(f"/v1/jobs/{job_id}")]
    assert begun == [], f"it polled while hidden: {while_hidden}"
    assert len(while_hidden) < 5, while_hidden
    browser.wait_for(lambda: len(asked(shown_at)) >= 5, 20, "a refresh as soon as it is shown")


def test_cancel_asks_first_then_shows_what_the_api_answered(
    console: Console, sleepers: list[str]
) -> None:
    driver = console.driver
    job_id, other = sleepers
    console.open(f"/console/jobs/{job_id}")
    cancel = browser.wait_for(lambda: driver.find_element(By.ID, "cancel"), 30, "Cancel job")
    dialog = driver.find_element(By.ID, "confirm-cancel")

    def is_open() -> bool:
        return bool(driver.execute_script("return arguments[0].open", dialog))

    def cancels_sent() -> int:
        return int(
            driver.execute_script(
                "return performance.getEntriesByType('resource')"
                ".filter((e) => e.name.endsWith('/cancel')).length"
            )
        )

    cancel.click()
    browser.wait_for(is_open, 10, "the confirmation")
    assert job_id in dialog.text and "cannot be undone" in dialog.text
    focused = driver.switch_to.active_element.get_attribute("id")
    assert focused == "keep", "the safe choice has the focus"
    assert_aa_contrast(console, "the cancel confirmation")
    console.shot("09-cancel-confirmation")
    driver.find_element(By.ID, "keep").click()
    browser.wait_for(lambda: not is_open(), 10, "the dialog to close")
    assert cancels_sent() == 0, "keeping it sent nothing"

    cancel.click()
    browser.wait_for(is_open, 10, "the confirmation again")
    driver.find_element(By.ID, "confirm").click()
    browser.wait_for(
        lambda: "Cancel requested" in console.text("#cancelresult"), 20, "the API's answer"
    )
    browser.wait_for(lambda: cancels_sent() == 1, 10, "one cancel sent")
    browser.wait_for(
        lambda: console.text("#status") == "cancelled" and not cancel.is_displayed(),
        120,
        "the page to say cancelled",
        context=lambda: f"job: {console.job(job_id)['status']}",
    )
    assert driver.find_element(By.ID, "status").get_attribute("aria-live") == "polite"

    # The job ends while the user still decides: the API refuses, and the page says why.
    console.open(f"/console/jobs/{other}")
    browser.wait_for(lambda: driver.find_element(By.ID, "cancel"), 30, "Cancel job").click()
    browser.wait_for(lambda: driver.find_element(By.ID, "confirm").is_displayed(), 10, "dialog")
    console.demo.client.post(f"/v1/jobs/{other}/cancel")
    browser.wait_for(lambda: console.job(other)["status"] == "cancelled", 120, "it to end")
    driver.find_element(By.ID, "confirm").click()
    said = browser.wait_for(
        lambda: (lambda t: "Could not cancel" in t and t)(console.text("#cancelresult")),
        20,
        "the refusal",
    )
    assert f"job {other} is already cancelled; nothing to cancel" in said, said
    assert "error" in str(driver.find_element(By.ID, "cancelresult").get_attribute("class"))
    console.shot("10-cancel-refused")


def test_every_page_meets_wcag_aa_contrast_in_light_and_dark(console: Console) -> None:
    driver = console.driver
    jobs = console.demo.client.get("/v1/jobs?limit=100")["jobs"]
    failed = next(j["job_id"] for j in jobs if j["status"] == "failed")
    retried = next(j["job_id"] for j in jobs if j["name"] == NODE_LOST.spec["name"])
    cancelled = next(j["job_id"] for j in jobs if j["status"] == "cancelled")
    console.open("/console")
    browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ROW), 30, "the jobs")
    # The measure itself: a grey on white the old stylesheet's secondary text had (2.9:1).
    driver.execute_script(
        "const p = document.createElement('p'); p.id = 'probe'; p.textContent = 'probe';"
        "p.style.color = '#8c98a8'; p.style.background = '#fff'; document.body.append(p)"
    )
    probe = [f for f in a11y.contrast(driver)["failures"] if f["text"] == "probe"]
    assert [(f["ratio"], f["need"]) for f in probe] == [(2.93, 4.5)], probe
    driver.execute_script("document.getElementById('probe').remove()")
    states = a11y.add_status_swatches(driver)
    every = {*JOB_STATUSES, *get_args(AttemptStatus), *get_args(NODE_STATUS)}
    assert every - set(states) == set(), "a state the stylesheet gives no colour"
    assert_aa_contrast(console, "the job list with a pill of every state")
    for path, ready, shot in (
        (f"/console/jobs/{failed}", "#explain .h", ""),
        (f"/console/jobs/{retried}", '[data-window="backoff"]', "11-job-retried-dark"),
        (f"/console/jobs/{cancelled}", '#tl [data-state="cancelled"]', ""),
        ("/console/fleet", ".gpu.unknown", ""),
    ):
        console.open(path)
        browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ready), 30, ready)  # noqa: B023
        assert_aa_contrast(console, path, shot)

    driver.execute_script("localStorage.clear()")
    driver.refresh()
    browser.wait_for(lambda: driver.find_element(By.ID, "token"), 20, "the sign-in form").send_keys(
        "not-a-token"
    )
    driver.find_element(By.CSS_SELECTOR, "#signin button").click()
    browser.wait_for(lambda: "not accepted" in console.text(".signin"), 20, "the refusal")
    assert_aa_contrast(console, "the sign-in page with its error")
    assert a11y.unnamed_controls(driver) == []
    driver.execute_script("localStorage.setItem('gridledger.token', arguments[0])", console.token)


def test_controls_are_named_states_are_words_and_ids_copy(console: Console) -> None:
    driver = console.driver
    origin = console.base
    driver.execute_cdp_cmd(
        "Browser.grantPermissions",
        {"origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )

    def clipboard() -> str:
        return str(
            driver.execute_async_script(
                "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0](`${e}`))"
            )
        )

    def copy(css: str) -> str:
        """Click the copy button inside ``css`` (the list re-renders its rows as it polls)."""
        holder = driver.find_element(By.CSS_SELECTOR, css)
        button = holder.find_element(By.CSS_SELECTOR, "button.copy")
        button.click()
        return str(button.get_attribute("data-copy"))

    console.open("/console")
    browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ROW), 30, "the jobs")
    assert a11y.unnamed_controls(driver) == []
    pills = driver.find_elements(By.CSS_SELECTOR, ".pill")
    assert pills and all(p.text.strip() for p in pills), "every status says its name"
    copied = browser.wait_for(lambda: copy(ROW), 10, "a copy button")
    first = driver.find_element(By.CSS_SELECTOR, ROW)
    assert copied == first.get_attribute("data-job")
    browser.wait_for(lambda: clipboard() == copied, 10, f"{copied} on the clipboard")

    job_id = copied
    console.open(f"/console/jobs/{job_id}")
    browser.wait_for(lambda: console.text("#status"), 30, "the job page")
    assert a11y.unnamed_controls(driver) == []
    logs = driver.find_element(By.ID, "logs")
    assert (logs.get_attribute("role"), logs.get_attribute("aria-live")) == ("log", "polite")
    assert driver.find_element(By.ID, "logstate").get_attribute("aria-live") == "polite"
    driver.execute_script("navigator.clipboard.writeText('')")
    browser.wait_for(lambda: copy("#head") == job_id, 10, "the job's copy button")
    browser.wait_for(lambda: clipboard() == job_id, 10, "the id on the clipboard")
    said = driver.find_element(By.CSS_SELECTOR, "#head button.copy")
    assert "Copied" in said.text and said.accessible_name == f"Copied the job id {job_id}"

    console.open("/console/fleet")
    browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, ".gpu"), 30, "the fleet")
    assert a11y.unnamed_controls(driver) == []
    assert driver.find_element(By.ID, "fleetsummary").get_attribute("aria-live") == "polite"
    icon = driver.execute_async_script(
        "const done = arguments[0];"
        "const href = document.querySelector('link[rel=icon]').href;"
        "Promise.all([href, '/favicon.ico'].map((u) => fetch(u).then(async (r) =>"
        " [r.status, r.headers.get('content-type'), [...new Uint8Array(await r.arrayBuffer())"
        ".slice(0, 4)]]))).then(done, (e) => done(`${e}`))"
    )
    assert icon == [[200, "image/x-icon", [0, 0, 1, 0]]] * 2, icon
