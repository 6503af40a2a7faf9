"""Bytes and fakes tier: which methods the selector runs itself (rpc/inline.py), and
the watch that takes the loop over when one blocks. No sockets; the watch runs with
fake clocks read through callables."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from nimbus_thrift.rpc import inline
from nimbus_thrift.rpc.inline import (FAST_SECS, MAX_KEYS, MAX_PROOF_RUNS, PROOF_RUNS,
                                      SLOW_SECS, InlinePolicy, InlineWatch, _method_key,
                                      method_key)

#: The C version (_wire.call_name, when built) and the Python one must agree.
KEYERS = pytest.mark.parametrize("key_of", [method_key, _method_key], ids=["used", "python"])

from support.rawthrift import CALL, ONEWAY, REPLY, message


def _strict(name: bytes, mtype: int = CALL) -> bytes:
    return struct.pack("!HBBi", 0x8001, 0, mtype, len(name)) + name + struct.pack("!i", 9)


# ----------------------------------------------------------------------- method_key


@KEYERS
def test_method_key_reads_the_name_of_a_strict_call(key_of):
    assert key_of(_strict(b"echo")) == b"echo"
    assert key_of(bytearray(_strict(b"Calc:add"))) == b"Calc:add"
    assert key_of(_strict(b"")) == b""
    assert key_of(_strict(b"echo")[:12]) == b"echo"     # the name ends the frame


@pytest.mark.parametrize("payload", [
    _strict(b"echo", REPLY),
    _strict(b"echo", ONEWAY),
    struct.pack("!i", 4) + b"echo" + struct.pack("!bi", CALL, 1),   # old non-strict header
    b"\x82\x21\x01\x04echo",                                          # compact
    b"\x80\x01\x00",                                                  # truncated header
    b"\x80\x01\x00\x01\x00\x00",                                      # truncated length
    struct.pack("!HBBi", 0x8001, 0, CALL, 100) + b"echo",             # name past the end
    struct.pack("!HBBi", 0x8001, 0, CALL, -1) + b"echo",              # negative length
    b"",
])
@KEYERS
def test_method_key_is_none_for_anything_else(payload, key_of):
    assert key_of(payload) is None


def test_method_key_agrees_with_a_real_encoder(demo):
    payload = message("echo", 5, demo.Echo.echo_args(s="hi"))
    assert method_key(payload) == b"echo"
    assert method_key(message("echo", 5, demo.Echo.echo_args(s="hi"), strict=False)) is None


# ----------------------------------------------------------------------- policy


def test_a_method_goes_inline_after_its_proof_of_consecutive_fast_calls():
    policy = InlinePolicy()
    for _ in range(PROOF_RUNS - 1):
        policy.ran(b"echo", FAST_SECS / 10)
    assert b"echo" not in policy.inline
    policy.ran(b"echo", FAST_SECS / 10)
    assert policy.inline == {b"echo"}


def test_one_slow_call_restarts_the_proof():
    policy = InlinePolicy()
    for _ in range(PROOF_RUNS - 1):
        policy.ran(b"get", FAST_SECS / 10)
    policy.ran(b"get", FAST_SECS)                 # at the threshold counts as slow
    for _ in range(PROOF_RUNS - 1):
        policy.ran(b"get", FAST_SECS / 10)
    assert b"get" not in policy.inline
    policy.ran(b"get", FAST_SECS / 10)
    assert b"get" in policy.inline


def test_a_slow_inline_call_sends_the_method_back_with_a_doubled_proof(logs):
    policy = InlinePolicy()
    for _ in range(PROOF_RUNS):
        policy.ran(b"get", 0.0)
    policy.ran_inline(b"get", SLOW_SECS / 2)      # slower than FAST but tolerated inline
    assert b"get" in policy.inline
    policy.ran_inline(b"get", SLOW_SECS)
    assert b"get" not in policy.inline
    back = [e for e in logs if e["event"] == "method_back_to_workers"]
    assert back and back[0]["method"] == "get" and back[0]["next_proof_runs"] == 2 * PROOF_RUNS
    for _ in range(2 * PROOF_RUNS - 1):
        policy.ran(b"get", 0.0)
    assert b"get" not in policy.inline
    policy.ran(b"get", 0.0)
    assert b"get" in policy.inline


def test_the_proof_stops_growing_at_its_cap():
    policy = InlinePolicy()
    policy.ran(b"m", FAST_SECS)
    for _ in range(20):
        policy.demote(b"m", 1.0)
    for _ in range(MAX_PROOF_RUNS - 1):
        policy.ran(b"m", 0.0)
    assert b"m" not in policy.inline
    policy.ran(b"m", 0.0)
    assert b"m" in policy.inline


def test_invented_method_names_cannot_grow_the_table():
    policy = InlinePolicy()
    for i in range(MAX_KEYS + 500):
        policy.ran(b"m%d" % i, 0.0)
    assert len(policy._methods) == MAX_KEYS
    for _ in range(PROOF_RUNS):
        policy.ran(b"never-tracked", 0.0)
    assert b"never-tracked" not in policy.inline


def test_a_disabled_policy_promotes_nothing():
    policy = InlinePolicy(enabled=False)
    for _ in range(PROOF_RUNS * 2):
        policy.ran(b"echo", 0.0)
    assert not policy.inline


# ----------------------------------------------------------------------- watch


class FakeSelector:
    """What the watch reads: when the running inline call began, and a call count."""

    def __init__(self) -> None:
        self.since = 0.0
        self.calls = 0
        self.taken: list[float] = []
        self.took = threading.Event()

    def take_over(self, since: float) -> None:
        self.taken.append(since)
        self.since = 0.0
        self.took.set()


def _watch(sel: FakeSelector) -> InlineWatch:
    return InlineWatch(lambda: sel.since, lambda: sel.calls, sel.take_over)


def test_the_watch_takes_over_from_a_call_running_past_the_limit():
    sel = FakeSelector()
    watch = _watch(sel)
    try:
        sel.calls = 1
        sel.since = time.perf_counter()
        watch.wake()
        assert sel.took.wait(5)
        assert sel.taken == [pytest.approx(sel.taken[0])] and len(sel.taken) == 1
    finally:
        watch.stop()


def test_the_watch_leaves_short_calls_alone():
    """Each look finds a call that began 0.1 ms earlier (a new one every time, as in a
    busy selector): never one to leave."""
    sel = FakeSelector()
    looks = []

    def since() -> float:
        looks.append(1)
        sel.calls += 1
        return time.perf_counter() - 0.0001

    watch = InlineWatch(since, lambda: sel.calls, sel.take_over)
    try:
        watch.wake()
        deadline = time.monotonic() + 5
        while len(looks) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(looks) >= 50
        assert sel.taken == []
    finally:
        watch.stop()


def test_an_idle_watch_sleeps_and_wakes_for_the_next_call(monkeypatch):
    monkeypatch.setattr(inline, "WATCH_IDLE_SECS", 0.05)
    sel = FakeSelector()
    watch = _watch(sel)
    try:
        watch.wake()
        deadline = time.monotonic() + 5
        while not watch.asleep and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watch.asleep, "the watch kept looking with no inline calls"
        # As the selector does: mark the call, then wake the watch if it sleeps.
        sel.calls += 1
        sel.since = time.perf_counter()
        if watch.asleep:
            watch.wake()
        assert sel.took.wait(5), "a blocked call after the watch slept was never taken over"
    finally:
        watch.stop()


def test_a_call_marked_while_the_watch_decides_to_sleep_is_still_watched(monkeypatch):
    """The selector marks its call without reading `asleep` in time: the watch's
    second look after saying it sleeps must see the call."""
    monkeypatch.setattr(inline, "WATCH_IDLE_SECS", 0.0)
    sel = FakeSelector()
    looked = []

    def since() -> float:
        looked.append(sel.since)
        if len(looked) == 3:
            # The watch has just decided it is idle: a call starts now, and the
            # selector, having read `asleep` as False a moment ago, does not wake it.
            sel.calls += 1
            sel.since = time.perf_counter() - 1.0
        return sel.since

    watch = InlineWatch(since, lambda: sel.calls, sel.take_over)
    try:
        watch.wake()
        assert sel.took.wait(5), "the call that started during the decision went unwatched"
    finally:
        watch.stop()


def test_a_runnable_thread_is_given_time_before_it_is_left():
    """Running (or waiting for a CPU) is not blocking: left only past
    BUSY_TAKEOVER_SECS."""
    sel = FakeSelector()
    taken_at = []

    def take_over(since: float) -> None:
        taken_at.append(time.perf_counter())
        sel.take_over(since)

    watch = InlineWatch(lambda: sel.since, lambda: sel.calls, take_over, lambda: True)
    try:
        sel.calls = 1
        started = sel.since = time.perf_counter()
        watch.wake()
        assert sel.took.wait(5), "a call running for ever was never left"
        assert taken_at[0] - started >= inline.BUSY_TAKEOVER_SECS
    finally:
        watch.stop()


def test_thread_runnable_reads_this_threads_state():
    assert inline.thread_runnable(threading.get_native_id())     # running: us
    sleeper_id = []
    ready, release = threading.Event(), threading.Event()

    def sleeper() -> None:
        sleeper_id.append(threading.get_native_id())
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=sleeper)
    thread.start()
    try:
        assert ready.wait(5)
        deadline = time.monotonic() + 5
        while inline.thread_runnable(sleeper_id[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not inline.thread_runnable(sleeper_id[0])
    finally:
        release.set()
        thread.join(5)
    assert not inline.thread_runnable(2 ** 22 + 12345)           # no such thread


@KEYERS
def test_method_key_is_none_for_requests_in_other_forms(key_of):
    class Message:            # forms.Message stands for a non-framed-binary request
        payload = _strict(b"echo")

    assert key_of(Message()) is None
    assert key_of(memoryview(_strict(b"echo"))) is None   # frames are bytes or bytearray


# ----------------------------------------------------------------------- other forms


def test_requests_in_other_forms_are_keyed_by_their_method(demo):
    from nimbus_thrift.rpc.codec import compact
    from nimbus_thrift.rpc.codec.forms import (FRAMED_COMPACT, HEADER, UNFRAMED_BINARY,
                                         UNFRAMED_COMPACT, Message)
    from nimbus_thrift.rpc.inline import message_key, request_key

    args = demo.Echo.echo_args(s="hi")
    binary_call = message("echo", 5, args)
    compact_call = compact.encode_message("echo", CALL, 5, args)
    assert message_key(Message(binary_call, UNFRAMED_BINARY)) == b"echo"
    assert message_key(Message(compact_call, UNFRAMED_COMPACT)) == b"echo"
    assert message_key(Message(compact_call, FRAMED_COMPACT)) == b"echo"
    assert request_key(Message(compact_call, FRAMED_COMPACT)) == b"echo"
    assert request_key(binary_call) == b"echo"
    # THeader, a refused message, a compact ONEWAY or REPLY, garbage: the pool's.
    assert message_key(Message(binary_call, HEADER)) is None
    assert message_key(Message(binary_call, UNFRAMED_BINARY,
                               error=ValueError("too big"))) is None
    assert message_key(Message(compact.encode_message("echo", ONEWAY, 5, args),
                               UNFRAMED_COMPACT)) is None
    assert message_key(Message(compact.encode_message("echo", REPLY, 5, args),
                               FRAMED_COMPACT)) is None
    assert message_key(Message(b"\x82\x21\xff", UNFRAMED_COMPACT)) is None


def test_only_time_on_the_cpu_makes_an_inline_call_slow():
    from nimbus_thrift.rpc.inline import SLOW_SECS, slow_on_cpu
    assert slow_on_cpu(SLOW_SECS * 2, 0.0)                 # computed the whole time
    assert slow_on_cpu(SLOW_SECS * 2, SLOW_SECS)           # still SLOW_SECS of its own
    assert not slow_on_cpu(SLOW_SECS * 2, SLOW_SECS * 1.5)  # mostly preempted
    assert not slow_on_cpu(SLOW_SECS * 0.5, 0.0)
