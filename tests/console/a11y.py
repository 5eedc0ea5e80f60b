"""Accessibility checks the console's browser tests run on the rendered pages.

The measuring is JavaScript in the page (``a11y.js``): it reads the computed colours
the browser resolved, so the stylesheet's variables, ``color-mix()`` and the active
theme are what gets measured, not a copy of the palette.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

SCRIPT = (Path(__file__).parent / "a11y.js").read_text()
CONTROLS = "input, select, textarea, button, a[href]"


def contrast(driver: WebDriver) -> dict[str, Any]:
    """``{"failures": [...], "texts": n, "controls": n}`` for the page as it is now."""
    result: dict[str, Any] = driver.execute_script(SCRIPT + "\nreturn contrast();")
    return result


def add_status_swatches(driver: WebDriver) -> list[str]:
    """A pill of every state the stylesheet colours, appended to the page; their names."""
    states: list[str] = driver.execute_script(SCRIPT + "\nreturn statusSwatches();")
    return states


def prefer(driver: WebDriver, scheme: str) -> None:
    """The system's colour scheme as the page sees it (``prefers-color-scheme``)."""
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )


def unnamed_controls(driver: WebDriver) -> list[str]:
    """Controls the browser computes no accessible name for (what a screen reader says)."""
    return [
        str(e.get_attribute("outerHTML"))[:120]
        for e in driver.find_elements(By.CSS_SELECTOR, CONTROLS)
        if e.is_displayed() and not (e.accessible_name or "").strip()
    ]
