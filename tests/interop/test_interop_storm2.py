"""Interoperability of Storm 2.x's Nimbus API: clients of both Storm lines against a
real daemon over a socket.

    storm2   Apache Thrift Python code generated from idl/nimbus.thrift, which follows
             Storm 2.8's storm.thrift. Storm 2.x's own IDL is on no package registry
             this project reaches (Storm ships it in its source tree and, as generated
             classes, in Maven Central's storm-client jar), so the 2.x client is
             compiled from ours; tests/interop/test_nimbus_idl_compat.py holds ours to
             Storm 1.x's, field for field.
    storm1   generated from Storm 1.1's own storm.thrift (the streamparse wheel's).
    java     ``thrift --gen java`` of idl/nimbus.thrift with Debian's libthrift-java:
             a Java 2.x client, which checks required fields as it reads each reply.

Each runs submit, list (getTopologySummaries on 2.x, getClusterInfo on 1.x), info and
kill against an in-process NimbusDaemon on 127.0.0.1 port 0 with the tests'
FakeLauncher; a blob round trip (create, upload in chunks, finish, getBlobMeta,
download byte for byte, listBlobs, deleteBlob); setLogConfig and getLogConfig on a
submitted topology; and page info, whose figures (the fake launcher's) are
getTopologyInfo's. And every method either IDL declares is answered, never with a
dropped connection. (tests/spark/test_storm2_e2e.py runs the 2.x client against a
topology on real Spark.)
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from packaging.version import Version
from thrift.Thrift import TApplicationException, TException
from thrift.transport.TTransport import TTransportException

from interop import INTEROP_DIR, require_file
from interop.storm_clients import (RecordingTransport, load_generated, open_client,
                                   reply_field_ids, wordcount)
from interop.storm_idl import load_storm, require_storm_idl, storm_idl_present
from support.nimbus import WORDCOUNT_CODE, FakeLauncher, make_zip
from nimbus_thrift import idl
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.security.authz import daemon_principal
from nimbus_thrift.nimbus.launcher import ComponentStats

pytestmark = pytest.mark.interop

CODE = make_zip(WORDCOUNT_CODE)
#: Who this file's clients are: loopback clients, so their OS user (the kernel says).
ME = daemon_principal()
#: Chunks of this size, so an upload takes several calls.
CHUNK_BYTES = 100
#: The daemon's download chunk, so a download takes several calls.
DOWNLOAD_CHUNK_BYTES = 1000
#: A blob's content: every byte value, so nothing is read as text on the way.
BLOB = bytes(range(256)) * 9 + b"the end"
#: Storm's ACL bits (AccessControl.access).
READ, WRITE, ADMIN = 0x1, 0x2, 0x4
#: How long a kill may take to be applied once its wait is over.
APPLY_DEADLINE_SECS = 10.0
POLL_INTERVAL_SECS = 0.02
JAVA_CLIENT = INTEROP_DIR / "java" / "StormTwoClient.java"
THRIFT_JARS = ("/usr/share/java/libthrift.jar", "/usr/share/java/thrift.jar")
SLF4J = "/usr/share/java/slf4j-api.jar"
#: The Java client's run: generous, it starts a JVM.
JAVA_TIMEOUT_SECS = 120

T = TypeVar("T")


#: What a running word count reports, for :class:`ReportingLauncher`.
FIGURES = {
    "sentences": ComponentStats(emitted=400, processed=0, latency_ms=80.0),
    "split": ComponentStats(emitted=2400, processed=400, latency_ms=80.0, busy_ms=200.0),
    "count": ComponentStats(emitted=2400, processed=2400, latency_ms=80.0)}


class ReportingLauncher(FakeLauncher):
    """A fake launcher whose every running topology reports :data:`FIGURES`: for a
    client that submits and reads the pages in one run (the Java one)."""

    def status(self, topology_id: str) -> Any:
        status = super().status(topology_id)
        return dataclasses.replace(status, components=FIGURES) if status.assigned \
            else status


@pytest.fixture
def launcher(request) -> FakeLauncher:
    """A FakeLauncher; ``@pytest.mark.parametrize("launcher", [cls], indirect=True)``
    picks another class."""
    return getattr(request, "param", FakeLauncher)()


@pytest.fixture
def daemon(tmp_path: Path, launcher: FakeLauncher) -> Iterator[tuple[str, int]]:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"), "port": 0,
                                        "download_chunk_bytes": DOWNLOAD_CHUNK_BYTES})
    daemon = NimbusDaemon(config, launcher=launcher)
    address = daemon.start()    # returns once listening
    try:
        yield address
    finally:
        daemon.stop(grace=5.0)


@pytest.fixture
def connect(daemon: tuple[str, int]
            ) -> Iterator[Callable[[str], tuple[Any, Any, RecordingTransport]]]:
    """``connect("nimbus" | "storm")``: (client, ttypes, recorder) on a new connection."""
    transports = []

    def open_one(package: str) -> tuple[Any, Any, RecordingTransport]:
        gen = load_generated(package)
        client, recorder, trans = open_client(gen, daemon)
        transports.append(trans)
        return client, gen.ttypes, recorder

    yield open_one
    for trans in transports:
        trans.close()


def submit(client: Any, m: Any, name: str, storm_version: str | None = None) -> None:
    location = client.beginFileUpload()
    for i in range(0, len(CODE), CHUNK_BYTES):
        client.uploadChunk(location, CODE[i:i + CHUNK_BYTES])
    client.finishFileUpload(location)
    topology = wordcount(m)
    topology.storm_version = storm_version
    client.submitTopologyWithOpts(
        name, location, json.dumps({"topology.workers": 2}), topology,
        m.SubmitOptions(initial_status=m.TopologyInitialStatus.ACTIVE))


def wait_for(what: str, probe: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + APPLY_DEADLINE_SECS
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {APPLY_DEADLINE_SECS} s")
        time.sleep(POLL_INTERVAL_SECS)


# --------------------------------------------------------------------------- the flows

def test_storm2_client_submits_lists_reads_and_kills(connect, launcher):
    client, m, _ = connect("nimbus")
    submit(client, m, "wc2")

    listed = client.getTopologySummaries()
    assert [(t.name, t.status, t.num_executors, t.num_tasks, t.num_workers,
             t.replication_count) for t in listed] == [("wc2", "ACTIVE", 6, 9, 2, 1)]
    topology_id = listed[0].id
    assert client.getTopologySummaryByName("wc2") == listed[0]
    assert client.getTopologySummary(topology_id) == listed[0]

    info = client.getTopologyInfoByName("wc2")
    assert (info.id, info.name, info.status, info.errors) == (
        topology_id, "wc2", "ACTIVE", {})
    assert info == client.getTopologyInfo(topology_id)

    # Two errors of the daemon's own pseudo-component: a launcher that fails twice.
    launcher.fail.add("pause")
    client.deactivate("wc2")
    client.activate("wc2")
    client.deactivate("wc2")
    launcher.fail.clear()
    choice = m.NumErrorsChoice
    every = client.getTopologyInfoWithOpts(topology_id, m.GetInfoOptions(
        num_err_choice=choice.ALL)).errors
    assert [len(found) for found in every.values()] == [2]
    (component,) = every
    none = client.getTopologyInfoByNameWithOpts("wc2", m.GetInfoOptions(
        num_err_choice=choice.NONE))
    assert none.errors == {component: []}
    one = client.getTopologyInfoWithOpts(topology_id, m.GetInfoOptions(
        num_err_choice=choice.ONE))
    assert one.errors == {component: [every[component][-1]]}

    leader = client.getLeader()
    assert Version(leader.version) >= Version("1.1.0")
    assert client.getClusterInfo().nimbuses == [leader]
    assert client.getTopologyHistory("").topo_ids == [topology_id]
    owners = client.getOwnerResourceSummaries("")
    assert [(o.owner, o.total_topologies, o.total_executors) for o in owners] == [
        (ME, 1, 6)]

    client.killTopologyWithOpts("wc2", m.KillOptions(wait_secs=0))
    wait_for("wc2 removed", lambda: client.getTopologySummaries() == [])
    with pytest.raises(m.NotAliveException):
        client.getTopologySummaryByName("wc2")
    with pytest.raises(m.NotAliveException):
        client.getTopologyInfoByName("wc2")


def test_storm1_client_submits_lists_reads_and_kills(connect):
    client, m, recorder = connect("storm")
    # StormTopology.storm_version is Storm 1.1's too; TopologyInfo.storm_version (8),
    # which the daemon then sends, is only 2.x's.
    submit(client, m, "wc1", storm_version="1.1.3")

    cluster = client.getClusterInfo()
    assert [(t.name, t.status, t.num_executors) for t in cluster.topologies] == [
        ("wc1", "ACTIVE", 6)]
    topology_id = cluster.topologies[0].id
    # What streamparse does with the nimbuses' version before it submits.
    (leader,) = cluster.nimbuses
    assert leader.version != "VERSION_NOT_PROVIDED"
    assert Version(leader.version) >= Version("1.1.0")
    assert client.isTopologyNameAllowed("wc1") is False

    recorder.clear()
    info = client.getTopologyInfo(topology_id)
    assert (info.id, info.name, info.status, len(info.executors), info.replication_count) \
        == (topology_id, "wc1", "ACTIVE", 6, 1)
    # The 2.x field was on the wire, and the 1.x client skipped it.
    assert 8 in reply_field_ids(recorder.received)
    assert not hasattr(info, "storm_version")

    client.killTopologyWithOpts("wc1", m.KillOptions(wait_secs=0))
    wait_for("wc1 removed", lambda: client.getClusterInfo().topologies == [])
    with pytest.raises(m.NotAliveException):
        client.getTopologyInfo(topology_id)


# --------------------------------------------------------------------------- blobs, logs, pages

@pytest.mark.parametrize("package", ["nimbus", "storm"])
def test_blob_round_trip(connect, package):
    client, m, _ = connect(package)
    key = f"interop-{package}"
    session = client.beginCreateBlob(key, m.SettableBlobMeta(acl=[
        m.AccessControl(type=m.AccessControlType.OTHER, access=READ)]))
    for i in range(0, len(BLOB), CHUNK_BYTES):
        client.uploadBlobChunk(session, BLOB[i:i + CHUNK_BYTES])
    client.finishBlobUpload(session)
    with pytest.raises(m.KeyAlreadyExistsException):
        client.beginCreateBlob(key, m.SettableBlobMeta(acl=[]))

    meta = client.getBlobMeta(key)
    # The creator (a loopback client is its OS user, the kernel says) always gets rwa.
    assert sorted((a.type, a.name, a.access) for a in meta.settable.acl) == [
        (m.AccessControlType.OTHER, None, READ),
        (m.AccessControlType.USER, ME, READ | WRITE | ADMIN)]
    assert meta.settable.replication_factor == 1 and meta.version > 0
    assert client.getBlobReplication(key) == 1

    begun = client.beginBlobDownload(key)
    assert (begun.version, begun.data_size) == (meta.version, len(BLOB))
    chunks = []
    while chunk := client.downloadBlobChunk(begun.session):
        chunks.append(chunk)
    assert b"".join(chunks) == BLOB
    assert [len(c) for c in chunks] == [DOWNLOAD_CHUNK_BYTES] * 2 + [len(BLOB) - 2000]

    listed = client.listBlobs("")
    assert listed.keys == [key]
    assert client.listBlobs(listed.session).keys == []      # the last page

    client.deleteBlob(key)
    with pytest.raises(m.KeyNotFoundException):
        client.getBlobMeta(key)
    with pytest.raises(m.KeyNotFoundException):
        client.beginBlobDownload(key)
    assert client.listBlobs("").keys == []


def _log_level(m: Any, level: str, timeout: int | None = None) -> Any:
    return m.LogLevel(action=m.LogLevelAction.UPDATE, target_log_level=level,
                      reset_log_level_timeout_secs=timeout)


@pytest.mark.parametrize("package", ["nimbus", "storm"])
def test_log_config_round_trip(connect, package):
    client, m, _ = connect(package)
    submit(client, m, "wclog")
    (topology_id,) = [t.id for t in client.getClusterInfo().topologies]
    asked_at = time.time()
    client.setLogConfig(topology_id, m.LogConfig(named_logger_level={
        "ROOT": _log_level(m, "DEBUG", timeout=30),
        "wordcount.components": _log_level(m, "WARN")}))
    got = client.getLogConfig(topology_id).named_logger_level
    assert set(got) == {"ROOT", "wordcount.components"}
    root, mine = got["ROOT"], got["wordcount.components"]
    assert (root.action, root.target_log_level, root.reset_log_level_timeout_secs) == (
        m.LogLevelAction.UPDATE, "DEBUG", 30)
    # Storm's reset time: epoch milliseconds, 30 s after the call.
    assert (asked_at + 30) * 1000 - 1000 <= root.reset_log_level_timeout_epoch \
        <= (time.time() + 30) * 1000 + 1000
    assert (mine.target_log_level, mine.reset_log_level_timeout_secs,
            mine.reset_log_level_timeout_epoch) == ("WARN", None, None)

    # Merged logger by logger: REMOVE drops one, the other stays.
    client.setLogConfig(topology_id, m.LogConfig(named_logger_level={
        "wordcount.components": m.LogLevel(action=m.LogLevelAction.REMOVE)}))
    assert set(client.getLogConfig(topology_id).named_logger_level) == {"ROOT"}
    # A level that does not exist is refused with a sentence; the stored one is kept.
    with pytest.raises(TApplicationException, match="not a log level"):
        client.setLogConfig(topology_id, m.LogConfig(named_logger_level={
            "ROOT": _log_level(m, "LOUD")}))
    assert client.getLogConfig(topology_id).named_logger_level["ROOT"] \
        .target_log_level == "DEBUG"
    with pytest.raises(TApplicationException, match="no topology"):
        client.getLogConfig("ghost-1-1")


def _info_figures(info: Any) -> dict[str, tuple[int, int]]:
    """(emitted, executed) of each component, summed over getTopologyInfo's executors."""
    found: dict[str, tuple[int, int]] = {}
    for e in info.executors:
        emitted, executed = found.get(e.component_id, (0, 0))
        if e.stats is not None:
            emitted += sum(e.stats.emitted[":all-time"].values())
            if e.stats.specific.bolt is not None:
                executed += sum(e.stats.specific.bolt.executed[":all-time"].values())
        found[e.component_id] = (emitted, executed)
    return found


