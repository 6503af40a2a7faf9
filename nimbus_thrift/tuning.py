"""Process-wide tuning a long-running server wants and a library must not impose:
the CLI calls these; embedders may.

Why the allocator: with glibc's defaults, every multi-megabyte request costs fresh pages.
A 1 MiB frame, its decoded string and its encoded reply are freed at the top of the
heap, glibc trims them back to the kernel (brk, madvise), and the next request faults
and zeroes them again. Measured with scripts/bench.sh (4 connections echoing 1 MiB):
about 620 MB/s with the defaults, about 1500 MB/s with buffers kept for reuse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import resource
import time
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: Allocations up to this size come from the heap, where freed blocks are reused.
#: glibc's largest allowed value on 64-bit (HEAP_MAX_SIZE / 2), above the default
#: max frame size.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Freed memory kept at the top of the heap before glibc returns it to the kernel.
TRIM_THRESHOLD = 128 * 1024 * 1024

#: The same settings as environment variables, for child processes (glibc reads them
#: at start-up).
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
                 "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}

#: The bounded profile (the Nimbus daemon's): buffers from this size up get their own
#: mapping, returned to the kernel when freed. Setting it also turns off glibc's
#: dynamic threshold, which after the first large free serves every later large
#: buffer from the per-thread heaps: there, 64 workers' freed 1 MB replies stayed
#: resident (1,000 clients not reading a 900 KB conf: +190 MiB at the peak, 115 MiB
#: of it free memory glibc kept; scripts/abuse/nimbus_rows.py --rows 5).
BOUNDED_MMAP_THRESHOLD = 256 * 1024
#: ... and the heap keeps at most this much freed memory at its top.
BOUNDED_TRIM_THRESHOLD = 1024 * 1024

PROFILES = {
    # Throughput on multi-megabyte frames (the demo server, the benchmarks).
    "reuse": (MMAP_THRESHOLD, TRIM_THRESHOLD),
    # Memory that stays near what is live, whatever clients do: a daemon whose large
    # requests are occasional (uploads, confs) and whose clients may be hostile.
    "bounded": (BOUNDED_MMAP_THRESHOLD, BOUNDED_TRIM_THRESHOLD),
}


def tune_allocator(profile: str = "reuse") -> bool:
    """Set glibc's ``mallopt`` thresholds to ``profile`` (see :data:`PROFILES`).

    "reuse" keeps freed multi-megabyte buffers for reuse, at the cost of up to
    :data:`TRIM_THRESHOLD` bytes of freed memory kept after a burst of large requests;
    "bounded" returns them at once, at the cost of fresh pages for each. Returns
    False, changing nothing, where the C library is not glibc.
    """
    mmap_threshold, trim_threshold = PROFILES[profile]
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    if not (mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
            and mallopt(_M_TRIM_THRESHOLD, trim_threshold)):
        log.warning("allocator_tuning_failed", profile=profile, effect="glibc defaults kept")
        return False
    return True


#: How often the collector scans every object once more (see :class:`GcPauses`).
FULL_SCAN_EVERY_SECS = 600.0


class GcPauses:
    """Full garbage collections that scan what is new, not the whole heap.

    Why: a daemon's heap is mostly long-lived (a row, a summary, an info per stored
    topology), and CPython's full collection scans all of it each time a quarter more
    has survived: at 5,000 topologies (about 400,000 tracked objects) that was a pause
    of 60 to 250 ms every few seconds, every thread stopped, and the whole of the
    control plane's p99 (scripts/bench/control_plane.sh; 0.5 ms p50 around it).

    How: after each full collection, what survived it is frozen (``gc.freeze``): the
    next full collection scans only what came since, so pauses shrink with the heap's
    churn, not its size. Frozen objects are still freed by reference counting (nearly
    all of them); a cycle among them is only found once frozen objects are scanned
    again, which :data:`FULL_SCAN_EVERY_SECS` bounds: the first full collection after
    that long unfreezes everything first, so it scans all, and garbage cycles wait at
    most that long.
    """

    def __init__(self, full_scan_every: float = FULL_SCAN_EVERY_SECS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._every = full_scan_every
        self._clock = clock
        self._last_full_scan = clock()
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_collection)
            self._installed = True

    def uninstall(self) -> None:
        """Stop freezing, and give back to the collector everything frozen."""
        if self._installed:
            gc.callbacks.remove(self._on_collection)
            self._installed = False
            gc.unfreeze()

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            if self._clock() - self._last_full_scan >= self._every:
                gc.unfreeze()           # this collection scans every object
                self._last_full_scan = self._clock()
        else:
            gc.freeze()


def tune_gc() -> GcPauses:
    """Install :class:`GcPauses` for this process (the daemon's CLI does)."""
    pauses = GcPauses()
    pauses.install()
    return pauses


#: Where Linux caps RLIMIT_NOFILE whatever the hard limit says (fs.nr_open), read when
#: the hard limit is unlimited: a soft limit above it is refused.
NR_OPEN_PATH = "/proc/sys/fs/nr_open"


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (or, when that is
    unlimited, to the kernel's fs.nr_open); return (before, after).

    Why: the usual soft limit is 1,024 (kept low for programs that still use
    ``select()``, which cannot see a descriptor above 1,023), while a server's default
    max_connections is 4,096; the hard limit is what the administrator allows. The
    server clamps its connections to whatever soft limit is in force
    (rpc.options.ServerOptions.within_open_files), so this only gives it room. Child
    processes (spark-submit, its JVM) inherit the raised limit; the JVM raises its own
    anyway. Fails soft: if the kernel refuses, the limit stays as it was.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            with open(NR_OPEN_PATH) as f:
                target = int(f.read())
        except (OSError, ValueError):
            return soft, soft
    if soft != resource.RLIM_INFINITY and soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError) as exc:
        log.warning("open_files_limit_not_raised", soft=soft, hard=hard, error=str(exc))
        return soft, soft
    return soft, target
