"""Which OS user a topology runs as (``run_as_user``), and the daemon acting as that
user on the files of a topology's work directory.

Theory of operation. With ``run_as_user`` the daemon runs as root; each topology's
processes run as the OS user its owner maps to (:func:`os_user_of`): a local principal
(Unix socket, loopback TCP) is its OS user, a certificate principal maps through
``principal_users`` (by default the name itself, as Storm's default principal-to-local
mapping takes the name). Never root, never the daemon's own user, never a name that is
no account here: those are refused at submit (:class:`RunAsRefused`).

A topology's work directory then belongs to its user (mode 0700): the topology may
write anything in it, so the daemon, which is root, must never follow what the
topology planted there (a symbolic link from ``control`` to ``/etc/shadow``, a ``logs``
directory replaced by a link to ``/etc``). Every file operation of the daemon inside a
work directory runs under :func:`as_owner_of`: for that block, the calling thread's
filesystem identity (Linux's fsuid and fsgid, which are per thread, and which drop
root's override capabilities while they are not 0) is the directory's owner. Whatever
the daemon then does there, the kernel checks as that user: it can harm nothing the
user could not. The owner is read from the directory itself, which only root can
``chown``: no record the topology can write says who it is.

Without ``run_as_user`` every directory is the daemon's and :func:`as_owner_of` does
nothing.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

#: Modes under ``run_as_user``: the data directory and ``topologies/`` may be
#: entered by anyone (to reach one's own work directory by its name) but listed by
#: nobody but the daemon; a work directory is its user's alone.
TRAVERSE_MODE = 0o711
WORK_DIR_MODE = 0o700
#: Names a topology's principal must not map to, whatever principal_users says.
ROOT_UID = 0


class RunAsRefused(Exception):
    """A principal whose topologies cannot run as an OS user; the message says why."""

    def __init__(self, principal: str, reason: str):
        self.principal = principal
        self.reason = reason
        super().__init__(f"{principal!r} {reason}")


@dataclass(frozen=True)
class OsUser:
    """An OS account a topology runs as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str


def os_user_of(principal: str, principal_users: Mapping[str, str]) -> OsUser:
    """The OS user ``principal``'s topologies run as.

    Raises:
        RunAsRefused: the principal maps to no account here, to root or to the
            daemon's own user.
    """
    name = principal_users.get(principal, principal)
    mapped = f"maps to OS user {name!r}" if name != principal else \
        f"is OS user {name!r}"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise RunAsRefused(principal, f"has no OS account on the daemon's machine "
                           f"(looked up {name!r}); its topologies would run as it "
                           "(run_as_user): map the principal to an account in "
                           "principal_users") from None
    if entry.pw_uid == ROOT_UID:
        raise RunAsRefused(principal, f"{mapped}, which is root: "
                           "topologies never run as root")
    if entry.pw_uid == os.geteuid():
        raise RunAsRefused(principal, f"{mapped}, the daemon's own "
                           "user: topologies never run as the daemon")
    return _os_user(entry)


def _os_user(entry: pwd.struct_passwd) -> OsUser:
    return OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid,
                  tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
                  entry.pw_dir, entry.pw_shell)


def run_as_name(config: Any, owner: str) -> str:
    """The OS user name ``owner``'s topologies run as under ``config`` (a
    NimbusConfig); empty without run_as_user (the daemon's)."""
    if not config.run_as_user:
        return ""
    return str(dict(config.principal_users).get(owner, owner))


def os_user_named(name: str) -> OsUser | None:
    """The account ``name`` (a launch's run-as user), None if there is none."""
    try:
        return _os_user(pwd.getpwnam(name))
    except KeyError:
        return None


def os_user_owning(directory: Path) -> OsUser | None:
    """The OS user a work directory belongs to, None when it is the daemon's own (or
    when its owner has no account any more: then nothing runs as it)."""
    uid = os.lstat(directory).st_uid
    if uid == os.geteuid():
        return None
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise PermissionError(f"{directory} belongs to uid {uid}, which has no account "
                              "on this machine any more") from None
    return os_user_named(name)


