"""The daemon parses uploaded modules in a child process, never in its own.

``ast.parse`` holds the GIL for the whole parse and peaks at hundreds of MB per MiB of
dense source: in the daemon, one submit's parse stalled every other client's call for
its duration and left the memory to the daemon's allocator (scripts/abuse/nimbus_rows.py
row 2: 64 submits of 900 KiB modules kept a read-only call waiting 32 s and took the
daemon to 3.6 GB). In a child the worker thread only waits on a pipe (the GIL is free),
the child's address space is capped, its time is bounded, and its memory goes back to
the system when it exits. A spawn costs about 30 ms, once per module per submit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ...topology.code import CodeError

#: Address space the child may use: ~3x what the largest module it is given
#: (max_code_parse_bytes) needs to parse, measured at ~370 MB for 900 KiB.
CHILD_MEMORY_BYTES = 1 << 30
#: Seconds a child may take; 256 KiB parse in ~0.2 s, 900 KiB in ~0.8 s.
CHILD_TIMEOUT_SECS = 20.0
#: The directory holding the ``nimbus_thrift`` package, on the child's path.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: What the child runs: cap its memory, parse stdin, print the names as JSON. A parse
#: error is the CodeError's message on stderr and exit status 2.
_CHILD = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEMORY_BYTES}, {CHILD_MEMORY_BYTES}))
from nimbus_thrift.topology.code import CodeError, top_level_names
import json
try:
    names = top_level_names(sys.argv[1], sys.stdin.buffer.read())
except CodeError as exc:
    sys.stderr.write(str(exc))
    sys.exit(2)
sys.stdout.write(json.dumps(sorted(names)))
"""


def parse_in_child(member: str, source: bytes) -> frozenset[str]:
    """:func:`~nimbus_thrift.topology.code.top_level_names` of ``source``, computed in
    a child process with bounded memory and time.

    Raises:
        CodeError: the source does not parse, or its parse passed the child's memory
        or time (a sentence naming the module).
    """
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": _PACKAGE_ROOT,
           "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run([sys.executable, "-S", "-c", _CHILD, member], input=source,
                              capture_output=True, env=env, timeout=CHILD_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        raise CodeError(f"{member} took over {CHILD_TIMEOUT_SECS:.0f} s to parse") from None
    if done.returncode == 0:
        return frozenset(json.loads(done.stdout))
    if done.returncode == 2:
        raise CodeError(done.stderr.decode("utf-8", "replace"))
    reason = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or \
        [f"exit status {done.returncode}"]
    if "MemoryError" in reason[0]:     # past the cap before the parse began
        raise CodeError(f"{member} needs more than {CHILD_MEMORY_BYTES >> 20} MiB to parse")
    raise CodeError(f"{member} could not be parsed ({reason[0]})")
