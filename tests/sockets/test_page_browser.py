"""The web page in a real headless Chromium against a real daemon (real sockets, the
HTTP side on a free port) whose launcher is a fake: no Spark, so it runs in seconds.

What the page must do with the daemon's answers: list the topologies, show one with its
components, rates and errors (the whole text, traceback frames included), send the
actions as POSTs carrying the CSRF token, ask before it kills, and show the API's
``errorMessage`` when an action is refused. The Spark tier's tests/spark/test_web_page.py
does the same with a word count really running.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from support.browser import WAIT_S, browser, severe_console_lines  # noqa: F401
from support.nimbus import FakeLauncher, N, make_zip, tcp, wordcount
from support.rawthrift import frame, message, roundtrip
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.security.authz import daemon_principal
from nimbus_thrift.nimbus.launcher import ComponentStats, RunStatus

REPLY = 2
#: An error as the Spark launcher reports it since runner/failures.py keeps the frames.
SPLIT_ERROR = ("bolt 'split' (wordcount.components.SplitBolt) raised ValueError in "
               "process(): an empty sentence\n"
               "Traceback (most recent call last; frames in the topology's code):\n"
               '  File "wordcount/components.py", line 41, in process\n'
               "    return [(w,) for w in words(tup.sentence)]\n"
               '  File "wordcount/text.py", line 7, in words\n'
               "    raise ValueError('an empty sentence')")


class PageLauncher(FakeLauncher):
    """The fake launcher, with a Spark UI address and errors a test can set."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: dict[str, tuple[tuple[str, str, int], ...]] = {}

    def status(self, topology_id: str) -> RunStatus:
        status = super().status(topology_id)
        return RunStatus(state=status.state, detail=status.detail, started_at=1.0,
                         host=status.host, port=status.port,
                         ui_url="http://127.0.0.1:4040", components=status.components,
                         errors=self.errors.get(topology_id, ()))


def rpc(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    args = getattr(N.Nimbus, method + "_args")(**kwargs)
    reply = roundtrip(sock, frame(message(method, 1, args)), N.Nimbus)
    assert reply.type == REPLY, reply
    return reply.body


def submit(daemon: NimbusDaemon, name: str) -> str:
    with tcp(daemon) as sock:
        location = rpc(sock, "beginFileUpload").success
        rpc(sock, "uploadChunk", location=location, chunk=make_zip())
        rpc(sock, "finishFileUpload", location=location)
        rpc(sock, "submitTopology", name=name, uploadedJarLocation=location,
            jsonConf="{}", topology=wordcount())
        return str(rpc(sock, "getTopologySummaryByName", name=name).success.id)


def thrift_status(daemon: NimbusDaemon, topology_id: str) -> str | None:
    """The topology's status as a Thrift client sees it (None: no such topology)."""
    with tcp(daemon) as sock:
        reply = rpc(sock, "getTopologySummary", id=topology_id)
        return None if reply.success is None else str(reply.success.status)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": -1, "port": 0,
                                        "data_dir": str(tmp_path / "data")})
    d = NimbusDaemon(config, launcher=PageLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


def launcher_of(daemon: NimbusDaemon) -> PageLauncher:
    assert daemon.handler is not None
    launcher = daemon.handler.launcher
    assert isinstance(launcher, PageLauncher)
    return launcher


def with_figures(daemon: NimbusDaemon, topology_id: str, rate: float) -> None:
    launcher_of(daemon).stats[topology_id] = {
        "sentences": ComponentStats(emitted=5000, rate=rate, latency_ms=120.0),
        "split": ComponentStats(emitted=40000, processed=5000, rate=rate, latency_ms=120.0),
        "count": ComponentStats(emitted=40000, processed=40000, rate=8 * rate,
                                latency_ms=120.0)}


def until(driver: WebDriver, what: str, check: Callable[[WebDriver], Any]) -> Any:
    # The page redraws its tables at each refresh: an element found just before may be
    # gone (stale) when read; the next poll finds the new one.
    return WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(check, message=f"the page never showed {what}")


def text_of(driver: WebDriver, selector: str) -> str:
    """The rendered text of the first element ``selector`` finds ("" if none), read in
    one step so that a redraw cannot come between finding and reading it."""
    return str(driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
        selector))


def cell(driver: WebDriver, topology_id: str, column: str) -> str:
    return text_of(driver, f'#topologies tr[data-topology-id="{topology_id}"] td.{column}')


def open_page(driver: WebDriver, daemon: NimbusDaemon, topology_id: str = "") -> None:
    assert daemon.ui_url is not None
    driver.get(daemon.ui_url + (f"#topology={topology_id}" if topology_id else ""))
    severe_console_lines(driver)            # forget a previous test's page