def process_options(user: OsUser | None, env: Mapping[str, str]
                    ) -> tuple[dict[str, str], dict[str, object]]:
    """The environment and the ``subprocess.Popen`` options of a process that runs as
    ``user`` (as the daemon when None): its ids and groups, its own HOME, USER,
    LOGNAME and SHELL, and a umask that keeps what it makes its own."""
    if user is None:
        return dict(env), {}
    env = {**env, "HOME": user.home, "USER": user.name, "LOGNAME": user.name,
           "SHELL": user.shell or "/bin/sh"}
    return env, {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups),
                 "umask": 0o077}


# --- the thread's filesystem identity -------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


def _switch(call: ctypes._NamedFuncPointer, wanted: int) -> int:
    """Set the thread's fsuid or fsgid (``call``) to ``wanted``; the previous one.
    setfsuid reports no error: asking for -1 (never valid) reads the current one."""
    previous = int(call(wanted))
    if int(call(-1)) != wanted:
        raise PermissionError(f"cannot act as id {wanted} on files: the daemon is not "
                              "root (run_as_user needs a daemon running as root)")
    return previous


@contextmanager
def acting_as(uid: int, gid: int) -> Iterator[None]:
    """File operations of this thread, in this block, as ``uid``:``gid``."""
    old_gid = _switch(_libc.setfsgid, gid)
    try:
        old_uid = _switch(_libc.setfsuid, uid)
    except BaseException:
        _switch(_libc.setfsgid, old_gid)
        raise
    try:
        yield
    finally:
        _switch(_libc.setfsuid, old_uid)
        _switch(_libc.setfsgid, old_gid)


@contextmanager
def as_owner_of(directory: Path) -> Iterator[None]:
    """File operations in ``directory`` (a work directory) as its owner when that is
    not the daemon's user; as the daemon otherwise (and when it does not exist yet)."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        yield
        return
    if stat.S_ISLNK(st.st_mode):
        raise PermissionError(f"{directory} is a symbolic link, not a work directory")
    if st.st_uid == os.geteuid():
        yield
        return
    with acting_as(st.st_uid, st.st_gid):
        yield


def own_work_dir(directory: Path, user: OsUser) -> None:
    """Make ``directory`` (created if missing) ``user``'s, mode 0700. One that was the
    daemon's (run_as_user turned on later) is handed over whole; one of another user
    keeps its files and changes hands (the owner's mapping changed)."""
    directory.mkdir(parents=True, exist_ok=True, mode=WORK_DIR_MODE)
    st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{directory} is not a directory")
    if st.st_uid != user.uid or st.st_gid != user.gid:
        # Entries first, then the directory: nothing followed (lchown), and nothing
        # the old owner could still change once the new one holds the top.
        for root, dirs, files in os.walk(directory, topdown=False, followlinks=False):
            for name in dirs + files:
                os.chown(os.path.join(root, name), user.uid, user.gid,
                         follow_symlinks=False)
        os.chown(directory, user.uid, user.gid, follow_symlinks=False)
    os.chmod(directory, WORK_DIR_MODE, follow_symlinks=False)


# --- what the daemon's process and machine must be -------------------------------------
def unreachable_parts(path: Path, *, read: bool = False) -> list[str]:
    """Why another OS user cannot reach ``path``: each directory on the way that others
    may not enter (``o+x``), and with ``read``, the path itself if others may not read
    it. Empty when they can."""
    problems = []
    resolved = path.resolve()
    for parent in reversed(resolved.parents):
        try:
            mode = os.stat(parent).st_mode
        except OSError as exc:
            problems.append(f"{parent} ({exc.strerror or exc})")
            continue
        if not mode & stat.S_IXOTH:
            problems.append(f"{parent} is mode {stat.S_IMODE(mode):04o}")
    if read:
        try:
            mode = os.stat(resolved).st_mode
        except OSError as exc:
            problems.append(f"{resolved} ({exc.strerror or exc})")
        else:
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) or
                                   mode & stat.S_IXUSR else 0)
            if mode & need != need:
                problems.append(f"{resolved} is mode {stat.S_IMODE(mode):04o}")
    return problems


PR_SET_DUMPABLE = 4


def seal_process() -> bool:
    """Make this process undumpable: its ``/proc/<pid>/environ``, memory and file
    descriptors become root's to read, not every process of its user's (a topology
    running as the daemon's user included). True when it took."""
    try:
        return int(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (AttributeError, OSError):
        return False
