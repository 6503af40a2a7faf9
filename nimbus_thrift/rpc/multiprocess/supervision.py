"""The socket-free parts of supervising a multi-process server (rpc/multiprocess/processes.py):
the options each child gets, the sums of the children's metrics and per-method
stats, the restart back-off, exit statuses in words and a child's state table (the
control channel's messages are in rpc/multiprocess/control.py)."""

from __future__ import annotations

import dataclasses
import enum
import os
import signal
from dataclasses import dataclass

# Re-exported: the control messages lived here before rpc/multiprocess/control.py.
from .control import decode_snapshot as decode_snapshot
from .control import encode_snapshot as encode_snapshot
from ..backoff import Backoff
from ..methodstats import OUTCOMES, MethodSnapshot
from ..metrics import MetricsSnapshot
from ..options import OptionError, ServerOptions

#: Waits before restarting a child that exited on its own: 0.1 s, doubled after each
#: further exit of the same slot up to 10 s: a handler that crashes at once on every
#: start costs a fork every 10 s, not a busy loop.
RESTART_BACKOFF = Backoff(initial=0.1, factor=2.0, cap=10.0)
#: Seconds a child must have served for its slot's back-off to start again from its
#: first wait: a crash after that long is not part of a crash loop.
RESTART_BACKOFF_RESET = 10.0
#: Counters that only grow: a child that stopped gracefully hands its last values to
#: the parent, so the sum does not go back down after a rolling restart. The other
#: fields are levels (connections open, bytes held), which leave with the child.
CUMULATIVE_FIELDS = ("connections_accepted", "connections_refused",
                     "connections_refused_per_peer", "frames_refused",
                     "requests_completed", "requests_failed", "requests_overloaded",
                     "timeouts", "read_budget_overcommits", "tls_handshakes",
                     "tls_handshakes_failed", "requests_inline", "selector_takeovers")


def check_processes(processes: object, options: ServerOptions) -> int:
    """Validate ``processes``; return it.

    Raises:
        OptionError: not a positive integer, or an option the children cannot share.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise OptionError(f"processes must be a positive integer, not {processes!r}.")
    if processes > 1 and options.unix_socket is not None:
        raise OptionError(f"unix_socket cannot be used with processes={processes}: the "
                          "children would remove each other's socket file when they stop; "
                          "serve the Unix socket from one process.")
    return processes


def child_options(options: ServerOptions, processes: int) -> ServerOptions:
    """The options of each of ``processes`` children: the memory budgets divided among
    them (never below 1 byte), everything else as given."""
    per_peer = options.max_read_buffer_bytes_per_peer
    if per_peer is None:
        # Resolve the default share against the whole budget first, so each child
        # gets 1/N of what one server's peer could hold.
        per_peer = options.peer_read_share
    return dataclasses.replace(
        options,
        max_read_buffer_bytes=max(1, options.max_read_buffer_bytes // processes),
        max_read_buffer_bytes_per_peer=max(1, per_peer // processes),
        max_unsent_reply_bytes=max(1, options.max_unsent_reply_bytes // processes),
    )


def sum_snapshots(snapshots: list[MetricsSnapshot],
                  retired: dict[str, int] | None = None) -> MetricsSnapshot:
    """Field by field sum of the children's snapshots, plus the ``retired`` totals of
    the cumulative counters of children that have stopped. Peaks are summed too: the
    sum of per-child peaks is an upper bound of the server's."""
    fields = [f.name for f in dataclasses.fields(MetricsSnapshot)]
    total = dict.fromkeys(fields, 0)
    for snap in snapshots:
        for name in fields:
            total[name] += getattr(snap, name)
    for name, value in (retired or {}).items():
        total[name] += value
    return MetricsSnapshot(**total)


def add_retired(retired: dict[str, int], snapshot: MetricsSnapshot) -> None:
    """Keep the cumulative counters of a child that stopped."""
    for name in CUMULATIVE_FIELDS:
        retired[name] = retired.get(name, 0) + getattr(snapshot, name)


def add_stats(a: MethodSnapshot, b: MethodSnapshot) -> MethodSnapshot:
    """One method's stats added: outcomes, bucket counts and seconds."""
    return MethodSnapshot({o: a.outcomes.get(o, 0) + b.outcomes.get(o, 0) for o in OUTCOMES},
                          tuple(x + y for x, y in zip(a.bucket_counts, b.bucket_counts,
                                                      strict=True)),
                          a.seconds_sum + b.seconds_sum)


def sum_methods(answers: list[dict[str, MethodSnapshot]],
                retired: dict[str, MethodSnapshot] | None = None) -> dict[str, MethodSnapshot]:
    """Method by method sum of the children's figures and the ``retired`` figures of
    children that have stopped, sorted by method name."""
    total: dict[str, MethodSnapshot] = {}
    for figures in [*answers, retired or {}]:
        for name, fig in figures.items():
            total[name] = add_stats(total[name], fig) if name in total else fig
    return dict(sorted(total.items()))


def newer_stats(older: dict[str, MethodSnapshot],
                newer: dict[str, MethodSnapshot]) -> dict[str, MethodSnapshot]:
    """One child's figures as last known: its ``newer`` answer, and for the methods that
    answer left out (a child over METHODS_MAX_PARTS sends its busiest) the ``older``
    ones. A child's figures only grow, so this never goes back down."""
    return {**older, **newer}


def describe_status(status: int) -> str:
    """A waitpid status as words: ``exit status 3``, ``killed by SIGKILL``."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclass
class RestartBackoff:
    """When a slot whose child exited may start its next one: the slot's exits in a row
    on a :class:`~nimbus_thrift.rpc.backoff.Backoff` schedule."""

    schedule: Backoff = RESTART_BACKOFF
    reset_after: float = RESTART_BACKOFF_RESET
    failures: int = 0

    def after_exit(self, lived: float) -> float:
        """Seconds to wait before the next start, for a child that served ``lived``
        seconds before it exited."""
        if lived >= self.reset_after:
            self.failures = 0
        self.failures += 1
        return self.schedule.delay(self.failures - 1)


# ----------------------------------------------------------------- child lifecycle

class ChildState(enum.Enum):
    """Theory of operation: a child is STARTING from its fork until it reports ready,
    then SERVING: only a SERVING child is handed connections. A rolling restart or
    stop() moves it to STOPPING (nothing more is handed to it; it serves what it has,
    then drains); its exit, expected or not, makes it EXITED. A child that exits while
    STARTING or SERVING crashed, and its slot is started again after the slot's
    back-off (unless the server is stopping)."""

    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    EXITED = "exited"


TRANSITIONS: dict[ChildState, set[ChildState]] = {
    ChildState.STARTING: {ChildState.SERVING, ChildState.STOPPING, ChildState.EXITED},
    ChildState.SERVING: {ChildState.STOPPING, ChildState.EXITED},
    ChildState.STOPPING: {ChildState.EXITED},
    ChildState.EXITED: set(),
}
