"""``nimbus-thrift logs``'s reader (cli/log_reader.py) against a fake of the daemon's log
route on port 0 (support/log_route.py): the last lines, following (a truncated or
replaced log read again from its start), a component's lines, and the answers a wrong
address or a gone topology gives."""

from __future__ import annotations

import re
import threading
from typing import Any, Iterator

import pytest

from nimbus_thrift.cli import log_reader
from nimbus_thrift.cli.log_reader import (LogError, LogSource, TopologyGone,
                                          component_filter, follow, select_lines, tail)
from nimbus_thrift.nimbus.web.logs import LOG_PATH

from support.log_route import TID, FakeLogRoute, serving
from support.rawthrift import refused_port, wait_for


@pytest.fixture
def route() -> Iterator[tuple[FakeLogRoute, str]]:
    fake = FakeLogRoute()
    with serving(fake) as url:
        yield fake, url


def lines(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(n))


# --- the last lines ---------------------------------------------------------------------

def test_the_last_lines_and_where_the_log_ended(route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    fake.write(lines(30) + "half a li")
    with LogSource(url, TID) as with_source:
        check_tail(with_source, fake)


def check_tail(with_source: LogSource, fake: FakeLogRoute) -> None:
    last = tail(with_source, 3)
    assert last.lines == ["line 27\n", "line 28\n", "line 29\n"]
    assert last.partial == "half a li"
    assert last.end == last.size == len(fake.log)
    assert tail(with_source, 0).lines == []
    assert tail(with_source, 100).lines == lines(30).splitlines(keepends=True)


def test_a_log_not_written_yet_is_size_0(route: tuple[FakeLogRoute, str]) -> None:
    with LogSource(route[1], TID) as source:
        last = tail(source, 10)
    assert (last.lines, last.partial, last.size, last.end) == ([], "", 0, 0)


def test_the_tail_reads_backwards_piece_by_piece(route: tuple[FakeLogRoute, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fake, url = route
    monkeypatch.setattr(log_reader, "PIECE_BYTES", 64)
    fake.write(lines(200))
    with LogSource(url, TID) as source:
        last = tail(source, 50)
    assert last.lines == [f"line {i}\n" for i in range(150, 200)]
    assert len(fake.asked) > 5 and fake.asked[0] == (None, 64)
    # Never more than the scan's bound, even when too few lines match.
    fake.asked.clear()
    with LogSource(url, TID) as source:
        last = tail(source, 5, component_filter("nothing"), scan_bytes=640)
    assert last.lines == [] and sum(n for _, n in fake.asked) <= 640 + 64


def test_component_lines_keep_their_traceback(route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    fake.write("INFO tuple of split task 0 stream default: ('a',)\n"
               "INFO tuple of count task 1 stream default: ('a', 1)\n"
               "ERROR bolt 'split' (wordcount.SplitBolt) raised ValueError: bad\n"
               "  File \"wordcount.py\", line 7, in process\n"
               "    raise ValueError('bad')\n"
               "WARN spark.split.size is not a component\n"
               "26/11/28 02:20:22 INFO MicroBatchExecutionContext: Extracting split "
               "progress metrics for split=ForeachBatchSink\n"
               "INFO Streaming query made progress: {\n"
               "  \"split\" : {\n"
               "INFO splitter and split-2 are other names\n"
               "INFO the end\n")
    with LogSource(url, TID) as source:
        last = tail(source, 10, component_filter("split"))
    assert last.lines == [
        "INFO tuple of split task 0 stream default: ('a',)\n",
        "ERROR bolt 'split' (wordcount.SplitBolt) raised ValueError: bad\n",
        "  File \"wordcount.py\", line 7, in process\n",
        "    raise ValueError('bad')\n"]


def test_select_lines_without_a_filter_is_every_line() -> None:
    assert select_lines(["a\n", " b\n"], None) == ["a\n", " b\n"]
    assert select_lines([" b\n", "x a\n", " c\n", "y\n", " d\n"],
                        component_filter("a")) == ["x a\n", " c\n"]


# --- following --------------------------------------------------------------------------

class Printed:
    def __init__(self) -> None:
        self.text = ""
        self.notes: list[str] = []
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.text += text

    def note(self, text: str) -> None:
        with self.lock:
            self.notes.append(text)


def following(source: LogSource, start: int, printed: Printed, **kwargs: Any
              ) -> tuple[threading.Event, threading.Thread, list[BaseException]]:
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            follow(source, start, printed.write, stop, printed.note, poll_s=0.01, **kwargs)
        except BaseException as exc:        # noqa: BLE001 - handed to the test
            failed.append(exc)

    def run_and_close() -> None:
        try:
            run()
        finally:
            source.close()

    thread = threading.Thread(target=run_and_close, daemon=True)
    thread.start()
    return stop, thread, failed


def test_follow_prints_what_is_added_and_rereads_a_truncated_log(
        route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    fake.write(lines(5))
    source = LogSource(url, TID)
    last = tail(source, 2)
    printed = Printed()
    stop, thread, failed = following(source, last.end, printed)
    fake.write("six\nsev")
    wait_for(lambda: printed.text == "six\nsev", what="the added lines")
    fake.write("en\n")
    wait_for(lambda: printed.text == "six\nseven\n", what="the rest of the line")
    # Rotated: a new, shorter file (a relaunch's): read from its start, with a note.
    fake.replace("new 1\n")
    wait_for(lambda: printed.text.endswith("new 1\n"), what="the new file")
    assert len(printed.notes) == 1 and "truncated or replaced" in printed.notes[0]
    fake.write("new 2\n")
    wait_for(lambda: printed.text.endswith("new 1\nnew 2\n"), what="the new file growing")
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and failed == []
    assert printed.text == "six\nseven\nnew 1\nnew 2\n"


def test_follow_with_a_component_judges_whole_lines(route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    fake.write("x count 1\nx spl")
    source = LogSource(url, TID)
    last = tail(source, 10, component_filter("split"))
    assert last.lines == [] and last.partial == "x spl"
    printed = Printed()
    stop, thread, failed = following(source, last.end, printed,
                                     match=component_filter("split"), pending=last.partial)
    fake.write("it 1\n  frame\nx count 2\n  frame of count\nx split 2\n")
    wait_for(lambda: printed.text.endswith("x split 2\n"), what="the split lines")
    stop.set()
    thread.join(5)
    assert printed.text == "x split 1\n  frame\nx split 2\n" and failed == []


def test_a_big_addition_is_read_without_waiting(route: tuple[FakeLogRoute, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fake, url = route
    monkeypatch.setattr(log_reader, "PIECE_BYTES", 16)
    printed = Printed()
    stop, thread, failed = following(LogSource(url, TID), 0, printed)
    fake.write(lines(100))
    wait_for(lambda: printed.text == lines(100), what="every piece")
    stop.set()
    thread.join(5)
    assert failed == []


def test_follow_ends_with_topology_gone(route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    printed = Printed()
    stop, thread, failed = following(LogSource(url, TID), 0, printed)
    fake.status = 404
    thread.join(5)
    assert not thread.is_alive() and len(failed) == 1
    assert isinstance(failed[0], TopologyGone) and TID in str(failed[0])


# --- answers that are not a log ----------------------------------------------------------

def read_once(url: str, tid: str) -> None:
    with LogSource(url, tid) as source:
        source.piece(None)


def test_refusals_and_wrong_addresses_are_one_sentence(route: tuple[FakeLogRoute, str]) -> None:
    fake, url = route
    fake.status = 403
    with pytest.raises(LogError, match=r"refused to show the log \(403: not yours\)"):
        read_once(url, TID)
    fake.status, fake.headers = 200, False
    with pytest.raises(LogError, match="without X-Log-Start and X-Log-Size: is it "
                                       r"nimbus-thrift's web UI \(--ui\)\?"):
        read_once(url, TID)
    with pytest.raises(TopologyGone, match="no topology with id other"):
        read_once(url, "other")
    with refused_port() as port:
        with pytest.raises(LogError, match=rf"cannot reach the daemon's web UI at "
                                           rf"http://127.0.0.1:{port}/ \(.*\): is it"):
            read_once(f"http://127.0.0.1:{port}/", TID)
    with pytest.raises(LogError, match="is not an http:// or https:// URL"):
        LogSource("127.0.0.1:8080", TID)


def test_the_route_path_is_the_daemons() -> None:
    assert log_reader.LOG_PATH == LOG_PATH
    assert re.fullmatch(r"/api/nimbus-thrift/topology/\{id\}/log", LOG_PATH)