@pytest.mark.parametrize("package", ["nimbus", "storm"])
def test_page_info_of_a_submitted_topology(connect, launcher, package):
    client, m, _ = connect(package)
    submit(client, m, "wcpage")
    (topology_id,) = [t.id for t in client.getClusterInfo().topologies]

    # Nothing reported yet (no Spark here): an answer, with the counts of the topology.
    page = client.getTopologyPageInfo(topology_id, ":all-time", False)
    assert (page.id, page.name, page.status, page.num_executors, page.num_tasks,
            page.num_workers) == (topology_id, "wcpage", "ACTIVE", 6, 9, 2)
    assert set(page.id_to_spout_agg_stats) == {"sentences"}
    assert set(page.id_to_bolt_agg_stats) == {"split", "count"}
    assert json.loads(page.topology_conf)["topology.workers"] == 2

    # What a running word count reports: page info says what getTopologyInfo says.
    launcher.stats[topology_id] = FIGURES
    info = client.getTopologyInfo(topology_id)
    figures = _info_figures(info)
    page = client.getTopologyPageInfo(topology_id, ":all-time", False)
    spouts, bolts = page.id_to_spout_agg_stats, page.id_to_bolt_agg_stats
    assert spouts["sentences"].common_stats.emitted == figures["sentences"][0] == 400
    for bolt in ("split", "count"):
        assert (bolts[bolt].common_stats.emitted,
                bolts[bolt].specific_stats.bolt.executed) == figures[bolt]
    # The task time per tuple, in both: 200 ms over 400 tuples.
    assert bolts["split"].specific_stats.bolt.execute_latency_ms == 0.5
    assert {value for e in info.executors if e.component_id == "split"
            for value in e.stats.specific.bolt.execute_ms_avg[":all-time"].values()} \
        == {0.5}
    # A window answers too (this launcher does not say when its run started, so a
    # window reaches back only as far as the daemon has sampled: here, nothing).
    recent = client.getTopologyPageInfo(topology_id, "600", False)
    assert 0 <= recent.id_to_bolt_agg_stats["split"].specific_stats.bolt.executed <= 400
    assert page.topology_stats.window_to_emitted[":all-time"] == 400 + 2400 + 2400
    component = client.getComponentPageInfo(topology_id, "split", ":all-time", False)
    assert (component.component_id, component.component_type, component.num_executors) \
        == ("split", m.ComponentType.BOLT, 2)
    assert sorted(e.stats.specific_stats.bolt.executed for e in component.exec_stats) \
        == [200, 200]
    with pytest.raises(m.NotAliveException):
        client.getComponentPageInfo(topology_id, "nope", ":all-time", False)