def confirm(driver: WebDriver, action: str, wait: int | None = None) -> None:
    """Click an action's button and accept its confirmation dialog."""
    driver.find_element(By.ID, f"action-{action}").click()
    dialog = until(driver, f"the {action} dialog",
                   lambda d: d.find_element(By.ID, "confirm-dialog").get_attribute("open")
                   is not None and d.find_element(By.ID, "confirm-dialog"))
    if wait is not None:
        field = dialog.find_element(By.ID, "confirm-wait")
        field.clear()
        field.send_keys(str(wait))
    dialog.find_element(By.ID, "confirm-ok").click()


def post_from_page(driver: WebDriver, path: str, headers: dict[str, str]) -> tuple[int, Any]:
    """A POST made by the page's own origin (as a script of the page would)."""
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', headers: arguments[1]})"
        ".then(r => r.text().then(t => done([r.status, t])), e => done([0, String(e)]));",
        path, headers)
    return int(result[0]), json.loads(result[1]) if result[1].startswith("{") else result[1]


# -- tests --------------------------------------------------------------------------------

def test_the_table_lists_the_topologies_with_their_figures(browser: WebDriver,
                                                           daemon: NimbusDaemon) -> None:
    first, second = submit(daemon, "wordcount"), submit(daemon, "clicks")
    with_figures(daemon, first, 2500.0)
    with_figures(daemon, second, 40.0)
    open_page(browser, daemon)
    until(browser, "both topologies' rates",
          lambda d: cell(d, first, "rate") == "2,500" and cell(d, second, "rate") == "40")
    assert cell(browser, first, "name") == "wordcount"
    assert cell(browser, second, "name") == "clicks"
    assert cell(browser, first, "status") == "ACTIVE"
    assert cell(browser, first, "owner") == daemon_principal()    # loopback: the OS user
    # wordcount(): split 2 and count 3 executors, and the spout's 1.
    assert (cell(browser, first, "executors"), cell(browser, first, "tasks")) == ("6", "6")
    assert browser.find_element(By.ID, "cluster-topologies").text == "2"
    assert browser.find_element(By.ID, "cluster-spark").text == "local"
    assert browser.find_element(By.ID, "topology").is_displayed() is False
    assert severe_console_lines(browser) == []


def test_one_topology_shows_components_errors_with_frames_and_spark_ui(
        browser: WebDriver, daemon: NimbusDaemon) -> None:
    topology_id = submit(daemon, "wordcount")
    with_figures(daemon, topology_id, 2500.0)
    launcher_of(daemon).errors[topology_id] = (("split", SPLIT_ERROR, int(time.time()) - 90),)
    open_page(browser, daemon)
    until(browser, "the topology's row", lambda d: cell(d, topology_id, "name"))
    browser.find_element(By.CSS_SELECTOR,
                         f'#topologies tr[data-topology-id="{topology_id}"] td.status').click()
    until(browser, "the topology's panel",
          lambda d: d.find_element(By.ID, "topology-name").text == "wordcount")
    assert browser.current_url.endswith(f"#topology={topology_id}")

    def rates(d: WebDriver) -> dict[str, str]:
        return dict(d.execute_script(
            "return [...document.querySelectorAll('#components tbody tr')]"
            ".map(r => [r.dataset.component, r.querySelector('td.rate').innerText]);"))
    assert until(browser, "the components' rates",
                 lambda d: rates(d) if rates(d).get("count") == "20,000" else None) == {
        "sentences": "2,500", "split": "2,500", "count": "20,000"}
    error = until(browser, "the split bolt's error",
                  lambda d: text_of(d, "#errors .error-item pre"))
    assert error == SPLIT_ERROR                # the whole text, frames and all
    assert browser.find_element(By.ID, "topology-spark-ui").get_attribute("href") == \
        "http://127.0.0.1:4040/"
    # The log's link: the route that serves it (nimbus/web/logs.py).
    assert browser.find_element(By.ID, "topology-log").get_attribute("href").endswith(
        f"/api/nimbus-thrift/topology/{topology_id}/log")
    assert text_of(browser, "#topology-status") == "ACTIVE"
    assert not browser.find_element(By.ID, "action-deactivate").get_attribute("disabled")
    assert browser.find_element(By.ID, "action-activate").get_attribute("disabled")


