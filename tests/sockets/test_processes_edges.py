"""Socket tier: make_server(processes=2) at its edges (rpc/processes.py): a child that
outstays its grace in a rolling restart, and the parent's copy of a connection it
handed over.

The handler answers ``echo("pid")`` with the pid of the child that ran it. Every wait
polls with a deadline.
"""

from __future__ import annotations

import os
import select
import signal

from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.multiprocess import processes

from support.rawthrift import call, closed_by_peer, connect, roundtrip, wait_for
from test_server_processes import gone, pid_of_call, serve


class FreezingEcho(EchoHandler):
    """``echo("pid")``: the pid of the child that ran it. ``echo("freeze")``: writes
    that pid to ``report`` (a pipe the test reads), then stops the whole child with
    SIGSTOP. It stands for any child that cannot act on its stop (a handler stuck in
    C code that holds the GIL, a process stopped in a debugger): nothing it runs, not
    even its main thread, can answer the parent or exit."""

    def __init__(self, report: int) -> None:
        self.report = report

    def echo(self, s: str) -> str:
        if s == "freeze":
            os.write(self.report, b"%d\n" % os.getpid())
            os.kill(os.getpid(), signal.SIGSTOP)
        return str(os.getpid()) if s == "pid" else s


def events(entries, name):
    return [e for e in entries if e["event"] == name]


def test_a_rolling_restart_kills_an_old_child_that_outstays_its_grace(demo, logs,
                                                                       monkeypatch):
    # A short grace and slack (read by the parent's reload thread; the old child is
    # told its grace in the stop message), so the kill comes within ~2 s, not 16.
    monkeypatch.setattr(processes, "DEFAULT_STOP_GRACE", 0.5)
    monkeypatch.setattr(processes, "RELOAD_SETTLE", 0.2)
    monkeypatch.setattr(processes, "STOP_SLACK", 1.0)
    report_r, report_w = os.pipe()
    server = serve(demo, FreezingEcho(report_w))
    frozen_client = connect(server.address)
    try:
        old = server.children()
        frozen_client.sendall(call(demo.Echo, "echo", s="freeze"))
        assert select.select([report_r], [], [], 10)[0], "the freezing call was not run"
        frozen = int(os.read(report_r, 64))
        assert frozen in old
        server.reload()
        # Grace (0.7 s with the settle) and slack (1 s) pass, then SIGKILL.
        wait_for(lambda: gone(frozen), timeout=10, what=f"the frozen child {frozen} killed")
        killed = events(logs, "child_killed")
        assert [e["pid"] for e in killed] == [frozen]
        # The parent reaps the child, then logs it: gone() can be true a moment before
        # the line is there.
        wait_for(lambda: frozen in {e["pid"] for e in events(logs, "child_stopped")},
                 timeout=10, what=f"child_stopped for {frozen}")
        stopped = {e["pid"]: e["status"] for e in events(logs, "child_stopped")}
        assert stopped[frozen] == "killed by SIGKILL"
        # Its client's connection died with it (the parent holds no copy of it).
        assert closed_by_peer(frozen_client, wait=5.0)
        # The restart went on to the other slot, and new children serve.
        wait_for(lambda: events(logs, "reload_done"), timeout=10, what="the rolling restart")
        new = server.children()
        assert len(new) == 2 and not set(new) & set(old)
        assert pid_of_call(demo, server.address) in new
        for pid in old:
            wait_for(lambda: gone(pid), what=f"old child {pid} reaped")
    finally:
        frozen_client.close()
        server.stop(grace=5.0)
        os.close(report_r)
        os.close(report_w)


def test_a_connection_closed_by_its_child_reaches_the_client_as_eof(demo):
    """The parent accepts each connection and hands it to a child: once handed, the
    child's is the only copy, so the child closing it (here: idle_timeout) closes it."""
    server = serve(demo, EchoHandler(), idle_timeout=0.5)
    try:
        with connect(server.address) as sock:
            assert roundtrip(sock, call(demo.Echo, "echo", s="hi"),
                             demo.Echo).body.success == "hi"
            assert closed_by_peer(sock, wait=5.0), \
                "no EOF: another process still holds the connection open"
    finally:
        server.stop(grace=5.0)