# --------------------------------------------------------------------------- every method

def _methods(package: str) -> list[str]:
    """The methods of ``package``'s IDL, at collection time; Storm's IDL may be missing
    then: one placeholder, whose test fails saying how to get it (never a silent pass)."""
    if package == "nimbus":
        return sorted(idl.load("nimbus.thrift").Nimbus.thrift_services)
    if not storm_idl_present():
        return [MISSING]
    return sorted(load_storm().Nimbus.thrift_services)


#: The placeholder method of a missing IDL.
MISSING = "<Storm's IDL is missing>"


@pytest.mark.parametrize("package, method", [
    (package, method) for package in ("nimbus", "storm") for method in _methods(package)])
def test_no_method_drops_the_connection(connect, package, method):
    """Every method, with every argument left out (the daemon sees None): an answer, a
    declared exception or a TApplicationException, and the connection carries on."""
    if method == MISSING:
        require_storm_idl()
    client, _, _ = connect(package)
    func = getattr(client, method)
    args = [None] * (func.__code__.co_argcount - 1)
    try:
        func(*args)
    except TTransportException as exc:
        pytest.fail(f"{method} dropped the connection: {exc}")
    except TException:
        pass                    # declared, or a TApplicationException
    assert client.getLeader().isLeader is True


# --------------------------------------------------------------------------- Java

