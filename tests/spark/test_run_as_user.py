"""run_as_user on real Spark with real OS users: two principals' topologies, each
running as its own account, each counting right and refused everything of the daemon
and of the other (read, write, signal), and the daemon acting as a topology's user
on what that topology planted in its own work directory.

Needs root (``useradd``, and a daemon that starts processes as other users): skipped
otherwise, with the reason. CI runs as root. The accounts are made for this module and
removed after it. The Python the topologies run may live under a home directory others
cannot enter (pyenv's, under /root here): the module lets others *enter* (o+x, not
list) the directories on its way for as long as it runs, as an administrator would
install it for run_as_user, and puts their modes back after.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus.spark.submit import PACKAGE_ROOT
from support.certs import make_pki
from support.spark_daemon import SPARK_TIMEOUT, in_process_daemon, wait_until
from support.wordcounts import counts

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WALLS = ROOT / "tests" / "topologies_submit" / "walls" / "walls.py"
#: The accounts this module makes (names no real account has) and the principals
#: (certificate CNs) that map to them.
ACCOUNTS = {"alice": "ntwalls-alice", "bob": "ntwalls-bob"}
TOTAL = 200          # sentences per topology: "the" is counted 300 times


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, pwd.struct_passwd]]:
    if os.geteuid() != 0:
        pytest.skip("run_as_user needs root: useradd, and a daemon that starts "
                    "processes as other users (CI runs as root)")
    if shutil.which("useradd") is None:
        pytest.skip("no useradd on this machine")
    made = []
    try:
        for name in ACCOUNTS.values():
            try:
                pwd.getpwnam(name)
            except KeyError:
                subprocess.run(["useradd", "--user-group", "--create-home",
                                "--shell", "/usr/sbin/nologin", name], check=True)
                made.append(name)
        yield {principal: pwd.getpwnam(name) for principal, name in ACCOUNTS.items()}
    finally:
        for name in made:
            subprocess.run(["userdel", "--remove", name], check=False,
                           stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def reachable_install() -> Iterator[None]:
    """Others may enter the directories on the way to this Python and the package."""
    changed: dict[Path, int] = {}
    for target in (Path(sys.executable).resolve(), PACKAGE_ROOT.resolve()):
        for parent in target.parents:
            mode = os.stat(parent).st_mode
            if not mode & stat.S_IXOTH and parent not in changed:
                changed[parent] = stat.S_IMODE(mode)
                os.chmod(parent, stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for path, mode in changed.items():
            os.chmod(path, mode)


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A directory other users may enter (tmp_path's ancestors are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="nimbus-walls-", dir="/tmp"))
    os.chmod(root, 0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _client(port: int, pki: Any, who: str) -> NimbusClient:
    cert = pki.clients[who]
    return NimbusClient("127.0.0.1", port, timeout=60, connect_timeout=5,
                        cert_file=cert.cert, key_file=cert.key, ca_file=pki.ca.cert)


def _counts(work_dir: Path) -> dict[str, int]:
    return counts(work_dir / "counts.sqlite")


def _probes(work_dir: Path) -> dict[str, str] | None:
    found = sorted(work_dir.glob("probes-*.json"))
    return json.loads(found[0].read_text()) if found else None


def _driver_pid(data_dir: Path, topology_id: str) -> int:
    record = json.loads((data_dir / "launches" / f"{topology_id}.json").read_text())
    return int(record["pid"])


def test_two_users_topologies_run_as_their_users_behind_walls(
        accounts: dict[str, pwd.struct_passwd], reachable_install: None,
        shared_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pki = make_pki(tmp_path / "pki", clients=("alice", "bob"))
    data_dir = shared_root / "data"
    canary = shared_root / "canary"
    canary.write_text("the daemon's\n")
    os.chmod(canary, 0o644)
    flags = {"data_dir": str(data_dir), "run_as_user": True, "principal_users": ACCOUNTS,
             "users": ["alice", "bob"], "tls_cert_file": str(pki.server.cert),
             "tls_key_file": str(pki.server.key), "tls_client_ca_file": str(pki.ca.cert)}
    with in_process_daemon(tmp_path, monkeypatch, **flags) as (daemon, (_, port), _l):
        topologies = data_dir / "topologies"
        with _client(port, pki, "bob") as bob:
            bob_id = bob.submit_topology(WALLS, name="bobs", conf={"walls.total": TOTAL},
                                         wait=True, timeout=SPARK_TIMEOUT)
        bob_dir = topologies / bob_id
        bob_pid = wait_until("bob's driver", lambda: _driver_pid(data_dir, bob_id))
        targets = {
            "state": str(data_dir / "nimbus.sqlite3"),
            "data_dir": str(data_dir),
            "topologies": str(topologies),
            "tls_key": str(pki.server.key),
            "bob_work_dir": str(bob_dir),
            "bob_code": str(bob_dir / "code.zip"),
            "bob_spec": str(bob_dir / "spec.json"),
            "bob_control": str(bob_dir / "control"),
            "bob_checkpoint": str(bob_dir / "checkpoint"),
            "daemon_environ": f"/proc/{os.getpid()}/environ",
            "package": str(PACKAGE_ROOT / "nimbus_thrift" / "nimbus" / "web" / "assets"
                           / "app.js"),
        }
        with _client(port, pki, "alice") as alice:
            alice_id = alice.submit_topology(
                WALLS, name="alices", conf={"walls.total": TOTAL, "walls.targets": targets,
                                            "walls.pids": {"daemon": os.getpid(),
                                                           "bob_driver": bob_pid}},
                wait=True, timeout=SPARK_TIMEOUT)
            alice_dir = topologies / alice_id

            # Each counted every sentence, as its own user.
            expected = {"the": 300, "cow": 100, "apple": 100}
            for work_dir in (bob_dir, alice_dir):
                got = wait_until(f"the counts of {work_dir.name}",
                                 lambda: (c := _counts(work_dir)).get("the") == 300 and c)
                assert {w: got[w] for w in expected} == expected
            for who, work_dir, topology_id in (("alice", alice_dir, alice_id),
                                               ("bob", bob_dir, bob_id)):
                uid = accounts[who].pw_uid
                st = os.stat(work_dir)
                assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700)
                assert os.stat(f"/proc/{_driver_pid(data_dir, topology_id)}").st_uid == uid
                assert (data_dir / "launches" / f"{topology_id}.json").stat().st_uid == 0

            # Everything of the daemon and of bob was out of alice's reach.
            probes = wait_until("alice's probes", lambda: _probes(alice_dir))
            assert probes["whoami"] == str(accounts["alice"].pw_uid)
            reached = {k: v for k, v in probes.items()
                       if k != "whoami" and v == "ok"}
            # The package is read by every topology (it runs it): written by none.
            assert reached == {"read:package": "ok"}, reached
            assert not (bob_dir / "walls-was-here").exists()
            assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o711

            # What alice plants in her own directory is followed, if at all, as alice:
            # her stdout made a link to a file of root's, then a relaunch (rebalance)
            # opens it to append.
            stdout = alice_dir / "logs" / "stdout"
            stdout.unlink()
            os.symlink(canary, stdout)
            os.chown(stdout, accounts["alice"].pw_uid, accounts["alice"].pw_gid,
                     follow_symlinks=False)
            alice.rebalance("alices", alice.idl.RebalanceOptions(wait_secs=0))
            # sched_status says failed; the reason is the daemon's error on record.
            status = wait_until("the relaunch to be refused", lambda: (
                i := alice.getTopologyInfo(alice_id)).sched_status == "failed"
                and "Permission denied" in (s := _errors_text(i)) and s)
            assert "cannot open its logs" in status, status
        assert canary.read_text() == "the daemon's\n"

        # Bob, still running, was not disturbed by any of it.
        with _client(port, pki, "bob") as bob:
            assert bob.getTopologyInfo(bob_id).sched_status == "running"


def _standby_owners(data_dir: Path) -> dict[str, tuple[int, int]]:
    """Each standby's directory: (its owner, the uid of its driver's process)."""
    found = {}
    for record in (data_dir / "standby").glob(".*.json"):
        sid = record.name[1:-len(".json")]
        pid = json.loads(record.read_text())["pid"]
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except FileNotFoundError:
            continue
        found[sid] = (os.stat(data_dir / "standby" / sid).st_uid, uid)
    return found


def _ready_standby(data_dir: Path, uid: int) -> str | None:
    from nimbus_thrift.runner.rundir import STANDBY_READY, RunDir
    for sid, owners in _standby_owners(data_dir).items():
        status = RunDir(data_dir / "standby" / sid).read_status()
        if owners == (uid, uid) and status is not None and status.state == STANDBY_READY:
            return sid
    return None


def _launch(data_dir: Path, topology_id: str) -> dict[str, Any]:
    return json.loads((data_dir / "launches" / f"{topology_id}.json").read_text())


def test_standby_drivers_are_one_users_and_taken_only_by_that_users_topologies(
        accounts: dict[str, pwd.struct_passwd], reachable_install: None,
        shared_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pki = make_pki(tmp_path / "pki", clients=("alice", "bob"))
    data_dir = shared_root / "data"
    alice_uid, bob_uid = accounts["alice"].pw_uid, accounts["bob"].pw_uid
    flags = {"data_dir": str(data_dir), "run_as_user": True, "principal_users": ACCOUNTS,
             "users": ["alice", "bob"], "standby_drivers": 1,
             "tls_cert_file": str(pki.server.cert), "tls_key_file": str(pki.server.key),
             "tls_client_ca_file": str(pki.ca.cert)}
    conf = {"walls.total": TOTAL}
    with in_process_daemon(tmp_path, monkeypatch, standbys=True, **flags) as (_d, (_, port),
                                                                             launcher):
        # No standby before any user launched: it would have to be somebody's.
        assert launcher.standbys is not None and launcher.standbys.held() == 0
        with _client(port, pki, "alice") as alice:
            first = alice.submit_topology(WALLS, name="a1", conf=conf, wait=True,
                                          timeout=SPARK_TIMEOUT)
            assert _launch(data_dir, first)["warm"] == ""          # cold
            alices = wait_until("a standby of alice's", lambda: _ready_standby(
                data_dir, alice_uid))
        with _client(port, pki, "bob") as bob:
            # Bob's launch does not take alice's standby: it starts cold, and from then
            # on the standby kept is bob's.
            second = bob.submit_topology(WALLS, name="b1", conf=conf, wait=True,
                                         timeout=SPARK_TIMEOUT)
            record = _launch(data_dir, second)
            assert record["warm"] == "" and record["standby_dir"] == ""
            assert os.stat(f"/proc/{record['pid']}").st_uid == bob_uid
            wait_until("alice's standby to go", lambda: alices not in
                       _standby_owners(data_dir))
            wait_until("a standby of bob's", lambda: _ready_standby(data_dir, bob_uid))
            # Bob's next launch takes it, warm, as bob.
            third = bob.submit_topology(WALLS, name="b2", conf=conf, wait=True,
                                        timeout=SPARK_TIMEOUT)
            record = _launch(data_dir, third)
            assert record["warm"] == "ready", record
            assert os.stat(f"/proc/{record['pid']}").st_uid == bob_uid
            third_dir = data_dir / "topologies" / third
            got = wait_until("the warm topology's counts",
                             lambda: (c := _counts(third_dir)).get("the") == 300 and c)
            assert got["apple"] == 100
            assert os.stat(third_dir / "logs" / "stderr").st_uid == bob_uid


def _errors_text(info: Any) -> str:
    """Every error on record of a TopologyInfo, one per line."""
    return "\n".join(e.error or "" for found in (info.errors or {}).values()
                     for e in found)
