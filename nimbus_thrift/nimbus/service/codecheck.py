"""The daemon parses uploaded modules in a child process, never in its own.

``ast.parse`` holds the GIL for the whole parse and peaks at hundreds of MB per MiB of
dense source: in the daemon, one submit's parse stalled every other client's call for
its duration and left the memory to the daemon's allocator (scripts/abuse/nimbus_rows.py
row 2: 64 submits of 900 KiB modules kept a read-only call waiting 32 s and took the
daemon to 3.6 GB). In a child the worker thread only waits on a pipe (the GIL is free),
the child's address space is capped, its time is bounded, and its memory goes back to
the system when it exits.

A spawn costs about 30 ms (80 ms measured on a loaded 2-core machine), far more than
a small module's parse, and was most of a small submit's time. So a child answers one
parse after another (one at a time) and is replaced when it dies, passes its time (it
is killed), has parsed a large module (:data:`RECYCLE_SOURCE_BYTES`: its memory goes
back to the system) or :data:`RECYCLE_PARSES` modules; an idle child exits by itself
after :data:`CHILD_IDLE_SECS`. And what a module defines is cached by the sha256 of its
bytes (:class:`NamesCache`): the same code submitted again is not parsed again. The
key is the content, never a name, so a module changed under the same name is parsed.

The pipes between the daemon and a child::

    request  !II  member's length, source's length; the member (UTF-8); the source
    reply    !BI  status (0: names, 2: the source does not parse), payload's length;
                  the payload: the names as a JSON list, or the CodeError's message
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path

from ...topology.code import CodeError

#: Address space the child may use: ~3x what the largest module it is given
#: (max_code_parse_bytes) needs to parse, measured at ~370 MB for 900 KiB.
CHILD_MEMORY_BYTES = 1 << 30
#: Seconds a child may take per module; 256 KiB parse in ~0.2 s, 900 KiB in ~0.8 s.
CHILD_TIMEOUT_SECS = 20.0
#: A child that parsed a module this large exits after answering: a large parse leaves
#: its heap grown, and the memory goes back to the system only when the process ends
#: (64 KiB parse in ~50 ms, as long as a spawn, so this costs little).
RECYCLE_SOURCE_BYTES = 64 << 10
#: Parses a child answers before it is replaced: bounds what one child's heap can
#: accumulate from many small parses.
RECYCLE_PARSES = 1000
#: An idle child exits after this long by itself (so none lingers after the last
#: submit, nor after its daemon object is gone); the daemon stops using one idle half
#: as long, so a request never meets a child as it exits.
CHILD_IDLE_SECS = 120.0
#: Idle children kept for the next parse: as many as submits are checked at once
#: (topologies.CODE_CHECK_SLOTS); more are stopped when returned.
MAX_IDLE_CHILDREN = 2
#: Modules whose names the cache keeps at most (least recently used go first).
NAMES_CACHE_MODULES = 4096
#: Names the cache holds at most in all (~100 bytes each with the set around them, so
#: ~10 MB); one module with more than a quarter of this is not cached.
NAMES_CACHE_NAMES = 100_000
#: The directory holding the ``nimbus_thrift`` package, on the child's path.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
_REQUEST = struct.Struct("!II")
_REPLY = struct.Struct("!BI")
_NAMES, _DOES_NOT_PARSE = 0, 2
#: What the child runs: cap its memory, then answer requests (see the module docstring)
#: until its stdin closes or stays idle for CHILD_IDLE_SECS. Anything unexpected (a
#: MemoryError reading a request past the cap) ends it with a traceback on stderr.
_CHILD = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEMORY_BYTES}, {CHILD_MEMORY_BYTES}))
import json, os, select, struct
from nimbus_thrift.topology.code import CodeError, top_level_names
def exactly(size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(0, min(size - len(data), 1 << 20))
        if not chunk:
            sys.exit(0)
        data += chunk
    return bytes(data)
while select.select([0], [], [], {CHILD_IDLE_SECS})[0]:
    head = os.read(0, {_REQUEST.size})
    if not head:
        break
    head += exactly({_REQUEST.size} - len(head))
    member_size, source_size = struct.unpack("{_REQUEST.format}", head)
    member = exactly(member_size).decode("utf-8", "surrogatepass")
    source = exactly(source_size)
    try:
        status, payload = {_NAMES}, json.dumps(sorted(top_level_names(member, source)))
    except CodeError as exc:
        status, payload = {_DOES_NOT_PARSE}, str(exc)
    del source
    data = payload.encode("utf-8", "surrogatepass")
    sys.stdout.buffer.write(struct.pack("{_REPLY.format}", status, len(data)) + data)
    sys.stdout.buffer.flush()
"""


