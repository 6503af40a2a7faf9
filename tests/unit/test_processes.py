"""The socket-free parts of make_server(processes=N) (rpc/supervision.py): options per
child, the metrics sum, the restart back-off, exit statuses in words, the control
messages and the child's state table; and what make_server builds before any fork.
(tests/sockets/test_server_processes.py forks real children.)"""

from __future__ import annotations

import dataclasses
import signal

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler, demo_thrift
from nimbus_thrift.rpc.metrics import MetricsSnapshot
from nimbus_thrift.rpc.options import OptionError, ServerOptions
from nimbus_thrift.rpc.processes import Child, ProcessServer
from nimbus_thrift.rpc.server import Server
from nimbus_thrift.rpc.supervision import (CUMULATIVE_FIELDS, Backoff, ChildState, add_retired,
                                           check_processes, child_options, decode_snapshot,
                                           describe_status, encode_snapshot, sum_snapshots)


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
    backoff = Backoff(initial=0.1, factor=2.0, cap=0.5, reset_after=10.0)
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
    import socket

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
