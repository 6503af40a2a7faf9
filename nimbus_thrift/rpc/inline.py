"""Calls the selector runs itself: which methods are fast enough, and the watch that
hands the selector's job to a new thread when one of them blocks after all.

Theory of operation
-------------------
Handing a request to a worker and its outcome back costs both threads Python work
(queueing, waking, booking) that is several times the work of a small call itself:
measured with scripts/bench.sh at 16 connections, an echo through the pool ran at
0.70x thriftpy2's threaded server, and served by the selector itself at 1.01x (1.43x
the pool's rate). Java's TNonblockingServer and C++'s
TNonblockingServer without a thread manager always run handlers in the I/O thread;
THsHaServer never does. This server does it per method, for the methods that have
shown they are fast:

* every method starts on the worker pool, which times each call (wall clock, from
  decode to encoded reply);
* after :data:`PROOF_RUNS` consecutive calls under :data:`FAST_SECS`, the method is
  *inline*: the selector runs it in the pass that read it, and writes and books the
  reply at once;
* an inline call that takes longer than :data:`SLOW_SECS` sends the method back to the
  pool, and it must prove itself again over twice as many calls each time (up to
  :data:`MAX_PROOF_RUNS`), so a method that is only sometimes slow settles on the pool.
  Only time the selector's thread spent running counts (:func:`slow_on_cpu`): on a
  shared core the kernel takes the CPU away for a few milliseconds now and then, and
  each time a wall-clock rule sent the method back (33 times in 12 s at 256
  connections here, with other processes on the core: the method spent most of the
  run on the pool, which is what made 256 connections vary from run to run);
* a handler can still block where it never did before (a lock, a slow disk). Then
  :class:`InlineWatch`, a thread that looks every :data:`WATCH_SECS` while inline calls
  are being made, sees the selector inside one call for more than
  :data:`TAKEOVER_SECS`, and the selector's loop continues in a new thread (see
  ``InlineCalls._take_over``). The blocked thread finishes its call as a worker would and
  then leaves. Other clients wait at most about ``TAKEOVER_SECS`` plus
  ``WATCH_SECS`` and the GIL's switch interval, once per such method.

Only CALL messages in binary (strict) or compact, framed or unframed, are keyed (the
method name's bytes, read from the message header); THeader requests and anything
else always go to the pool. Keys are bounded
(:data:`MAX_KEYS`): a client inventing method names cannot grow the table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from .codec import compact
from .codec.binary import CALL
from .errors import DecodeError, WireError
from .codec.forms import Message

log = structlog.get_logger(__name__)

#: A call faster than this (wall clock, seconds) counts towards a method's proof.
FAST_SECS = 0.0002
#: An inline call slower than this sends its method back to the worker pool.
SLOW_SECS = 0.002
#: Consecutive fast calls a method needs before the selector runs it itself.
PROOF_RUNS = 16
#: The proof never grows past this many calls, however often a method was sent back.
MAX_PROOF_RUNS = 4096
#: Methods tracked at most (the rest stay on the pool).
MAX_KEYS = 1024
#: How often the watch looks at the selector while inline calls are made. Each look
#: takes the GIL from a busy selector (two context switches): every 1 ms cost 3.5 % of
#: the calls/s at 16 connections, every 5 ms under 1 %.
WATCH_SECS = 0.005
#: An inline call running longer than this while its thread sleeps (on a lock, I/O,
#: the GIL) is taken to block: the loop moves on without it.
TAKEOVER_SECS = 0.002
#: ... and one running this long whatever its thread does (a long computation). Until
#: then a runnable thread is left alone: on a busy machine the kernel may simply not
#: have given it the CPU for a few milliseconds, and that is no reason to leave it.
BUSY_TAKEOVER_SECS = 0.05
#: With no inline call for this long, the watch sleeps until the next one.
WATCH_IDLE_SECS = 1.0

#: The first bytes of a strict binary CALL message: version 1, type CALL.
_STRICT_CALL = b"\x80\x01\x00\x01"


def _method_key(frame: bytes | bytearray) -> bytes | None:
    """The method name of a strict binary CALL in ``frame`` (a frame's payload), as
    bytes, or None for any other message (those always go to the pool), and for
    requests in other forms (compact, unframed, THeader: not bytes, see forms.py)."""
    if not isinstance(frame, (bytes, bytearray)) or frame[:4] != _STRICT_CALL \
            or len(frame) < 8:
        return None
    size = int.from_bytes(frame[4:8], "big")
    if size > len(frame) - 8:
        return None
    return bytes(frame[8:8 + size])


def message_key(message: Message) -> bytes | None:
    """:func:`method_key` of a request in another form (forms.Message): an unframed
    binary CALL, or a compact one (framed or not); None for THeader (its frames name
    their protocol inside a header of their own) and for a message refused while it
    was scanned."""
    if message.error is not None:
        return None
    protocol = message.form.protocol
    if protocol == "binary":
        return method_key(message.data)
    if protocol == "compact":
        try:
            header = compact.read_message_header(message.data)
        except (DecodeError, WireError):
            return None
        return header.name.encode() if header.type == CALL else None
    return None


#: :func:`_method_key`, in C (_wire.c) when built: a tenth of the time, for every call.
method_key: Callable[[Any], bytes | None] = _method_key
try:
    from .codec._wire import call_name
    method_key = call_name
except ImportError:  # pragma: no cover - exercised only where the C module is absent
    pass


class _Method:
    __slots__ = ("fast_runs", "proof")

    def __init__(self) -> None:
        self.fast_runs = 0
        self.proof = PROOF_RUNS


class InlinePolicy:
    """Which methods the selector runs itself. :meth:`inline` is read by the selector
    only; :meth:`ran` is called by workers and the selector (the GIL orders them; a
    lost update only delays a promotion)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        #: Keys of the methods run inline (the selector's one lookup per call).
        self.inline: set[bytes] = set()
        self._methods: dict[bytes, _Method] = {}

    def ran(self, key: bytes, secs: float) -> None:
        """A call of ``key`` took ``secs`` on a worker: count it towards the proof."""
        method = self._methods.get(key)
        if method is None:
            if len(self._methods) >= MAX_KEYS or not self.enabled:
                return
            method = self._methods[key] = _Method()
        if secs >= FAST_SECS:
            method.fast_runs = 0
            return
        method.fast_runs += 1
        if method.fast_runs >= method.proof:
            self.inline.add(key)
            log.debug("method_inline", method=key.decode("utf-8", "replace"),
                      proof_runs=method.proof)

    def ran_inline(self, key: bytes, secs: float) -> None:
        """A call of ``key`` took ``secs`` in the selector: too slow sends it back."""
        if secs >= SLOW_SECS:
            self.demote(key, secs)

    def demote(self, key: bytes, secs: float) -> None:
        """Back to the worker pool, with a longer proof next time."""
        self.inline.discard(key)
        method = self._methods.get(key)
        if method is None:
            return
        method.fast_runs = 0
        method.proof = min(method.proof * 2, MAX_PROOF_RUNS)
        log.info("method_back_to_workers", method=key.decode("utf-8", "replace"),
                 call_ms=round(secs * 1000, 3), next_proof_runs=method.proof)


def slow_on_cpu(took: float, off_cpu: float) -> bool:
    """Whether an inline call that took ``took`` seconds of wall clock was slow by its
    own doing, knowing its thread spent ``off_cpu`` seconds off the CPU (preempted, or
    waiting for the GIL) during the pass it ran in. The call's own CPU time is at least
    ``took - off_cpu``: only if even that passes :data:`SLOW_SECS` is the method sent
    back. A call that really computes that long is caught the next time it runs on an
    undisturbed pass; one that blocks is the watch's (it looks at the thread's state,
    not at a clock)."""
    return took - off_cpu >= SLOW_SECS


def thread_runnable(native_id: int) -> bool:
    """Whether the thread ``native_id`` of this process is running or waiting for a
    CPU (state R in /proc), rather than sleeping on something."""
    try:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": the state follows the last parenthesis (comm may hold any).
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R"


class InlineWatch:
    """A thread that checks, every :data:`WATCH_SECS` while inline calls are being made,
    whether the selector is stuck in one: ``since()`` gives when the current inline
    call began (``time.perf_counter()``, 0 when none), and ``take_over(since)`` is
    called when that is more than :data:`TAKEOVER_SECS` ago and ``runnable()`` says
    the thread making the call is not running (or more than
    :data:`BUSY_TAKEOVER_SECS` ago, whatever it says). ``calls()`` counts inline calls
    made so far (to tell when to sleep)."""

    def __init__(self, since: Callable[[], float], calls: Callable[[], int],
                 take_over: Callable[[float], None],
                 runnable: Callable[[], bool] = lambda: False) -> None:
        self._since = since
        self._calls = calls
        self._take_over = take_over
        self._runnable = runnable
        self._wanted = threading.Event()
        self._stopping = False
        #: True while the thread sleeps until :meth:`wake`; read on the hot path.
        self.asleep = True
        self._thread = threading.Thread(target=self._run, name="nimbus-inline-watch",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """An inline call is about to start and the watch sleeps: look again."""
        self.asleep = False
        self._wanted.set()

    def stop(self) -> None:
        self._stopping = True
        self._wanted.set()
        self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stopping:
            self._wanted.wait()
            self._wanted.clear()
            last_calls, quiet_since = -1, time.perf_counter()
            while not self._stopping:
                time.sleep(WATCH_SECS)
                now = time.perf_counter()
                since = self._since()
                if since and now - since > TAKEOVER_SECS and \
                        (now - since > BUSY_TAKEOVER_SECS or not self._runnable()):
                    self._take_over(since)
                calls = self._calls()
                if calls != last_calls:
                    last_calls, quiet_since = calls, now
                elif now - quiet_since > WATCH_IDLE_SECS and not since:
                    # Say we sleep, then look once more: the selector marks a call as
                    # started before it reads `asleep`, so either it sees True and
                    # wakes us, or we see its call here. No inline call goes unwatched.
                    self.asleep = True
                    if self._since() or self._calls() != last_calls:
                        self.asleep = False
                        continue
                    break


def request_key(request: bytes | bytearray | Message) -> bytes | None:
    """The key of a request in any form: :func:`method_key`, else
    :func:`message_key`."""
    key = method_key(request)
    if key is None and type(request) is Message:
        key = message_key(request)
    return key