@pytest.fixture(scope="module")
def java_client(tmp_path_factory) -> tuple[str, Path]:
    """``thrift --gen java`` of idl/nimbus.thrift and the client, compiled once:
    (classpath, class directory)."""
    jar = next((j for j in THRIFT_JARS if Path(j).is_file()), None)
    assert jar is not None, "libthrift-java is not installed: run scripts/setup.sh"
    require_file(Path(SLF4J), "slf4j-api (libslf4j-java)")
    require_file(JAVA_CLIENT, "the Java Storm 2.x client")
    for tool in ("thrift", "javac", "java"):
        assert shutil.which(tool) is not None, f"{tool} is not installed: run scripts/setup.sh"
    out = tmp_path_factory.mktemp("java")
    sources, classes = out / "gen", out / "classes"
    sources.mkdir()
    classes.mkdir()
    # No @Generated annotation: it needs a jar Debian's JDK does not carry.
    subprocess.run(["thrift", "--gen", "java:generated_annotations=suppress", "-out",
                    str(sources), str(idl.idl_path("nimbus.thrift"))], check=True)
    classpath = f"{jar}:{SLF4J}"
    files = [str(p) for p in sources.rglob("*.java")] + [str(JAVA_CLIENT)]
    subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes), *files],
                   check=True, capture_output=True, timeout=JAVA_TIMEOUT_SECS)
    return classpath, classes


