"""The socket-free parts of make_server(processes=N) (rpc/supervision.py): options per
child, the metrics sum, the restart back-off, exit statuses in words, the control
messages and the child's state table; and what make_server builds before any fork.
(tests/sockets/test_server_processes.py forks real children.)"""

from __future__ import annotations

import dataclasses
import math
import signal
import socket
import threading
import time

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler, demo_thrift
from nimbus_thrift.rpc.multiprocess import children as children_module
from nimbus_thrift.rpc.multiprocess import control
from nimbus_thrift.rpc.multiprocess.children import Tally
from nimbus_thrift.rpc.multiprocess.control import (CONTROL_MAX, FINAL_SEQ, Farewell, MethodsReply,
                                       decode_methods, encode_methods)
from nimbus_thrift.rpc.methodstats import BUCKETS, MethodSnapshot, bucket_of
from nimbus_thrift.rpc.metrics import MetricsSnapshot
from nimbus_thrift.rpc.options import OptionError, ServerOptions
from nimbus_thrift.rpc.multiprocess.processes import Child, ProcessServer
from nimbus_thrift.rpc.backoff import Backoff
from nimbus_thrift.rpc.server import Server
from nimbus_thrift.rpc.multiprocess.supervision import (CUMULATIVE_FIELDS, ChildState, RestartBackoff, add_retired,
                                           check_processes, child_options, decode_snapshot,
                                           describe_status, encode_snapshot, sum_snapshots)
from nimbus_thrift.rpc.multiprocess.supervision import newer_stats, sum_methods


def snapshot(**values: int) -> MetricsSnapshot:
    fields = {f.name: 0 for f in dataclasses.fields(MetricsSnapshot)}
    fields.update(values)
    return MetricsSnapshot(**fields)


# ----------------------------------------------------------------------- options


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", None])
def test_processes_must_be_a_positive_integer(bad):
    with pytest.raises(OptionError, match=r"processes must be a positive integer, not "):
        check_processes(bad, ServerOptions())


def test_processes_refuse_a_unix_socket_they_would_remove_from_each_other():
    with pytest.raises(OptionError, match="unix_socket cannot be used with processes=2"):
        check_processes(2, ServerOptions(unix_socket="/tmp/x.sock"))
    assert check_processes(1, ServerOptions(unix_socket="/tmp/x.sock")) == 1


def test_make_server_with_one_process_is_todays_server():
    demo = demo_thrift()
    server = nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0)
    assert type(server) is Server
    server = nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, processes=1)
    assert type(server) is Server


def test_make_server_with_processes_validates_before_forking():
    demo = demo_thrift()
    with pytest.raises(OptionError, match="processes must be a positive integer, not 0"):
        nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, processes=0)
    with pytest.raises(OptionError, match="processes must be a positive integer, not True"):
        nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, processes=True)
    server = nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, processes=3,
                                       max_read_buffer_bytes=3000)
    assert isinstance(server, ProcessServer)
    assert server.child_options.max_read_buffer_bytes == 1000
    assert server.children() == []   # nothing forked before start()


def test_child_options_divide_the_memory_budgets_and_keep_the_rest():
    opts = ServerOptions(max_read_buffer_bytes=1000, max_unsent_reply_bytes=900,
                         max_frame_size=100, worker_threads=8, max_connections=50)
    child = child_options(opts, 4)
    assert child.max_read_buffer_bytes == 250
    assert child.max_unsent_reply_bytes == 225
    # The default per-peer share is resolved against the whole budget, then divided.
    assert opts.peer_read_share == 250
    assert child.max_read_buffer_bytes_per_peer == 62
    assert (child.worker_threads, child.max_connections, child.max_frame_size) == (8, 50, 100)


def test_child_options_keep_a_given_per_peer_share_divided_and_never_zero():
    opts = ServerOptions(max_read_buffer_bytes=3, max_read_buffer_bytes_per_peer=2,
                         max_unsent_reply_bytes=1)
    child = child_options(opts, 4)
    assert (child.max_read_buffer_bytes, child.max_read_buffer_bytes_per_peer,
            child.max_unsent_reply_bytes) == (1, 1, 1)


# ----------------------------------------------------------------------- metrics


def test_sum_adds_every_field_and_the_retired_counters():
    a = snapshot(connections_open=2, requests_completed=10, read_buffer_budget=100)
    b = snapshot(connections_open=3, requests_completed=5, read_buffer_budget=100,
                 requests_failed=1)
    total = sum_snapshots([a, b], {"requests_completed": 7})
    assert total.connections_open == 5
    assert total.requests_completed == 22
    assert total.requests_failed == 1
    assert total.read_buffer_budget == 200


