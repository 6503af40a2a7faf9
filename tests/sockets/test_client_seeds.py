"""A client of several nimbus seeds over real sockets: two or three servers of the
Nimbus IDL (nimbus_thrift.make_server over a small handler) that play an HA cluster's
daemons as the contract says (idl.NOT_LEADER_MESSAGE): followers refuse state changes
naming the leader, every daemon answers reads and getLeader. The Python client and the
CLI (--host a,b) submit and kill through a follower, follow a leader change, skip a
dead seed and give up precisely when no leader is elected. The routing rules one by
one are tests/unit/client/test_leader.py's."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from thriftpy2.thrift import TApplicationException

import nimbus_thrift
from nimbus_thrift.cli import main
from nimbus_thrift.client import client as client_module
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.client.errors import NoLeader, NoNimbusAnswered
from nimbus_thrift.idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE, nimbus_idl

from support.rawthrift import refused_port

idl = nimbus_idl()
SAMPLES = Path(__file__).parents[1] / "topologies_submit"


class Cluster:
    """What the daemons share: who leads (``host:port``, None during an election) and
    the topologies (name -> the daemon that accepted it, and the code it was given)."""

    def __init__(self) -> None:
        self.leader: str | None = None
        self.topologies: dict[str, tuple[str, bytes]] = {}


class Daemon:
    """One nimbus of the cluster: reads from anyone, state changes only as the leader."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.address = ""
        self.calls: list[str] = []
        self.uploads: dict[str, bytearray] = {}
        self.finished: dict[str, bytes] = {}
        self.after: dict[str, Any] = {}     # method -> called after it was carried out

    def _leader_only(self, method: str) -> None:
        self.calls.append(method)
        leader = self.cluster.leader
        if leader != self.address:
            message = NO_LEADER_MESSAGE if leader is None else \
                NOT_LEADER_MESSAGE.format(leader=leader)
            raise TApplicationException(TApplicationException.INTERNAL_ERROR, message)

    def getLeader(self):
        self.calls.append("getLeader")
        if self.cluster.leader is None:
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        NO_LEADER_MESSAGE)
        host, _, port = self.cluster.leader.rpartition(":")
        return idl.NimbusSummary(host=host, port=int(port), uptime_secs=1, isLeader=True,
                                 version="test")

    def getClusterInfo(self):
        self.calls.append("getClusterInfo")
        return idl.ClusterSummary(
            supervisors=[], nimbus_uptime_secs=1, nimbuses=[],
            topologies=[idl.TopologySummary(id=f"{name}-1-1", name=name, num_tasks=1,
                                            num_executors=1, num_workers=1, uptime_secs=1,
                                            status="ACTIVE")
                        for name in self.cluster.topologies])

    def isTopologyNameAllowed(self, name):
        self.calls.append("isTopologyNameAllowed")
        return name not in self.cluster.topologies

    def getNimbusConf(self):
        self.calls.append("getNimbusConf")
        return "{}"

    def beginFileUpload(self):
        self._leader_only("beginFileUpload")
        location = f"{self.address}/upload-{len(self.uploads) + 1}"
        self.uploads[location] = bytearray()
        return location

    def uploadChunk(self, location, chunk):
        self._leader_only("uploadChunk")
        self.uploads[location] += chunk
        self.after.get("uploadChunk", lambda: None)()

    def finishFileUpload(self, location):
        self._leader_only("finishFileUpload")
        self.finished[location] = bytes(self.uploads[location])
        self.after.get("finishFileUpload", lambda: None)()

    def submitTopologyWithOpts(self, name, uploadedJarLocation, jsonConf, topology,
                               options):
        self._leader_only("submitTopologyWithOpts")
        # Only code uploaded to this daemon and finished can be submitted here.
        self.cluster.topologies[name] = (self.address, self.finished[uploadedJarLocation])

    def beginCreateBlob(self, key, meta):
        self._leader_only("beginCreateBlob")
        session = f"{self.address}/blob-{len(self.uploads) + 1}"
        self.uploads[session] = bytearray()
        return session

    def uploadBlobChunk(self, session, chunk):
        self._leader_only("uploadBlobChunk")
        self.uploads[session] += chunk
        self.after.get("uploadBlobChunk", lambda: None)()

    def finishBlobUpload(self, session):
        self._leader_only("finishBlobUpload")
        self.finished[session] = bytes(self.uploads[session])

    def cancelBlobUpload(self, session):
        self._leader_only("cancelBlobUpload")

    def killTopologyWithOpts(self, name, options):
        self._leader_only("killTopologyWithOpts")
        if self.cluster.topologies.pop(name, None) is None:
            raise idl.NotAliveException(msg=f"no topology {name}")


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, list[Daemon]]]:
    """Three daemons; the second leads."""
    shared = Cluster()
    daemons = [Daemon(shared) for _ in range(3)]
    servers = []
    try:
        for daemon in daemons:
            server = nimbus_thrift.make_server(idl.Nimbus, daemon, host="127.0.0.1", port=0,
                                               worker_threads=2)
            host, port = server.start()
            daemon.address = f"{host}:{port}"
            servers.append(server)
        shared.leader = daemons[1].address
        yield shared, daemons
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def dead_seed() -> Iterator[str]:
    with refused_port() as port:
        yield f"127.0.0.1:{port}"


