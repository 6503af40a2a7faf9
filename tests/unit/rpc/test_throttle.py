"""The rate-limited log lines (nimbus_thrift.rpc.throttle): the selector's throttle, and the
logging face the daemon's threads use, with a fake logger and clock."""

from __future__ import annotations

from typing import Any

from support.nimbus import FakeClock
from nimbus_thrift.rpc.throttle import LogThrottle, RateLimitedLog

T0 = 1000.0


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


def test_one_line_per_key_per_interval_then_the_count() -> None:
    out, clock = Lines(), FakeClock()
    rl = RateLimitedLog(out, 10.0, clock=clock)
    assert rl.warning("refused", "a", n=1)
    assert not any(rl.warning("refused", "a", n=i) for i in range(5))
    assert rl.warning("refused", "b", n=7)                   # another key: its own line
    clock.advance(9.9)
    assert not rl.warning("refused", "a")
    clock.advance(0.1)
    assert rl.warning("refused", "a", n=8)
    assert out.lines == [("refused", {"n": 1}), ("refused", {"n": 7}),
                         ("refused", {"n": 8, "suppressed": 6})]
    clock.advance(10)
    rl.warning("refused", "a")
    assert out.lines[-1] == ("refused", {})                 # nothing suppressed since


def test_keys_remembered_are_bounded() -> None:
    out, clock = Lines(), FakeClock()
    rl = RateLimitedLog(out, 10.0, max_keys=3, clock=clock)
    for i in range(1000):
        rl.warning("refused", f"10.0.{i // 256}.{i % 256}")
    assert len(rl.throttle) == 3 and len(out.lines) == 1000
    # The newest keys are kept: a repeat of the last one is still suppressed.
    assert not rl.warning("refused", "10.0.3.231")


def test_log_throttle_one_line_per_key_per_interval_with_a_count() -> None:
    throttle = LogThrottle(interval=10, max_keys=2)
    assert throttle.allow("a", T0) == 0
    assert [throttle.allow("a", T0 + i) for i in range(1, 6)] == [None] * 5
    assert throttle.allow("b", T0 + 1) == 0           # another key: its own window
    assert throttle.allow("a", T0 + 10) == 5          # next line carries the count
    assert throttle.allow("c", T0 + 11) == 0          # over max_keys: shares OTHERS
    assert throttle.allow("d", T0 + 12) is None
    assert len(throttle) == 3
    assert throttle.allow("a", T0 + 12) is None
    assert sorted(throttle.expire(T0 + 30)) == [("(other peers)", 1), ("a", 1)]
    assert len(throttle) == 0