class _Child:
    """One parsing child process and what the daemon knows of it."""

    def __init__(self) -> None:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": _PACKAGE_ROOT,
               "PYTHONDONTWRITEBYTECODE": "1"}
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", _CHILD],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        os.set_blocking(self.proc.stdin.fileno(), False)   # writes wait in poll()
        self.parses = 0
        self.idle_since = time.monotonic()

    def parse(self, member: str, source: bytes) -> frozenset[str]:
        """The names of ``source``, parsed in this child.

        Raises:
            CodeError: it does not parse, or the child died or passed its time (it is
            then stopped: the caller must not use it again).
        """
        self.parses += 1
        name = member.encode("utf-8", "surrogatepass")
        request = _REQUEST.pack(len(name), len(source)) + name + source
        try:
            reply = self._exchange(request, time.monotonic() + CHILD_TIMEOUT_SECS)
        except TimeoutError:
            self.stop()
            raise CodeError(f"{member} took over {CHILD_TIMEOUT_SECS:.0f} s to parse") \
                from None
        if reply is None:
            raise self._death(member)
        status, payload = reply
        if status == _NAMES:
            return frozenset(json.loads(payload))
        raise CodeError(payload.decode("utf-8", "replace"))

    def _exchange(self, request: bytes, deadline: float) -> tuple[int, bytes] | None:
        """Write ``request``, read the reply; None when the child's pipes closed first.

        Raises:
            TimeoutError: past ``deadline``.
        """
        assert self.proc.stdin is not None and self.proc.stdout is not None
        out_fd, in_fd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(out_fd, select.POLLOUT)
        poller.register(in_fd, select.POLLIN)
        view, sent, got = memoryview(request), 0, bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for fd, events in poller.poll(left * 1000):
                if fd == out_fd:
                    if events & (select.POLLERR | select.POLLHUP):
                        return None
                    try:
                        sent += os.write(out_fd, view[sent:sent + (1 << 16)])
                    except BrokenPipeError:
                        return None
                    except BlockingIOError:
                        continue
                    if sent == len(request):
                        poller.unregister(out_fd)
                else:
                    chunk = os.read(in_fd, 1 << 16)
                    if not chunk:
                        return None
                    got += chunk
                    if len(got) >= _REPLY.size:
                        status, size = _REPLY.unpack_from(got)
                        if len(got) >= _REPLY.size + size:
                            return status, bytes(got[_REPLY.size:_REPLY.size + size])

    def _death(self, member: str) -> CodeError:
        """Stop the child that closed its pipes mid-request; what to tell the client."""
        self.stop()
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read() if not self.proc.stderr.closed else b""
        lines = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or \
            [f"exit status {self.proc.returncode}"]
        if "MemoryError" in lines[0]:     # past the cap before the parse began
            return CodeError(f"{member} needs more than {CHILD_MEMORY_BYTES >> 20} MiB "
                             "to parse")
        return CodeError(f"{member} could not be parsed ({lines[0]})")

    def reusable(self, now: float) -> bool:
        """Whether the next parse may use this child."""
        return self.proc.poll() is None and self.parses < RECYCLE_PARSES and \
            now - self.idle_since < CHILD_IDLE_SECS / 2

    def stop(self) -> None:
        """Kill the child (if alive), reap it and close its stdin and stdout; its
        stderr stays readable (what it said as it died)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        """Stop the child and close every pipe."""
        self.stop()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class NamesCache:
    """A module's top-level names by the sha256 of its bytes, least recently used
    dropped past :data:`NAMES_CACHE_MODULES` modules or :data:`NAMES_CACHE_NAMES` names.
    Only modules that parsed are kept (a refusal is checked again). Thread-safe."""

    def __init__(self, max_modules: int = NAMES_CACHE_MODULES,
                 max_names: int = NAMES_CACHE_NAMES):
        self.max_modules, self.max_names = max_modules, max_names
        self._entries: OrderedDict[bytes, frozenset[str]] = OrderedDict()
        self._names = 0
        self._lock = threading.Lock()

    def get(self, key: bytes) -> frozenset[str] | None:
        with self._lock:
            names = self._entries.get(key)
            if names is not None:
                self._entries.move_to_end(key)
            return names

    def put(self, key: bytes, names: frozenset[str]) -> None:
        if len(names) > self.max_names // 4:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = names
            self._names += len(names)
            while len(self._entries) > self.max_modules or self._names > self.max_names:
                _, old = self._entries.popitem(last=False)
                self._names -= len(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def names(self) -> int:
        """Names held in all."""
        with self._lock:
            return self._names


class CodeChecker:
    """Parses modules for the daemon: :meth:`parse` is a
    :data:`~nimbus_thrift.topology.code.Parser`. Children are started when first
    needed, reused, replaced (see the module docstring), and stopped when the checker
    is closed or collected. Thread-safe: concurrent parses use different children."""

    def __init__(self, cache: NamesCache | None = None):
        self.cache = cache if cache is not None else NamesCache()
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._spawned = 0
        # Children still idle when the checker is collected (or at exit) are stopped
        # then; the list object is shared, so this sees the current ones.
        self._finalizer = weakref.finalize(self, _close_all, self._idle, self._lock)

    @property
    def spawned(self) -> int:
        """Children started so far (for tests and diagnostics)."""
        return self._spawned

    def parse(self, member: str, source: bytes) -> frozenset[str]:
        """The top-level names of ``source`` (the module file ``member``): from the
        cache when the same bytes parsed before, else parsed in a child.

        Raises:
            CodeError: the source does not parse, or its parse passed the child's
            memory or time (a sentence naming the module).
        """
        key = hashlib.sha256(source).digest()
        names = self.cache.get(key)
        if names is None:
            names = self.parse_uncached(member, source)
            self.cache.put(key, names)
        return names

    def parse_uncached(self, member: str, source: bytes) -> frozenset[str]:
        """As :meth:`parse`, always in a child."""
        child = self._take()
        keep = False
        try:
            names = child.parse(member, source)
            keep = len(source) < RECYCLE_SOURCE_BYTES
            return names
        except CodeError:
            keep = len(source) < RECYCLE_SOURCE_BYTES and child.proc.poll() is None
            raise
        finally:
            self._give_back(child, keep)

    def _take(self) -> _Child:
        now = time.monotonic()
        stale = []
        with self._lock:
            while self._idle:
                child = self._idle.pop()
                if child.reusable(now):
                    break
                stale.append(child)
            else:
                child = None
        for old in stale:
            old.close()
        if child is None:
            child = _Child()
            with self._lock:
                self._spawned += 1
        return child

    def _give_back(self, child: _Child, keep: bool) -> None:
        if keep and child.proc.poll() is None:
            child.idle_since = time.monotonic()
            with self._lock:
                if len(self._idle) < MAX_IDLE_CHILDREN and self._finalizer.alive:
                    self._idle.append(child)
                    return
        child.close()

    def close(self) -> None:
        """Stop the idle children (a parse under way stops its own when done)."""
        self._finalizer()


def _close_all(idle: list[_Child], lock: threading.Lock) -> None:
    with lock:
        children, idle[:] = list(idle), []
    for child in children:
        child.close()


def parse_in_child(member: str, source: bytes) -> frozenset[str]:
    """:func:`~nimbus_thrift.topology.code.top_level_names` of ``source``, computed in
    a child process with bounded memory and time, started for this parse alone (the
    daemon keeps a :class:`CodeChecker` instead).

    Raises:
        CodeError: the source does not parse, or its parse passed the child's memory
        or time (a sentence naming the module).
    """
    checker = CodeChecker()
    try:
        return checker.parse_uncached(member, source)
    finally:
        checker.close()