def test_only_cumulative_counters_outlive_a_child():
    retired: dict[str, int] = {}
    add_retired(retired, snapshot(requests_completed=4, connections_open=9,
                                  bytes_reserved=100, connections_accepted=2))
    add_retired(retired, snapshot(requests_completed=1))
    assert retired["requests_completed"] == 5
    assert retired["connections_accepted"] == 2
    # Levels leave with the child that held them.
    assert "connections_open" not in retired and "bytes_reserved" not in retired
    assert set(retired) == set(CUMULATIVE_FIELDS)


def test_snapshot_messages_round_trip_and_refuse_the_wrong_answer():
    snap = snapshot(requests_completed=3, connections_open=1)
    message = encode_snapshot(b"metrics", snap, 7)
    assert message.startswith(b"metrics 7 {")
    assert decode_snapshot(message, b"metrics", 7) == snap
    # A late answer to an earlier request is not taken for this one.
    assert decode_snapshot(message, b"metrics", 8) is None
    assert decode_snapshot(message, b"bye") is None
    bye = encode_snapshot(b"bye", snap)
    assert decode_snapshot(bye, b"bye") == snap
    assert decode_snapshot(b"bye {not json", b"bye") is None
    assert decode_snapshot(b'bye {"no_such_field": 1}', b"bye") is None
    assert decode_snapshot(b"ready", b"bye") is None


# ----------------------------------------------------------------------- restarts


