"""run_as_user's pieces without Spark: who a principal runs as, the daemon acting as a
work directory's owner on its files, handing a directory over, what other users can
reach, the settings. Acting as another user needs root (CI runs as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from nimbus_thrift.nimbus.config import ConfigError, NimbusConfig, load_config
from nimbus_thrift.nimbus.security.runas import (RunAsRefused, acting_as, as_owner_of,
                                        os_user_named, os_user_of, os_user_owning,
                                        own_work_dir, process_options, run_as_name,
                                        unreachable_parts)

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory other users may enter (pytest's tmp_path is under a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="nimbus-runas-", dir="/tmp"))
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user "
                                "needs root (CI runs as root)")


def test_a_principal_runs_as_its_own_name_or_its_mapping() -> None:
    assert os_user_of("nobody", {}).uid == NOBODY.pw_uid
    mapped = os_user_of("CN of a laptop", {"CN of a laptop": "nobody"})
    assert (mapped.name, mapped.uid, mapped.home) == ("nobody", NOBODY.pw_uid,
                                                      NOBODY.pw_dir)
    assert NOBODY.pw_gid in mapped.groups


@pytest.mark.parametrize("principal, mapping, says", [
    ("no-such-account-here", {}, "has no OS account on the daemon's machine "
                                 "(looked up 'no-such-account-here')"),
    ("root", {}, "is OS user 'root', which is root"),
    ("carol", {"carol": "root"}, "maps to OS user 'root', which is root"),
])
def test_root_the_daemon_and_missing_accounts_are_refused(
        principal: str, mapping: dict[str, str], says: str) -> None:
    with pytest.raises(RunAsRefused) as caught:
        os_user_of(principal, mapping)
    assert says in str(caught.value) and caught.value.principal == principal


def test_the_daemons_own_user_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nimbus_thrift.nimbus.security.runas.os.geteuid", lambda: NOBODY.pw_uid)
    with pytest.raises(RunAsRefused, match="is OS user 'nobody', the daemon's own user"):
        os_user_of("nobody", {})


def test_run_as_name_is_empty_without_run_as_user() -> None:
    assert run_as_name(NimbusConfig(), "alice") == ""
    config = NimbusConfig(run_as_user=True, principal_users=(("alice", "al"),))
    assert (run_as_name(config, "alice"), run_as_name(config, "bob")) == ("al", "bob")


def test_principal_users_from_yaml_environment_and_refused_values(tmp_path: Path) -> None:
    path = tmp_path / "nimbus.yaml"
    path.write_text("principal_users: {alice: al, ci-deploy: ci}\nrun_as_user: true\n")
    config = load_config(path, env={})
    assert dict(config.principal_users) == {"alice": "al", "ci-deploy": "ci"}
    assert config.run_as_user
    env = load_config(env={"NIMBUS_THRIFT_PRINCIPAL_USERS": "alice=al, bob = b"})
    assert dict(env.principal_users) == {"alice": "al", "bob": "b"}
    for bad in ("alice", "alice=", "=al"):
        with pytest.raises(ConfigError, match="principal_users"):
            load_config(env={"NIMBUS_THRIFT_PRINCIPAL_USERS": bad})
    with pytest.raises(ConfigError, match="OS user name"):
        load_config(env={}, flags={"principal_users": {"alice": "../etc"}})


def test_a_process_as_a_user_gets_its_ids_groups_home_and_umask() -> None:
    user = os_user_named("nobody")
    assert user is not None
    env, options = process_options(user, {"HOME": "/root", "PATH": "/bin", "USER": "x"})
    assert env == {"HOME": NOBODY.pw_dir, "PATH": "/bin", "USER": "nobody",
                   "LOGNAME": "nobody", "SHELL": NOBODY.pw_shell}
    assert options == {"user": NOBODY.pw_uid, "group": NOBODY.pw_gid,
                       "extra_groups": list(user.groups), "umask": 0o077}
    assert process_options(None, {"HOME": "/root"}) == ({"HOME": "/root"}, {})


def test_unreachable_parts_name_each_closed_directory(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    inner = closed / "inner"
    inner.mkdir(parents=True)
    (inner / "file").write_text("x")
    os.chmod(closed, 0o700)
    os.chmod(inner, 0o755)
    os.chmod(inner / "file", 0o600)
    problems = unreachable_parts(inner / "file", read=True)
    assert f"{closed} is mode 0700" in problems
    assert f"{inner / 'file'} is mode 0600" in problems
    os.chmod(closed, 0o711)
    os.chmod(inner / "file", 0o644)
    assert [p for p in unreachable_parts(inner / "file", read=True)
            if str(closed) in p] == []


@needs_root
def test_the_daemon_writes_a_work_directory_as_its_owner(open_tmp: Path) -> None:
    tmp_path = open_tmp
    user = os_user_named("nobody")
    assert user is not None
    work = tmp_path / "work"
    own_work_dir(work, user)
    st = os.lstat(work)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY.pw_uid, 0o700)
    assert os_user_owning(work) == user
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    os.chmod(secret, 0o644)
    # What the topology plants: a link from a file the daemon writes to one of root's.
    os.symlink(secret, work / "control")
    with as_owner_of(work):
        with pytest.raises(PermissionError):
            with open(work / "control", "w") as f:
                f.write("stop\n")
        (work / "made").write_text("as nobody")
    assert secret.read_text() == "root's\n"
    assert os.stat(work / "made").st_uid == NOBODY.pw_uid
    # Out of the block the thread is the daemon again.
    (tmp_path / "after").write_text("as root")
    assert os.stat(tmp_path / "after").st_uid == 0


@needs_root
def test_a_daemon_directory_is_handed_over_whole_without_following_links(
        tmp_path: Path) -> None:
    user = os_user_named("nobody")
    assert user is not None
    target = tmp_path / "target"
    target.write_text("root's")
    work = tmp_path / "work"
    (work / "code").mkdir(parents=True)
    (work / "code" / "m.py").write_text("x = 1")
    os.symlink(target, work / "link")
    own_work_dir(work, user)
    for path in (work, work / "code", work / "code" / "m.py", work / "link"):
        assert os.lstat(path).st_uid == NOBODY.pw_uid, path
    assert os.stat(target).st_uid == 0


@needs_root
def test_acting_as_is_the_calling_threads_alone(open_tmp: Path) -> None:
    tmp_path = open_tmp
    import threading

    seen: list[int] = []
    entered, done = threading.Event(), threading.Event()

    def other() -> None:
        entered.wait(10)
        path = tmp_path / "other"
        path.write_text("x")
        seen.append(os.stat(path).st_uid)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    os.chmod(tmp_path, 0o777)
    with acting_as(NOBODY.pw_uid, NOBODY.pw_gid):
        entered.set()
        done.wait(10)
        (tmp_path / "mine").write_text("x")
    thread.join(10)
    assert seen == [0]
    assert os.stat(tmp_path / "mine").st_uid == NOBODY.pw_uid


#: A child that loads runas.py by its path (the system Python has none of the package's
#: dependencies), seals itself if told to, prints its pid and waits to be killed. It
#: is started by a shell of that user: a process whose ids root changed before its
#: exec is not dumpable anyway, which would hide what seal_process does.
SEALED_CHILD = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("runas", sys.argv[1])
runas = sys.modules["runas"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runas)
if sys.argv[2] == "seal":
    assert runas.seal_process()
print(os.getpid(), flush=True)
time.sleep(60)
"""
READER = """
import sys
try:
    open(f"/proc/{sys.argv[1]}/environ", "rb").read()
    print("read")
except OSError as exc:
    print(type(exc).__name__)
"""


