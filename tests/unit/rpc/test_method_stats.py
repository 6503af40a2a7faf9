"""Fakes tier: per-method figures (rpc/methodstats.py) booked by the dispatcher when
asked: outcomes of real calls, refusals, the latency buckets, labels bounded by the IDL
and multiplexed names; a dispatcher that was not asked keeps its untimed call path."""

from __future__ import annotations

from types import ModuleType

import pytest

from nimbus_thrift.demo import CalculatorHandler, EchoHandler
from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.rpc.dispatch import Dispatcher, Status
from nimbus_thrift.rpc.methodstats import BUCKETS, MethodStats, bucket_of


def frame(demo: ModuleType, name: str, args: object, mtype: int = binary.CALL) -> bytes:
    return binary.encode_message(name, mtype, 1, args)


def test_bucket_bounds_are_inclusive_and_the_last_is_infinite() -> None:
    assert bucket_of(0.0) == 0
    assert bucket_of(BUCKETS[0]) == 0
    assert bucket_of(BUCKETS[0] * 1.01) == 1
    assert bucket_of(BUCKETS[-1]) == len(BUCKETS) - 1
    assert bucket_of(BUCKETS[-1] + 1) == len(BUCKETS)


def test_only_known_methods_are_booked_and_uncalled_ones_are_not_listed() -> None:
    stats = MethodStats(["a", "b"])
    stats.record("a", Status.OK, 0.002)
    stats.record("a", Status.FAILED, None)
    stats.record("made_up", Status.OK, 0.001)
    snap = stats.snapshot()
    assert list(snap) == ["a"]
    assert snap["a"].outcomes == {"ok": 1, "declared": 0, "failed": 1}
    assert sum(snap["a"].bucket_counts) == 1          # the refusal was not timed
    assert snap["a"].bucket_counts[bucket_of(0.002)] == 1
    assert snap["a"].seconds_sum == pytest.approx(0.002)


def test_dispatcher_books_each_outcome(demo: ModuleType) -> None:
    disp = Dispatcher((demo.Echo, EchoHandler()), method_metrics=True)
    for _ in range(3):
        disp.dispatch(frame(demo, "echo", demo.Echo.echo_args(s="x")), "peer")
    disp.dispatch(frame(demo, "fail", demo.Echo.fail_args(kind="declared")), "peer")
    disp.dispatch(frame(demo, "fail", demo.Echo.fail_args(kind="boom")), "peer")
    # Refused before the handler ran: the arguments end in the middle of the string.
    bad = frame(demo, "echo", demo.Echo.echo_args(s="xyz"))[:-3]
    _, status = disp.dispatch(bad, "peer")
    assert status is Status.FAILED
    disp.dispatch(frame(demo, "no_such_method", demo.Echo.ping_args()), "peer")

    assert disp.method_stats is not None
    snap = disp.method_stats.snapshot()
    assert set(snap) == {"echo", "fail"}
    assert snap["echo"].outcomes == {"ok": 3, "declared": 0, "failed": 1}
    assert sum(snap["echo"].bucket_counts) == 3
    assert snap["fail"].outcomes == {"ok": 0, "declared": 1, "failed": 1}
    assert sum(snap["fail"].bucket_counts) == 2
    assert snap["fail"].seconds_sum > 0


def test_slow_calls_land_in_their_bucket(demo: ModuleType) -> None:
    disp = Dispatcher((demo.Echo, EchoHandler()), method_metrics=True)
    disp.dispatch(frame(demo, "sleep", demo.Echo.sleep_args(millis=30)), "peer")
    assert disp.method_stats is not None
    counts = disp.method_stats.snapshot()["sleep"].bucket_counts
    assert sum(counts[bucket_of(0.030):]) == 1 and sum(counts[:bucket_of(0.029)]) == 0


def test_multiplexed_methods_are_named_service_colon_method(demo: ModuleType) -> None:
    disp = Dispatcher(None, {"Calculator": (demo.Calculator, CalculatorHandler())},
                      method_metrics=True)
    disp.dispatch(frame(demo, "Calculator:add", demo.Calculator.add_args(a=1, b=2)), "peer")
    assert disp.method_stats is not None
    assert disp.method_stats.snapshot()["Calculator:add"].outcomes["ok"] == 1


def test_not_asked_keeps_the_untimed_path(demo: ModuleType) -> None:
    disp = Dispatcher((demo.Echo, EchoHandler()))
    assert disp.method_stats is None
    assert "_call" not in vars(disp)          # the class's own, untimed method
    reply, status = disp.dispatch(frame(demo, "echo", demo.Echo.echo_args(s="x")), "peer")
    assert status is Status.OK and reply is not None


def test_figures_cross_the_control_channel_unchanged(demo: ModuleType) -> None:
    """What a child of make_server(processes=N) books is what its parent reads back
    (rpc/control.py carries it; seconds are floats in JSON, exactly)."""
    from nimbus_thrift.rpc.multiprocess.control import MethodsReply, encode_methods

    disp = Dispatcher((demo.Echo, EchoHandler()), method_metrics=True)
    disp.dispatch(frame(demo, "echo", demo.Echo.echo_args(s="x")), "peer")
    disp.dispatch(frame(demo, "fail", demo.Echo.fail_args(kind="declared")), "peer")
    disp.dispatch(frame(demo, "fail", demo.Echo.fail_args(kind="boom")), "peer")
    assert disp.method_stats is not None
    snap = disp.method_stats.snapshot()
    messages, omitted = encode_methods(1, snap)
    reply = MethodsReply(1)
    assert omitted == 0 and all(reply.feed(m) for m in messages)
    assert reply.figures == snap