def seed_client(seeds: list[str], **settings: Any) -> NimbusClient:
    return NimbusClient(hosts=seeds, connect_attempts=2, backoff_initial=0.01, **settings)


def test_reads_skip_a_dead_seed_and_state_changes_land_on_the_leader(cluster, dead_seed):
    shared, (follower, leader, other) = cluster
    shared.topologies["wc"] = ("", b"")
    with seed_client([dead_seed, follower.address, leader.address]) as client:
        assert [t.name for t in client.getClusterInfo().topologies] == ["wc"]
        client.killTopologyWithOpts("wc", idl.KillOptions(wait_secs=0))
        assert client.getClusterInfo().topologies == []
    assert follower.calls == ["getClusterInfo", "getLeader", "getClusterInfo"]
    assert leader.calls == ["killTopologyWithOpts"]
    assert other.calls == []


@pytest.mark.parametrize("deposed_after", ["uploadChunk", "finishFileUpload"])
def test_a_submit_through_a_follower_restarts_on_the_new_leader_mid_upload(
        cluster, tmp_path, deposed_after):
    shared, (follower, leader, other) = cluster
    path = Path(shutil.copytree(SAMPLES / "wordcount", tmp_path / "wc")) / "wordcount.py"

    def lose_leadership() -> None:
        # The leader is deposed after a chunk, or after the upload's finish: it refuses
        # the next call (the finish, or the submit), naming the new leader, and the
        # whole upload and submit start over there (the new leader has no upload).
        shared.leader = other.address
    leader.after[deposed_after] = lose_leadership
    with seed_client([follower.address, leader.address, other.address]) as client:
        topology_id = client.submit_topology(path)
    assert topology_id == "wordcount-1-1"
    accepted_by, code = shared.topologies["wordcount"]
    assert accepted_by == other.address
    [first_try] = leader.uploads.values()
    assert code == bytes(first_try) and code[:2] == b"PK"    # the whole zip, again
    refused = {"uploadChunk": "finishFileUpload",
               "finishFileUpload": "submitTopologyWithOpts"}[deposed_after]
    assert leader.calls == ["isTopologyNameAllowed", "getNimbusConf", "beginFileUpload",
                            "uploadChunk", "finishFileUpload"] + \
        (["submitTopologyWithOpts"] if refused == "submitTopologyWithOpts" else [])
    assert other.calls == ["isTopologyNameAllowed", "getNimbusConf", "beginFileUpload",
                           "uploadChunk", "finishFileUpload", "submitTopologyWithOpts",
                           "getClusterInfo"]
    # Asked for the leader once; no state change sent to the follower.
    assert follower.calls == ["getLeader"]


def test_a_leader_change_between_calls_is_followed(cluster):
    shared, (follower, leader, other) = cluster
    shared.topologies.update({"a": ("", b""), "b": ("", b"")})
    with seed_client([follower.address, leader.address]) as client:
        client.killTopologyWithOpts("a", idl.KillOptions(wait_secs=0))
        shared.leader = other.address          # not even a seed: named by the refusal
        client.killTopologyWithOpts("b", idl.KillOptions(wait_secs=0))
    assert shared.topologies == {}
    assert leader.calls == ["killTopologyWithOpts", "killTopologyWithOpts"]
    assert other.calls == ["killTopologyWithOpts"]
    assert follower.calls == ["getLeader"]


def test_no_leader_is_a_precise_error_after_bounded_waits(cluster):
    shared, (follower, leader, _) = cluster
    shared.topologies["wc"] = ("", b"")
    shared.leader = None
    with seed_client([follower.address, leader.address], leader_wait=0.35) as client:
        with pytest.raises(NoLeader) as info:
            client.killTopologyWithOpts("wc", idl.KillOptions(wait_secs=0))
        message = str(info.value)
        assert message.startswith("no nimbus leader to send killTopologyWithOpts to: "
                                  "asked the seeds ")
        assert f"{follower.address}: {NO_LEADER_MESSAGE}; " \
               f"{leader.address}: {NO_LEADER_MESSAGE}" in message
        # Bounded: a few rounds of getLeader (0.1 + 0.2 s of pauses), nothing sent.
        assert 2 <= follower.calls.count("getLeader") <= 3
        assert "killTopologyWithOpts" not in follower.calls + leader.calls
        # Reads still work while no leader is elected.
        assert [t.name for t in client.getClusterInfo().topologies] == ["wc"]


