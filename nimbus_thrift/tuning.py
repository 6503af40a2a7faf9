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


def tune_allocator() -> bool:
    """Keep freed multi-megabyte buffers for reuse (glibc ``mallopt``).

    Costs up to :data:`TRIM_THRESHOLD` bytes of freed memory kept in the process after
    a burst of large requests. Returns False, changing nothing, where the C library is
    not glibc.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        log.warning("allocator_tuning_failed", effect="glibc defaults kept")
        return False
    return True
