"""The processes of an application, read from ``/proc``; signals to them, and how
one ended (:func:`exit_text`).

A topology's processes share the session (and process group) of the JVM that
spark-submit execs; ``pyspark.daemon`` puts itself in a process group of its own, in
the same session. A pid alone may be reused: with its start time it names one process.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

#: After SIGKILL a session's processes are gone within a fraction of a second (0.12 s
#: measured): how long to wait for them before reporting survivors.
KILL_WAIT_SECS = 5.0


@dataclass(frozen=True)
class ProcInfo:
    """The fields of ``/proc/<pid>/stat`` the launcher needs."""

    pid: int
    state: str                  # R, S, D, Z (zombie), X (dead), ...
    pgrp: int
    session: int
    start_ticks: int            # clock ticks after boot: with the pid, identifies it

    @property
    def live(self) -> bool:
        return self.state not in ("Z", "X")


def proc_info(pid: int) -> ProcInfo | None:
    """``/proc/<pid>/stat`` parsed, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (OSError, ValueError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces and ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return ProcInfo(pid, fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def session_members(leader: int, start_ticks: int) -> list[ProcInfo]:
    """Live processes of the session (or process group) ``leader`` started, oldest first.

    While any process of a session or group lives, the kernel does not hand its id to
    a new process; so if ``leader`` now names a different process (another start
    time), the session is gone and nothing is returned.
    """
    head = proc_info(leader)
    if head is not None and head.start_ticks != start_ticks:
        return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = proc_info(int(entry))
        if info is not None and info.live and leader in (info.session, info.pgrp) \
                and info.start_ticks >= start_ticks:
            members.append(info)
    return sorted(members, key=lambda p: (p.start_ticks, p.pid))


def signal_session(leader: int, start_ticks: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``leader`` and to every live process of its
    session (see :func:`session_members`)."""
    try:
        os.killpg(leader, sig)
    except OSError:
        pass
    # pyspark.daemon puts itself in a process group of its own, in the same session.
    for proc in session_members(leader, start_ticks):
        try:
            os.kill(proc.pid, sig)
        except OSError:
            pass


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the process group of ``process`` (a session leader), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.wait()


def proc_cmdline(pid: int) -> list[str]:
    """The command line of process ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]


def exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
