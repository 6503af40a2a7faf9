#!/usr/bin/env python3
"""How long an HA cluster of nimbuses cannot change state when its leader dies
(issue 28): two real daemons (``nimbus-thrift nimbus --launcher none``) on a real
ZooKeeper (Debian's, started here on a free port, as the tests do) and one shared
directory, holding N submitted topologies. The leader is killed (SIGKILL: the host
gone; or SIGTERM: stopped) and a client given the other nimbuses as seeds submits a
topology (upload, then submit) until it is acknowledged: the failover is from the kill
to that acknowledgement (issue 28's measure). Also printed: the journal's replay (a
nimbus started last, catching up on N submits).

    .venv/bin/python scripts/bench/failover.py [--topologies 100] [--rounds 20]
        [--session-timeouts 6] [--signal KILL]

A killed leader's session lives on in ZooKeeper for zookeeper_session_timeout: that
bounds the failover from below (Storm's storm.zookeeper.session.timeout is 20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))     # the tests' ZooKeeper and topologies

from support.nimbus import make_zip, wordcount  # noqa: E402
from support.zookeeper import ZooKeeperServer, available  # noqa: E402

from nimbus_thrift import logs  # noqa: E402
from nimbus_thrift.client import NimbusClient  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daemon:
    def __init__(self, name: str, work: Path, zk: str, root: str, session: float) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_THRIFT_")}
        env.update(NIMBUS_THRIFT_ZOOKEEPER_SERVERS=zk, NIMBUS_THRIFT_ZOOKEEPER_ROOT=root,
                   NIMBUS_THRIFT_ZOOKEEPER_SESSION_TIMEOUT=str(session),
                   NIMBUS_THRIFT_SHARED_DIR=str(work / "shared"),
                   NIMBUS_THRIFT_LOG_LEVEL="warning")
        self.log = open(work / f"{name}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimbus_thrift.cli", "nimbus", "--launcher", "none",
             "--port", str(self.port), "--ui-port", "0", "--data-dir", str(work / name)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait(predicate, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.05)
    raise SystemExit(f"failover.py: timed out waiting for {what}")


def leader_port(port: int) -> int:
    with NimbusClient("127.0.0.1", port, timeout=5, connect_attempts=1) as client:
        return int(client.getLeader().port)


def submit(seeds: list[str], count: int) -> None:
    with NimbusClient(hosts=seeds, timeout=30) as client:
        for i in range(count):
            def run(i: int = i) -> None:
                location = client.beginFileUpload()
                client.uploadChunk(location, make_zip())
                client.finishFileUpload(location)
                client.submitTopology(f"t{i}", location, json.dumps({}), wordcount())
            client.on_leader(run, what="a submit")


def one_round(zk: ZooKeeperServer, session: float, topologies: int, sig: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="nt-failover-"))
    root = zk.root()
    a = Daemon("a", work, zk.address, root, session)
    wait(lambda: leader_port(a.port) == a.port, "the first leader")
    b = Daemon("b", work, zk.address, root, session)
    wait(lambda: leader_port(b.port) == a.port, "the second nimbus")
    seeds = [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
    submit(seeds, topologies)
    started = time.monotonic()
    c = Daemon("c", work, zk.address, root, session)
    wait(lambda: len(NimbusClient("127.0.0.1", c.port, timeout=5, connect_attempts=1)
                     .getClusterInfo().topologies) == topologies, "the third caught up")
    replay = time.monotonic() - started
    killed = time.monotonic()
    a.stop(sig)
    survivors = seeds[1:] + [f"127.0.0.1:{c.port}"]
    with NimbusClient(hosts=survivors, timeout=30, leader_wait=120) as client:
        def run() -> None:
            location = client.beginFileUpload()
            client.uploadChunk(location, make_zip())
            client.finishFileUpload(location)
            client.submitTopology("after-failover", location, json.dumps({}), wordcount())
        client.on_leader(run, what="the submit after the kill")
        changed = time.monotonic() - killed
    # Every acknowledged change is on the new leader: all N and the last one.
    with NimbusClient(hosts=survivors, timeout=30) as client:
        listed = {t.name for t in client.getClusterInfo().topologies}
    missing = ({f"t{i}" for i in range(topologies)} | {"after-failover"}) - listed
    if missing:
        raise SystemExit(f"failover.py: acknowledged topologies lost: {sorted(missing)}")
    for d in (b, c):
        d.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"failover_s": changed, "replay_s": replay}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--topologies", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--session-timeouts", default="6")
    parser.add_argument("--signal", choices=("KILL", "TERM"), default="KILL")
    args = parser.parse_args()
    why = available()
    if why is not None:
        raise SystemExit(f"failover.py: no ZooKeeper here: {why}")
    sig = signal.SIGKILL if args.signal == "KILL" else signal.SIGTERM
    logs.configure("warning", "console")       # not the clients' retries, one per line
    zk = ZooKeeperServer().start()
    try:
        print(f"{args.topologies} topologies, leader stopped by SIG{args.signal}, "
              f"{args.rounds} rounds per session timeout")
        print(f"{'session timeout':>16} | {'kill to submit: median':>22} {'min':>7} "
              f"{'worst':>7} | {'replay of the journal (median)':>30}")
        for session in (float(s) for s in args.session_timeouts.split(",")):
            results = [one_round(zk, session, args.topologies, sig)
                       for _ in range(args.rounds)]
            fail = [r["failover_s"] for r in results]
            replay = [r["replay_s"] for r in results]
            print(f"{session:>14g} s | {statistics.median(fail):>20.2f} s "
                  f"{min(fail):>6.2f}s {max(fail):>6.2f}s | "
                  f"{statistics.median(replay):>28.2f} s")
    finally:
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