@pytest.mark.parametrize("launcher", [ReportingLauncher], indirect=True)
def test_java_storm2_client(java_client, daemon, tmp_path):
    classpath, classes = java_client
    code, blob_in, blob_out = tmp_path / "code.zip", tmp_path / "in", tmp_path / "out"
    code.write_bytes(CODE)
    blob_in.write_bytes(BLOB)
    host, port = daemon
    began = time.time()
    proc = subprocess.run(
        ["java", "-cp", f"{classpath}:{classes}", "StormTwoClient", host, str(port),
         str(code), "wcj", str(blob_in), str(blob_out)],
        capture_output=True, text=True, timeout=JAVA_TIMEOUT_SECS)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    topology_id = lines["submitted"]
    assert topology_id.startswith("wcj-")
    assert lines["summaries"] == f"{topology_id} wcj ACTIVE 6 9"
    assert lines["byName"] == topology_id
    assert lines["info"] == f"{topology_id} ACTIVE 6"
    assert Version(lines["leader"]) >= Version("1.1.0")
    assert lines["unsupported"].startswith("setWorkerProfiler is not supported on Spark")

    # Log levels: UPDATE (2) with Storm's reset time in epoch milliseconds; REMOVE.
    action, level, timeout, epoch = lines["logConfig"].split()
    assert (action, level, timeout) == ("UPDATE", "DEBUG", "30")
    assert (began + 30) * 1000 - 1000 <= int(epoch) <= (time.time() + 30) * 1000 + 1000
    assert lines["logRemoved"] == "ROOT"

    # Page info: the counts of the topology, and getTopologyInfo's figures.
    assert lines["page"] == f"{topology_id} wcj ACTIVE 6 9"
    assert lines["pageFigures"] == lines["infoFigures"] == \
        "count 2400 2400;sentences 400 0;split 2400 400;"
    assert lines["componentPage"] == "split BOLT 2 2"

    # The blob: ACL as Storm makes it (the creator gets rwa), replication 1, the
    # download byte for byte in several chunks, listed, then deleted.
    version, replication, acl = lines["blobMeta"].split()
    assert int(version) > 0 and replication == "1"
    assert acl == f"OTHER::1,USER:{ME}:7"
    assert lines["blobDownload"] == f"{version} {len(BLOB)} 3"
    assert blob_out.read_bytes() == BLOB
    assert lines["blobList"] == "wcj-blob then 0"
    assert lines["blobDeleted"] == "KeyNotFoundException"
    assert lines["killed"] == "removed"
