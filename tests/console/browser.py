"""Headless Chromium from Debian, driven by Selenium with the system chromedriver.

The driver path is given explicitly, so Selenium Manager never runs (it would
try to download a driver); the browser binary is Debian's ``chromium``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
T = TypeVar("T")


def missing() -> str | None:
    """Why the browser cannot run here (None when it can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file() and shutil.which(Path(path).name) is None:
            return f"{path} is missing: apt-get install -y chromium chromium-driver"
    return None


def start(width: int = 1440, height: int = 1000) -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI and this machine run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        "--lang=en-GB",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def wait_for(
    check: Callable[[], T | None | bool],
    timeout_s: float,
    what: str,
    poll_s: float = 0.25,
    context: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and ``context``)."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value  # type: ignore[return-value]
        except (StaleElementReferenceException, WebDriverException) as exc:
            last = exc
        time.sleep(poll_s)
    seen = context() if context else ""
    raise AssertionError(
        f"timed out after {timeout_s:.0f} s waiting for {what}"
        + (f" (last error: {last})" if last else "")
        + (f"\n{seen}" if seen else "")
    )
