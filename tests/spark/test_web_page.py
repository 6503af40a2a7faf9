"""The web page in a real headless Chromium, with a word count really running: a
daemon with the Spark launcher (local[2], spark-submit) on 127.0.0.1, its HTTP side on a
free port, examples/wordcount.py submitted by the Python client.

The page must show the topology with non-zero rates, deactivate and activate it with its
buttons (each confirmed in the page's dialog), the status changing on the page and for a
Thrift client alike. A screenshot of the page is saved to $NIMBUS_THRIFT_SCREENSHOT, or
to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon
from support.browser import browser, full_page_screenshot, severe_console_lines  # noqa: F401
from support.spark_daemon import SPARK_TIMEOUT, in_process_daemon

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
#: Where the screenshot goes when the environment names a file.
SCREENSHOT_ENV = "NIMBUS_THRIFT_SCREENSHOT"


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NimbusDaemon]:
    """A NimbusDaemon with the Spark launcher (local[2]), Thrift and HTTP on free ports of
    127.0.0.1. Whatever the test leaves running is stopped afterwards."""
    with in_process_daemon(tmp_path, monkeypatch, ui_port=-1) as (d, _, _):
        yield d


def until(driver: WebDriver, what: str, check: Callable[[WebDriver], Any],
          timeout: float = SPARK_TIMEOUT) -> Any:
    # Tables are redrawn at each refresh: a stale element is looked up again.
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(check, message=f"the page never showed {what}")


def text_of(driver: WebDriver, selector: str) -> str:
    return str(driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
        selector))


def number(text: str) -> float:
    """A figure as the page prints it ("12,345", "7.5", "–" for none: 0)."""
    digits = re.sub(r"[^\d.]", "", text)
    return float(digits) if digits else 0.0


def component_rates(driver: WebDriver) -> dict[str, float]:
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#components tbody tr')]"
        ".map(r => [r.dataset.component, r.querySelector('td.rate').innerText]);")
    return {cid: number(rate) for cid, rate in rows}


def confirm(driver: WebDriver, action: str) -> None:
    driver.find_element(By.ID, f"action-{action}").click()
    dialog = driver.find_element(By.ID, "confirm-dialog")
    until(driver, f"the {action} dialog", lambda d: dialog.get_attribute("open") is not None,
          timeout=30)
    dialog.find_element(By.ID, "confirm-ok").click()


def test_the_page_shows_a_running_word_count_and_pauses_and_resumes_it(
        browser: WebDriver, daemon: NimbusDaemon, tmp_path: Path) -> None:
    assert daemon.handler is not None and daemon.ui_url is not None
    port = daemon.handler.address[1]
    with NimbusClient("127.0.0.1", port, timeout=60, connect_timeout=5) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(tmp_path / "wc.sqlite"),
                             "wordcount.rate": 500},
            wait=True, timeout=SPARK_TIMEOUT)
        browser.get(f"{daemon.ui_url}#topology={topology_id}")
        row = f'#topologies tr[data-topology-id="{topology_id}"]'
        until(browser, "the topology in the table",
              lambda d: text_of(d, f"{row} td.name") == "wordcount")
        assert text_of(browser, f"{row} td.status") == "ACTIVE"
        # Every component moves tuples: the spouts' 2 x 500 sentences/s and the words.
        rates = until(browser, "non-zero rates for every component",
                      lambda d: (r := component_rates(d)) and len(r) == 4
                      and all(v > 0 for v in r.values()) and r)
        assert set(rates) == {"sentences", "split", "count", "sink"}
        until(browser, "the topology's rate in the table",
              lambda d: number(text_of(d, f"{row} td.rate")) > 0)
        assert text_of(browser, "#topology-name") == "wordcount"
        # Its Spark UI is off (unless its conf turns it on): the page links to none.
        assert not browser.find_element(By.ID, "topology-spark-ui").is_displayed()

        confirm(browser, "deactivate")
        until(browser, "INACTIVE", lambda d: text_of(d, "#topology-status") == "INACTIVE")
        assert text_of(browser, f"{row} td.status") == "INACTIVE"
        info = client.getTopologyInfo(topology_id)
        assert info.status == "INACTIVE"
        until(browser, "the Spark application paused",
              lambda d: client.getTopologyInfo(topology_id).sched_status == "paused")

        confirm(browser, "activate")
        until(browser, "ACTIVE again", lambda d: text_of(d, "#topology-status") == "ACTIVE")
        assert client.getTopologyInfo(topology_id).status == "ACTIVE"
        until(browser, "the Spark application running again",
              lambda d: client.getTopologyInfo(topology_id).sched_status == "running")
        until(browser, "the spouts' rate non-zero again",
              lambda d: component_rates(d).get("sentences", 0) > 0)
        until(browser, "the Spark application's detail running again",
              lambda d: text_of(d, "#topology-scheduler").startswith("running:"))
        # A chart per component (from the daemon's history, or what the page has seen).
        until(browser, "a rate chart for every component",
              lambda d: len(d.find_elements(By.CSS_SELECTOR, "#components svg.spark")) == 4)

        shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "web-page.png")
        full_page_screenshot(browser, shot)
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert severe_console_lines(browser) == []