@needs_root
@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs the system Python, which uid 65534 may run")
@pytest.mark.parametrize("seal, outcome", [("seal", "PermissionError"), ("no", "read")])
def test_a_sealed_process_environment_is_not_its_own_users_to_read(
        seal: str, outcome: str) -> None:
    """seal_process (the daemon calls it at every start): a process of the same OS user
    (a topology running as the daemon's user) cannot read its /proc/<pid>/environ."""
    import subprocess

    import nimbus_thrift.nimbus.security.runas as runas

    source = Path(runas.__file__)
    copy = Path(tempfile.mkdtemp(prefix="nimbus-seal-", dir="/tmp"))
    try:
        os.chmod(copy, 0o755)
        shutil.copy(source, copy / "runas.py")
        os.chmod(copy / "runas.py", 0o644)
        with subprocess.Popen(["/bin/sh", "-c", '"$@" & wait', "sh", "/usr/bin/python3",
                               "-I", "-c", SEALED_CHILD, str(copy / "runas.py"), seal],
                              user=NOBODY.pw_uid, stdout=subprocess.PIPE,
                              text=True) as shell:
            assert shell.stdout is not None
            pid = int(shell.stdout.readline())
            try:
                reader = subprocess.run(["/usr/bin/python3", "-I", "-c", READER,
                                         str(pid)], user=NOBODY.pw_uid,
                                        capture_output=True, text=True, timeout=30)
            finally:
                os.kill(pid, 9)
                shell.wait(30)
        assert reader.stdout.strip() == outcome
    finally:
        shutil.rmtree(copy, ignore_errors=True)