def test_buttons_post_the_actions_with_the_csrf_token(browser: WebDriver,
                                                      daemon: NimbusDaemon) -> None:
    topology_id = submit(daemon, "wordcount")
    open_page(browser, daemon, topology_id)
    until(browser, "ACTIVE", lambda d: text_of(d, "#topology-status") == "ACTIVE")

    # The same POST without the token, from the page's own origin, is refused ...
    status, body = post_from_page(browser, f"/api/v1/topology/{topology_id}/deactivate", {})
    assert status == 403 and "x-csrf-token" in body["errorMessage"]
    (refusal,) = severe_console_lines(browser)     # Chromium logs the failed request
    assert "/deactivate" in refusal and "403" in refusal
    assert thrift_status(daemon, topology_id) == "ACTIVE"
    # ... so the button's, which deactivates, carried it.
    confirm(browser, "deactivate")
    until(browser, "INACTIVE", lambda d: text_of(d, "#topology-status") == "INACTIVE")
    assert cell(browser, topology_id, "status") == "INACTIVE"
    assert thrift_status(daemon, topology_id) == "INACTIVE"
    assert "pause" in launcher_of(daemon).methods(topology_id)
    assert browser.find_element(By.ID, "action-deactivate").get_attribute("disabled")

    confirm(browser, "activate")
    until(browser, "ACTIVE again",
          lambda d: text_of(d, "#topology-status") == "ACTIVE")
    assert thrift_status(daemon, topology_id) == "ACTIVE"
    assert launcher_of(daemon).methods(topology_id)[-1] == "resume"

    confirm(browser, "rebalance", wait=0)
    until(browser, "the rebalance's notice",
          lambda d: d.find_element(By.ID, "notice").text == "Rebalancing wordcount (wait 0 s).")
    until(browser, "the rebalanced topology", lambda d: "rebalance" in
          launcher_of(daemon).methods(topology_id))
    assert severe_console_lines(browser) == []


def test_kill_asks_first_and_cancel_leaves_the_topology_alone(browser: WebDriver,
                                                              daemon: NimbusDaemon) -> None:
    topology_id = submit(daemon, "wordcount")
    open_page(browser, daemon, topology_id)
    until(browser, "ACTIVE", lambda d: text_of(d, "#topology-status") == "ACTIVE")
    browser.find_element(By.ID, "action-kill").click()
    dialog = browser.find_element(By.ID, "confirm-dialog")
    until(browser, "the kill dialog", lambda d: dialog.get_attribute("open") is not None)
    assert dialog.find_element(By.ID, "confirm-title").text == "Kill wordcount?"
    wait = dialog.find_element(By.ID, "confirm-wait")
    assert wait.is_displayed() and wait.get_attribute("value") == "30"
    dialog.find_element(By.ID, "confirm-cancel").click()
    until(browser, "the dialog closed", lambda d: dialog.get_attribute("open") is None)
    # A refresh later, still there and still active; the launcher was not asked to stop.
    refreshed = browser.find_element(By.ID, "updated").text
    until(browser, "a refresh", lambda d: d.find_element(By.ID, "updated").text != refreshed)
    assert thrift_status(daemon, topology_id) == "ACTIVE"
    assert "stop" not in launcher_of(daemon).methods(topology_id)

    # A wait time the API cannot take is refused in the dialog, before any request.
    browser.find_element(By.ID, "action-kill").click()
    until(browser, "the kill dialog again", lambda d: dialog.get_attribute("open") is not None)
    wait.clear()
    wait.send_keys("-5")
    dialog.find_element(By.ID, "confirm-ok").click()
    assert dialog.get_attribute("open") is not None
    assert thrift_status(daemon, topology_id) == "ACTIVE"
    wait.clear()
    wait.send_keys("0")
    dialog.find_element(By.ID, "confirm-ok").click()
    until(browser, "the topology gone from the table",
          lambda d: not d.find_elements(By.CSS_SELECTOR,
                                        f'#topologies tr[data-topology-id="{topology_id}"]'))
    assert thrift_status(daemon, topology_id) is None
    assert "stop" in launcher_of(daemon).methods(topology_id)


def test_a_refused_action_shows_the_apis_error_message(browser: WebDriver,
                                                        daemon: NimbusDaemon) -> None:
    topology_id = submit(daemon, "wordcount")
    open_page(browser, daemon, topology_id)
    until(browser, "ACTIVE", lambda d: text_of(d, "#topology-status") == "ACTIVE")
    browser.find_element(By.ID, "auto-refresh").click()       # the page stays as it is
    # Killed elsewhere (a Thrift client), while the page still offers its buttons.
    with tcp(daemon) as sock:
        rpc(sock, "killTopologyWithOpts", name="wordcount",
            options=N.KillOptions(wait_secs=0))
    until(browser, "nothing: the kill to take effect",
          lambda d: thrift_status(daemon, topology_id) is None)
    confirm(browser, "deactivate")
    shown = until(browser, "the refusal", lambda d: d.find_element(By.ID, "action-error").text)
    expected = f"no topology with id {topology_id!r}"
    assert shown == f"Deactivate wordcount: {expected}"
    # The API's own words: Storm's error JSON's errorMessage, with its 404.
    assert daemon.ui_url is not None
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(
            f"{daemon.ui_url}api/v1/topology/{topology_id}", method="GET"), timeout=10)
    assert refused.value.code == 404
    assert json.loads(refused.value.read())["errorMessage"] == expected