def test_no_seed_answering_names_each(dead_seed):
    with refused_port() as port:
        other = f"127.0.0.1:{port}"
        with pytest.raises(NoNimbusAnswered) as info:
            seed_client([dead_seed, other]).getClusterInfo()
    assert str(info.value).startswith(f"no nimbus answered among the seeds {dead_seed}, "
                                      f"{other} (after 2 rounds over ")
    assert f"{dead_seed}: connection refused; {other}: connection refused" \
        in str(info.value)


# --------------------------------------------------------------------------- the CLI


def run_cli(tmp_path: Path, *args: str) -> Any:
    # A config home of its own: the user's client.yaml must not point elsewhere.
    return CliRunner().invoke(main, list(args), env={"XDG_CONFIG_HOME": str(tmp_path)})


def test_the_cli_takes_a_list_of_seeds_in_host(cluster, dead_seed, tmp_path, monkeypatch):
    shared, (follower, leader, _) = cluster
    shared.topologies["wc"] = ("", b"")
    seeds = f"{dead_seed},{follower.address},{leader.address}"
    listed = run_cli(tmp_path, "list", "--host", seeds, "--json")
    assert listed.exit_code == 0, listed.output
    assert "wc" in listed.output
    killed = run_cli(tmp_path, "kill", "wc", "-w", "0", "--host", seeds)
    assert killed.exit_code == 0, killed.output
    assert killed.output == "killed wc; removed in 0 s\n"
    assert leader.calls == ["killTopologyWithOpts"]
    shared.leader = None
    # The CLI waits the default leader_wait (20 s) for an election: shortened here.
    monkeypatch.setattr(client_module, "NimbusClient",
                        functools.partial(NimbusClient, leader_wait=0.3))
    refused = run_cli(tmp_path, "kill", "wc", "--host", seeds, "--timeout", "5")
    assert refused.exit_code == 1
    assert "Error: no nimbus leader to send killTopologyWithOpts to" in refused.output


def test_the_cli_documents_the_list(tmp_path):
    shown = run_cli(tmp_path, "kill", "--help")
    assert "comma" in shown.output and "a,b:6628,c" in shown.output


def test_the_cli_submits_through_a_follower_and_restarts_on_a_new_leader(cluster, tmp_path):
    shared, (follower, leader, other) = cluster
    path = Path(shutil.copytree(SAMPLES / "wordcount", tmp_path / "wc")) / "wordcount.py"
    # Deposed between the upload and the submit: the submit cannot follow alone.
    leader.after["finishFileUpload"] = lambda: setattr(shared, "leader", other.address)
    seeds = f"{follower.address},{leader.address}"
    submitted = run_cli(tmp_path, "submit", str(path), "--host", seeds, "--json")
    assert submitted.exit_code == 0, submitted.output
    assert '"id": "wordcount-1-1"' in submitted.output
    assert shared.topologies["wordcount"][0] == other.address
    assert leader.calls[-1] == "submitTopologyWithOpts"       # refused there
    assert len(other.finished) == 1                             # uploaded again there


def test_the_cli_sends_a_blob_file_again_to_a_new_leader_but_not_standard_input(cluster,
                                                                             tmp_path):
    shared, (follower, leader, other) = cluster
    content = tmp_path / "stopwords.txt"
    content.write_bytes(b"a\nthe\n")
    seeds = f"{follower.address},{leader.address}"
    leader.after["uploadBlobChunk"] = lambda: setattr(shared, "leader", other.address)
    created = run_cli(tmp_path, "blob", "create", "stop", "-f", str(content), "--host", seeds)
    assert created.exit_code == 0, created.output
    assert list(other.finished.values()) == [b"a\nthe\n"]     # read again from its start
    assert leader.finished == {}
    # From standard input the bytes sent are gone: an error, nothing half made.
    other.after["uploadBlobChunk"] = lambda: setattr(shared, "leader", leader.address)
    piped = CliRunner().invoke(main, ["blob", "create", "again", "--host", seeds],
                               input=b"x\ny\n", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert piped.exit_code == 1
    assert (f"Error: the upload of blob 'again' was refused midway for not reaching the "
            f"leader: nimbus at {other.address} names {leader.address} as the leader"
            in piped.output)
    assert len(other.finished) == len(leader.finished) + 1 == 1