def test_backoff_doubles_to_its_cap_and_resets_after_a_long_life():
    backoff = RestartBackoff(Backoff(initial=0.1, factor=2.0, cap=0.5), reset_after=10.0)
    assert [backoff.after_exit(0.0) for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    # A child that served longer than reset_after was not part of the crash loop.
    assert backoff.after_exit(10.0) == 0.1
    assert backoff.after_exit(1.0) == 0.2


def test_exit_statuses_in_words():
    assert describe_status(3 << 8) == "exit status 3"
    assert describe_status(0) == "exit status 0"
    assert describe_status(signal.SIGKILL) == "killed by SIGKILL"
    assert describe_status(signal.SIGSEGV) == "killed by SIGSEGV"


def test_child_states_follow_the_table():
    a, b = socket.socketpair()
    try:
        child = Child(0, 12345, a, b, -1)
        assert child.state is ChildState.STARTING
        child.move(ChildState.SERVING)
        with pytest.raises(RuntimeError, match="serving -> starting is not a transition"):
            child.move(ChildState.STARTING)
        child.move(ChildState.STOPPING)
        with pytest.raises(RuntimeError, match="stopping -> serving"):
            child.move(ChildState.SERVING)
        child.move(ChildState.EXITED)
        with pytest.raises(RuntimeError, match="exited -> exited"):
            child.move(ChildState.EXITED)
    finally:
        a.close()
        b.close()


# ----------------------------------------------------------------------- per-method figures
# The control messages of method_metrics() (rpc/control.py), their sums (supervision.py)
# and the parent's tally of them (children.py), against fake children: the child's end
# of a real SEQPACKET pair, with the answers queued before the parent asks.


def figures(ok: int = 0, declared: int = 0, failed: int = 0, secs: float = 0.001,
            seconds_sum: float | None = None) -> MethodSnapshot:
    """A method's figures with every timed call (ok + declared) in ``secs``'s bucket."""
    buckets = [0] * (len(BUCKETS) + 1)
    buckets[bucket_of(secs)] = ok + declared
    return MethodSnapshot({"ok": ok, "declared": declared, "failed": failed}, tuple(buckets),
                          (ok + declared) * secs if seconds_sum is None else seconds_sum)


def joined(messages: list[bytes], seq: int) -> dict[str, MethodSnapshot] | None:
    reply = MethodsReply(seq)
    assert all(reply.feed(m) for m in messages)
    assert reply.complete
    return reply.figures


def test_methods_messages_round_trip_in_one_part():
    table = {"echo": figures(ok=3, failed=1), "fail": figures(declared=2, secs=0.3)}
    messages, omitted = encode_methods(7, table)
    assert omitted == 0
    assert len(messages) == 1 and messages[0].startswith(b"methods 7 0 1 {")
    assert joined(messages, 7) == table


def test_methods_messages_past_the_cap_go_in_parts_that_join_up():
    # Long names make the JSON several times CONTROL_MAX: no message may pass it.
    table = {f"method_{i:05d}_" + "x" * 200: figures(ok=i, secs=0.002) for i in range(1000)}
    messages, omitted = encode_methods(12, table)
    assert omitted == 0
    assert len(messages) > 3
    assert all(len(m) <= CONTROL_MAX for m in messages)
    assert [m.split(b" ", 4)[2:4] for m in messages] == \
        [[b"%d" % i, b"%d" % len(messages)] for i in range(len(messages))]
    assert joined(messages, 12) == table


def test_methods_over_the_part_limit_send_the_busiest(monkeypatch, logs):
    monkeypatch.setattr(control, "METHODS_MAX_PARTS", 1)
    table = {f"m{i:04d}_" + "y" * 300: figures(ok=i + 1) for i in range(400)}
    messages, omitted = encode_methods(3, table)
    assert len(messages) == 1 and len(messages[0]) <= CONTROL_MAX
    sent = joined(messages, 3)
    assert sent is not None and omitted > 0 and len(sent) + omitted == len(table)
    least_sent = min(f.outcomes["ok"] for f in sent.values())
    # Every method left out was called fewer times than every method sent.
    assert all(f.outcomes["ok"] < least_sent for n, f in table.items() if n not in sent)
    assert all(sent[n] == table[n] for n in sent)


def test_a_methods_reply_skips_late_garbled_and_out_of_turn_parts():
    table = {"echo": figures(ok=5)}
    late, _ = encode_methods(4, {"echo": figures(ok=1)})
    current, _ = encode_methods(5, table)
    reply = MethodsReply(5)
    # An answer to an earlier request that came late is not this one.
    assert not reply.feed(late[0])
    for garbled in (b"methods 5", b"methods x 0 1 {}", b"methods 5 0 -1 {}",
                    b"methods 5 1 1 {}", b"metrics 5 {}", b"bye {}", b""):
        assert not reply.feed(garbled), garbled
    assert not reply.complete
    assert reply.feed(current[0]) and reply.complete and reply.figures == table
    # Complete: nothing more is taken, not even the same answer again.
    assert not reply.feed(current[0])


def test_a_methods_reply_refuses_a_part_count_over_the_limit_before_keeping_it():
    reply = MethodsReply(1)
    assert not reply.feed(b"methods 1 0 %d {" % (control.METHODS_MAX_PARTS + 1))
    assert not reply.feed(b"methods 1 0 99999999999999999999 {")
    assert reply._parts == [] and not reply.complete


def test_a_methods_reply_with_a_missing_part_never_completes():
    table = {f"m{i}_" + "z" * 300: figures(ok=1) for i in range(500)}
    messages, _ = encode_methods(2, table)
    assert len(messages) >= 3
    reply = MethodsReply(2)
    assert reply.feed(messages[0])
    assert not reply.feed(messages[2])          # the second never came
    assert not reply.complete
    # A new first part starts the answer over (the parent ignores what came before).
    assert all(reply.feed(m) for m in messages)
    assert reply.complete and reply.figures == table


@pytest.mark.parametrize("body", [
    b"{not json", b"[]", b'{"a": 1}', b'{"a": [[1, 0, 0], [0], 0.1]}',
    b'{"a": [[1, 0], [%s], 0.1]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b'{"a": [[-1, 0, 0], [%s], 0.1]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b'{"a": [[true, 0, 0], [%s], 0.1]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b'{"a": [[1, 0, 0], [%s], NaN]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b'{"a": [[1, 0, 0], [%s], -1.0]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b'{"a": [[1, 0, 0], [%s], "1"]}' % b",".join([b"0"] * (len(BUCKETS) + 1)),
    b"[" * 100000,
])
def test_unreadable_methods_figures_are_refused(body):
    assert decode_methods(body) is None
    reply = MethodsReply(1)
    assert reply.feed(b"methods 1 0 1 " + body)
    assert reply.complete and reply.figures is None


def test_method_sums_add_outcomes_buckets_and_seconds_and_the_retired():
    a = {"echo": figures(ok=2, failed=1, secs=0.001), "ping": figures(ok=1)}
    b = {"echo": figures(ok=3, declared=1, secs=0.5)}
    total = sum_methods([a, b], {"echo": figures(ok=10, secs=0.001), "old": figures(ok=4)})
    assert list(total) == ["echo", "old", "ping"]
    echo = total["echo"]
    assert echo.outcomes == {"ok": 15, "declared": 1, "failed": 1}
    assert echo.bucket_counts[bucket_of(0.001)] == 12
    assert echo.bucket_counts[bucket_of(0.5)] == 4
    assert sum(echo.bucket_counts) == 16
    assert math.isclose(echo.seconds_sum, 0.012 + 2.0)
    assert total["old"].outcomes["ok"] == 4 and total["ping"].outcomes["ok"] == 1
    assert sum_methods([]) == {}


def test_newer_stats_keep_what_a_trimmed_answer_left_out():
    older = {"a": figures(ok=1), "b": figures(ok=2)}
    assert newer_stats(older, {"a": figures(ok=5)}) == {"a": figures(ok=5), "b": figures(ok=2)}


def test_last_words_are_the_final_figures_then_bye():
    farewell = Farewell()
    table = {"echo": figures(ok=9)}
    messages, _ = encode_methods(FINAL_SEQ, table)
    assert not farewell.feed(encode_methods(3, table)[0][0])   # an answer, not last words
    assert all(farewell.feed(m) for m in messages)
    assert not farewell.said
    assert farewell.feed(encode_snapshot(b"bye", snapshot(requests_completed=9)))
    assert farewell.said and farewell.methods.figures == table
    assert farewell.snapshot == snapshot(requests_completed=9)
    assert not farewell.feed(encode_snapshot(b"bye", snapshot(requests_completed=10)))
    # A child with no figures says only bye.
    quiet = Farewell()
    assert quiet.feed(encode_snapshot(b"bye", snapshot())) and quiet.said
    assert quiet.methods.figures is None


def test_a_garbled_bye_does_not_raise():
    assert decode_snapshot(b"bye [1, 2]", b"bye") is None
    assert decode_snapshot(b"bye " + b"[" * 100000, b"bye") is None


class FakeChild:
    """A Child record whose control channel's other end is the test's."""

    def __init__(self, pid: int) -> None:
        parent, self.end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.handoff_a, self.handoff_b = socket.socketpair()
        self.child = Child(0, pid, parent, self.handoff_a, -1)
        self.child.move(ChildState.SERVING)

    def queue(self, *messages: bytes) -> None:
        for message in messages:
            self.end.send(message)

    def answer(self, seq: int, table: dict[str, MethodSnapshot]) -> None:
        self.queue(*encode_methods(seq, table)[0])

    def say_goodbye(self, table: dict[str, MethodSnapshot], completed: int = 0) -> None:
        if table:
            self.answer(FINAL_SEQ, table)
        self.queue(encode_snapshot(b"bye", snapshot(requests_completed=completed)))

    def requests(self) -> list[bytes]:
        self.end.setblocking(False)
        got = []
        try:
            while True:
                got.append(self.end.recv(CONTROL_MAX))
        except BlockingIOError:
            return got

    def close(self) -> None:
        for sock in (self.child.control, self.end, self.handoff_a, self.handoff_b):
            sock.close()


@pytest.fixture
def fakes():
    made: list[FakeChild] = []

    def make() -> FakeChild:
        made.append(FakeChild(1000 + len(made)))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


def test_tally_sums_the_answers_and_skips_late_and_garbled_ones(fakes, monkeypatch):
    monkeypatch.setattr(children_module, "CONTROL_TIMEOUT", 0.2)
    tally = Tally()
    a, b = fakes(), fakes()
    # Requests are numbered from 1, one per child asked: a gets 1, b gets 2.
    a.answer(1, {"echo": figures(ok=2)})
    b.queue(b"methods 1 0 1 {\"echo\": 1}",              # late (and garbled)
            b"methods 2 0 1 {broken",                    # unreadable: b left out
            *encode_methods(2, {"echo": figures(ok=50)})[0])
    total = tally.method_metrics([a.child, b.child])
    assert total == {"echo": figures(ok=2)}
    assert a.requests() == [b"methods 1"] and b.requests() == [b"methods 2"]
    # Next round: the stale answer to request 2 is still queued on b, then the right one.
    a.answer(3, {"echo": figures(ok=4), "ping": figures(ok=1)})
    b.answer(4, {"echo": figures(ok=6)})
    total = tally.method_metrics([a.child, b.child])
    assert total["echo"].outcomes == {"ok": 10, "declared": 0, "failed": 0}
    assert total["ping"] == figures(ok=1)


def test_tally_counts_a_silent_child_with_its_last_answer(fakes, monkeypatch):
    monkeypatch.setattr(children_module, "CONTROL_TIMEOUT", 0.05)
    tally = Tally()
    a = fakes()
    a.answer(1, {"echo": figures(ok=3)})
    assert tally.method_metrics([a.child]) == {"echo": figures(ok=3)}
    # No answer to request 2 within the timeout: the sum does not drop.
    assert tally.method_metrics([a.child]) == {"echo": figures(ok=3)}
    # Its late answer to 2 is skipped when 3 is answered.
    a.answer(2, {"echo": figures(ok=4)})
    a.answer(3, {"echo": figures(ok=5)})
    assert tally.method_metrics([a.child]) == {"echo": figures(ok=5)}


def test_tally_keeps_a_stopped_childs_last_words_and_a_crashed_childs_last_answer(fakes):
    tally = Tally()
    stopped, crashed, serving = fakes(), fakes(), fakes()
    stopped.answer(1, {"echo": figures(ok=3)})
    crashed.answer(2, {"echo": figures(ok=2), "fail": figures(declared=1)})
    serving.answer(3, {"echo": figures(ok=1)})
    readings = [tally.method_metrics([stopped.child, crashed.child, serving.child])]
    # The stopped child served two more calls before its last words.
    stopped.say_goodbye({"echo": figures(ok=5)}, completed=5)
    tally.collect_farewell(stopped.child, deadline=time.monotonic() + 5.0)
    assert stopped.child.farewell.said
    readings.append(tally.method_metrics([]))
    # The crashed child said nothing: what it answered last is kept.
    crashed.end.close()
    tally.child_gone(crashed.child)
    tally.child_gone(stopped.child)            # reaped after its last words: no change
    readings.append(tally.method_metrics([]))
    # Both moved into the retired totals: the tally holds nothing of a child gone.
    assert set(tally._methods) == {serving.child}
    serving.answer(4, {"echo": figures(ok=1)})
    readings.append(tally.method_metrics([serving.child]))
    assert [r["echo"].outcomes["ok"] for r in readings] == [6, 8, 8, 8]
    assert readings[-1]["fail"].outcomes["declared"] == 1
    # metrics() keeps the bye's cumulative counters as before.
    assert tally.metrics([]).requests_completed == 5


def test_last_words_read_by_a_request_are_kept_not_dropped(fakes):
    """A child told to stop while the parent asks it for figures answers with its last
    words: the request reads them, and keeps them."""
    tally = Tally()
    a = fakes()
    a.say_goodbye({"echo": figures(ok=7)}, completed=7)
    assert tally.metrics([a.child]).requests_completed == 7      # from the retired totals
    assert a.child.farewell.said
    assert tally.method_metrics([a.child]) == {"echo": figures(ok=7)}
    assert a.requests() == [b"metrics 1"]       # said goodbye: not asked again
    tally.collect_farewell(a.child, deadline=time.monotonic() + 5.0)       # returns at once
    tally.child_gone(a.child)
    assert tally.method_metrics([]) == {"echo": figures(ok=7)}
    assert tally.metrics([]).requests_completed == 7


def test_last_words_left_unread_are_kept_when_the_child_is_reaped(fakes):
    """A child stopped by a SIGTERM of its own says its last words unasked."""
    tally = Tally()
    a = fakes()
    a.say_goodbye({"ping": figures(ok=2)}, completed=2)
    a.end.close()
    tally.child_gone(a.child)
    assert tally.method_metrics([]) == {"ping": figures(ok=2)}
    assert tally.metrics([]).requests_completed == 2


def test_method_metrics_are_empty_without_the_option_and_nothing_is_asked(fakes):
    server = ProcessServer(lambda *args: None, "127.0.0.1", 0, ServerOptions(), 2)
    asked = ProcessServer(lambda *args: None, "127.0.0.1", 0,
                          ServerOptions(method_metrics=True), 2)
    for srv in (server, asked):
        fake = fakes()
        fake.answer(1, {"echo": figures(ok=1)})
        srv._slots[0] = fake.child        # a serving child, as start() would place it
        if srv is server:
            assert srv.method_metrics() == {}
            assert fake.requests() == []      # not even asked
        else:
            assert srv.method_metrics() == {"echo": figures(ok=1)}
            assert fake.requests() == [b"methods 1"]


def test_an_answer_larger_than_the_socket_buffer_goes_through_in_parts(fakes):
    """A child answering in parts while the parent reads them: more bytes than the
    channel holds at once, each part a whole CONTROL_MAX-sized datagram."""
    tally = Tally()
    a = fakes()
    table = {f"m{i:05d}_" + "w" * 400: figures(ok=i + 1) for i in range(2000)}
    messages, _ = encode_methods(1, table)
    assert len(messages) > 8 and max(len(m) for m in messages) > CONTROL_MAX - 100

    def child() -> None:
        assert a.end.recv(CONTROL_MAX) == b"methods 1"
        for message in messages:
            a.end.send(message)

    thread = threading.Thread(target=child)
    thread.start()
    try:
        assert tally.method_metrics([a.child]) == dict(sorted(table.items()))
    finally:
        thread.join(10)
