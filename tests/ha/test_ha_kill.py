"""Real ZooKeeper and real daemon processes: the leader SIGKILLed at a random moment
while a client given every nimbus as a seed submits, deactivates, rebalances and kills
topologies. Every change the client was told succeeded is on the new leader (ids,
statuses, code sha256); a change cut short by the kill is either there or not, never
half; the client carries on against the new leader."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from pathlib import Path
from typing import Any

from nimbus_thrift.client import NimbusClient
from support.daemon_process import DaemonProcess
from support.nimbus import make_zip, wordcount
from support.polling import wait_for_value


def ha_env(zookeeper: Any, root: str, shared: Path) -> dict[str, str]:
    return {"NIMBUS_THRIFT_ZOOKEEPER_SERVERS": zookeeper.address,
            "NIMBUS_THRIFT_ZOOKEEPER_ROOT": root,
            "NIMBUS_THRIFT_ZOOKEEPER_SESSION_TIMEOUT": "2",
            "NIMBUS_THRIFT_SHARED_DIR": str(shared)}


def leader_of(port: int) -> int | None:
    try:
        with NimbusClient("127.0.0.1", port, timeout=5, connect_attempts=1) as client:
            return int(client.getLeader().port)
    except Exception:  # noqa: BLE001 - not up, or no leader yet
        return None


class Workload:
    """Changes made through the seeds, and what the client was told of each."""

    def __init__(self, seeds: list[str]) -> None:
        self.seeds = seeds
        self.acknowledged: dict[str, str] = {}      # name -> status it must have
        self.uncertain: set[str] = set()            # cut short by the kill
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.code = make_zip()
        self.code_sha256 = hashlib.sha256(self.code).hexdigest()

    def run(self) -> None:
        rng = random.Random(7)
        i = 0
        with NimbusClient(hosts=self.seeds, timeout=30, leader_wait=60) as client:
            while not self.stop.is_set():
                name, i = f"t{i}", i + 1
                try:
                    self._one(client, rng, name)
                except Exception as exc:  # noqa: BLE001 - the kill's moment: not told
                    self.uncertain.add(name)
                    self.errors.append(f"{name}: {exc}")

    def _one(self, client: NimbusClient, rng: random.Random, name: str) -> None:
        def submit() -> None:
            location = client.beginFileUpload()
            client.uploadChunk(location, self.code)
            client.finishFileUpload(location)
            client.submitTopology(name, location, json.dumps({}), wordcount())
        self.uncertain.add(name)
        client.on_leader(submit, what="a submit")
        self.acknowledged[name] = "ACTIVE"
        action = rng.choice(("deactivate", "rebalance", "kill", "none"))
        if action == "deactivate":
            client.deactivate(name)
            self.acknowledged[name] = "INACTIVE"
        elif action == "rebalance":
            client.rebalance(name, client.idl.RebalanceOptions(wait_secs=3600,
                                                               num_workers=2))
            self.acknowledged[name] = "REBALANCING"
        elif action == "kill":
            client.killTopology(name)              # kept KILLED for Storm's 30 s wait
            self.acknowledged[name] = "KILLED"
        self.uncertain.discard(name)


def test_every_acknowledged_change_survives_a_leader_sigkill(zookeeper, tmp_path) -> None:
    env = ha_env(zookeeper, zookeeper.root(), tmp_path / "shared")
    a = DaemonProcess(tmp_path / "a", env=env)
    daemons = [a]
    try:
        wait_for_value(lambda: leader_of(a.port) == a.port, "a leading", timeout=30)
        b = DaemonProcess(tmp_path / "b", env=env)
        daemons.append(b)
        wait_for_value(lambda: leader_of(b.port) == a.port, "b following", timeout=30)
        work = Workload([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"])
        thread = threading.Thread(target=work.run)
        thread.start()
        wait_for_value(lambda: len(work.acknowledged) >= random.randint(3, 12),
                       "some changes made", timeout=60)
        a.sigkill()
        count = len(work.acknowledged)
        wait_for_value(lambda: len(work.acknowledged) >= count + 3,
                       "changes made on the new leader", timeout=60)
        work.stop.set()
        thread.join(60)
        assert leader_of(b.port) == b.port
        with NimbusClient("127.0.0.1", b.port, timeout=30) as client:
            listed = {t.name: t for t in client.getClusterInfo().topologies}
            for name, status in work.acknowledged.items():
                if name in work.uncertain:
                    continue
                assert name in listed, f"{name} was acknowledged and is gone"
                assert listed[name].status == status, name
                info_conf = client.getTopologyConf(listed[name].id)
                assert json.loads(info_conf)["topology.name"] == name
                # Its code, from the shared directory, is the code uploaded.
                session, code = client.beginFileDownload(listed[name].id), b""
                while chunk := client.downloadChunk(session):
                    code += chunk
                assert hashlib.sha256(code).hexdigest() == work.code_sha256, name
        # Nothing but the kill's moment failed.
        assert len(work.errors) <= 1, work.errors
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.sigterm()
