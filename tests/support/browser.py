"""A real browser for the web page's tests: Debian's headless Chromium driven by its
ChromeDriver through selenium (scripts/install_browser.sh installs both; nothing is
downloaded by selenium itself, as both paths are given).

Import the fixture into a test module: ``from support.browser import browser  # noqa: F401``.
"""

from __future__ import annotations

import base64
import gc
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Debian's packages chromium and chromium-driver put them here.
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: A laptop's window; the page is laid out for it (and for a phone, see PHONE).
LAPTOP = (1280, 900)
PHONE = (390, 844)
#: Seconds an explicit wait gives the page: it refreshes every 3 s, the daemon answers
#: in milliseconds; generous for a loaded machine.
WAIT_S = 30.0

#: Headless as root on a machine with no network beyond loopback: no sandbox (root),
#: no GPU, and none of Chromium's own connections (updates, sync, field trials), which
#: a closed network refuses at every start.
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
    "--password-store=basic", "--lang=en-US", "--hide-scrollbars",
)


def start_chromium(profile: Path, size: tuple[int, int] = LAPTOP) -> Any:
    """A selenium WebDriver of a fresh headless Chromium with its profile in ``profile``.

    Raises:
        AssertionError: Chromium or its driver is not installed (the sentence says how).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise AssertionError(f"{path} is missing: run scripts/install_browser.sh "
                                 "(Debian's chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={size[0]},{size[1]}")
    # The page's console errors are read by the tests (a failed asset, a script error).
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Selenium polls chromedriver's port with urllib until it answers and leaves the
    # sockets of the refused tries to the garbage collector: their ResourceWarning
    # (an error under our filterwarnings) is selenium's, so it is collected here,
    # under a filter that ignores it, instead of failing whichever test runs next.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        gc.collect()
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for a test module (a start costs about a second)."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    driver = start_chromium(profile)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def full_page_screenshot(driver: Any, path: Path) -> Path:
    """Save the whole page (not only the window: Chromium's DevTools capture beyond the
    viewport) as a PNG at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A window as tall as the page first, so nothing is laid out for a shorter one.
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, int(height))
    try:
        shot = driver.execute_cdp_cmd("Page.captureScreenshot",
                                      {"format": "png", "captureBeyondViewport": True})
    finally:
        driver.set_window_size(*LAPTOP)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def severe_console_lines(driver: Any) -> list[str]:
    """The page's console errors since the last call (script errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]
