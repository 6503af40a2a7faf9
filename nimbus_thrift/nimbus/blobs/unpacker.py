"""Archive blobs unpacked in a child process with memory and time limits, as the code
checks parse modules (:mod:`..service.codecheck`): the daemon's worker thread only
waits on a pipe (the GIL stays free for every other call), the child's address space
is capped, it is killed past its time, and its memory goes back to the system when it
exits. The walk itself, bounded as it reads, is :mod:`.archives`'.

Unlike the code checks' children, one child unpacks one archive and exits: it writes
as the work directory's owner (it drops to that user for good when the daemon runs
topologies as other users), so it cannot serve the next owner; and archives are
placed far more rarely than modules are parsed, so the spawn (30-80 ms) is not worth
saving. At most :data:`UNPACK_SLOTS` children run at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from . import archives
from .archives import ArchiveLimits, ArchiveRefused, Unpacked

#: Address space a child may use: the interpreter (~30 MB), a decompressor's state
#: (bzip2 ~8 MB, xz up to ~100 MB at its highest presets) and one chunk, with room;
#: headers read whole (a pax header of hundreds of MB) pass it and are refused.
CHILD_MEMORY_BYTES = 512 << 20
#: Seconds a child may take, at least: a bomb stops at the first limit it passes, and
#: the member count's (100,000 empty files of a bzip2 tar, each created) took 9-14 s
#: on a loaded 2-core machine, so a real archive of that many files has room ...
CHILD_MIN_SECS = 60.0
#: ... plus a second per this many bytes it may write: a slow disk's rate, so that an
#: archive within its byte limit is never killed for taking long.
CHILD_BYTES_PER_SEC = 20 << 20
#: Children unpacking at once; placements past it wait (each under its own work
#: directory's lock only).
UNPACK_SLOTS = 2
#: The script the child runs (the standard library only; no package import).
_SCRIPT = str(Path(archives.__file__).resolve())

_slots = threading.BoundedSemaphore(UNPACK_SLOTS)


def time_limit(limits: ArchiveLimits) -> float:
    """Seconds a child unpacking within ``limits`` may take."""
    return CHILD_MIN_SECS + limits.max_bytes / CHILD_BYTES_PER_SEC


def unpack_in_child(source: BinaryIO, dest: Path, limits: ArchiveLimits, *,
                    uid: int, gid: int,
                    memory_bytes: int = CHILD_MEMORY_BYTES,
                    timeout: float | None = None) -> Unpacked:
    """Unpack the archive ``source`` (the blob's file, open) into the directory
    ``dest`` (made by the caller) in a child process acting as ``uid``:``gid``, within
    ``limits``, ``memory_bytes`` of address space and ``timeout`` seconds (default
    :func:`time_limit`).

    Raises:
        ArchiveRefused: a limit of the archive, the child's memory or its time passed,
            or the child died; one sentence (what the child wrote stays: the caller
            removes ``dest``).
    """
    seconds = time_limit(limits) if timeout is None else timeout
    args = [sys.executable, "-I", "-S", _SCRIPT, str(dest), str(limits.max_bytes),
            str(limits.max_entries), str(memory_bytes), str(uid), str(gid)]
    with _slots:
        source.seek(0)
        proc = subprocess.Popen(args, stdin=source, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={"PATH": os.environ.get(
                                    "PATH", "")})
        try:
            out, err = proc.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise ArchiveRefused(f"unpacking it took over {seconds:.0f} s (the limit); "
                                 "it was stopped") from None
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
    try:
        answer = json.loads(out.decode("utf-8", "replace").splitlines()[-1])
    except (ValueError, IndexError):
        raise _death(proc.returncode, err, memory_bytes) from None
    if "refused" in answer:
        raise ArchiveRefused(str(answer["refused"]))
    return Unpacked(int(answer["entries"]), int(answer["bytes"]))


def _death(status: int, stderr: bytes, memory_bytes: int) -> ArchiveRefused:
    """Why a child that answered nothing died, as a sentence."""
    lines = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or \
        [f"exit status {status}"]
    if "MemoryError" in lines[0]:
        return ArchiveRefused(f"unpacking it needs more than {memory_bytes >> 20} MiB "
                              "(the limit)")
    return ArchiveRefused(f"the unpacking process died ({lines[0]})")
