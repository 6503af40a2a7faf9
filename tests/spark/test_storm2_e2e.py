"""Storm 2.x's Nimbus API end to end: a client compiled from the 2.x IDL (Apache
Thrift's Python code generated from idl/nimbus.thrift, tests/interop/gen-nimbus-py),
over framed binary to a real daemon on 127.0.0.1 port 0, whose Spark launcher runs the
topology with spark-submit on local Spark.

One test, in the order a user would go: create a blob of stop words; submit a word
count whose ``topology.blobstore.map`` maps it and whose split bolt reads it through
the DSL's ``load_blob`` (tests/topologies_submit/blob_wordcount); list it with
getTopologySummaries; page info with non-zero figures that getTopologyInfo, asked just
before and just after, brackets; setLogConfig raising the split bolt's logger to DEBUG,
whose line then shows in the topology's log; an update of the blob that changes the
counts of later batches while it runs; the blob read back byte for byte; kill, with no
process of the application left, after which the blob can be deleted.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import pytest
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import serialize

from interop.storm_clients import load_generated
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.proctree import session_members
from nimbus_thrift.topology.package import prepare
from support.spark_daemon import in_process_daemon, wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "tests" / "topologies_submit" / "blob_wordcount" / "blobwc.py"
#: The DEBUG line of the split bolt (blobwc.MARKER) and the logger it is on.
MARKER = "blobwc split batch"
LOGGER = "blobwc.split"
KEY = "stopwords"
#: The first version drops "the"; the second drops "cow" and "moon" instead. Padded
#: with comment lines so that uploads and downloads take several chunks.
PADDING = "".join(f"# padding line {i:05d} of the stop-word list\n" for i in range(250))
STOP_V1 = ("# stop words, version 1\nthe a an\n" + PADDING).encode()
STOP_V2 = ("# stop words, version 2\ncow\nmoon\n" + PADDING).encode()
#: Chunks this small, so the blob is uploaded in several calls.
UPLOAD_CHUNK = 3000
#: The daemon's download chunk, so the blob comes back in several calls.
DOWNLOAD_CHUNK = 4096
#: The Thrift client's socket timeout (ms): a submit checks the code in a child process.
CLIENT_TIMEOUT_MS = 60_000


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[tuple[str, int], SparkLauncher]]:
    """A NimbusDaemon with the Spark launcher (local[2]) on 127.0.0.1 port 0: its
    address and launcher. Whatever the test leaves running is stopped afterwards."""
    with in_process_daemon(tmp_path, monkeypatch,
                           download_chunk_bytes=DOWNLOAD_CHUNK) as (_, address, launcher):
        yield address, launcher


@pytest.fixture
def storm2(daemon: tuple[tuple[str, int], SparkLauncher]) -> Iterator[tuple[Any, Any]]:
    """(client, ttypes) of the Storm 2.x Python client, connected to the daemon."""
    gen = load_generated("nimbus")
    sock = TSocket.TSocket(*daemon[0])
    sock.setTimeout(CLIENT_TIMEOUT_MS)
    trans = TTransport.TFramedTransport(sock)
    trans.open()
    try:
        yield gen.Nimbus.Client(TBinaryProtocol.TBinaryProtocol(trans)), gen.ttypes
    finally:
        trans.close()


def as_apache(m: Any, struct: Any) -> Any:
    """The DSL's StormTopology (thriftpy2) as the generated client's class, by way of
    its bytes: what a Storm client would send."""
    topology = m.StormTopology()
    topology.read(TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(
        serialize(struct, TBinaryProtocolFactory()))))
    return topology


def upload_blob(client: Any, session: str, data: bytes) -> None:
    for i in range(0, len(data), UPLOAD_CHUNK):
        client.uploadBlobChunk(session, data[i:i + UPLOAD_CHUNK])
    client.finishBlobUpload(session)


def download_blob(client: Any, key: str) -> tuple[Any, bytes, int]:
    """(BeginDownloadResult, content, chunks)."""
    begun = client.beginBlobDownload(key)
    parts = []
    while chunk := client.downloadBlobChunk(begun.session):
        parts.append(chunk)
    return begun, b"".join(parts), len(parts)


def batches(db: Path) -> dict[int, dict[str, int]]:
    """The sink's counts: batch id -> word -> count."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db, timeout=30)
    try:
        rows = conn.execute("SELECT batch, word, count FROM counts").fetchall()
    except sqlite3.OperationalError:       # the table is not created yet
        return {}
    finally:
        conn.close()
    found: dict[int, dict[str, int]] = {}
    for batch, word, count in rows:
        found.setdefault(batch, {})[word] = count
    return found


def log_lines(log: Path, text: str) -> list[str]:
    try:
        return [line for line in log.read_text(errors="replace").splitlines()
                if text in line]
    except FileNotFoundError:
        return []


def info_figures(info: Any) -> dict[str, tuple[int, int]]:
    """(emitted, executed) of each component, summed over getTopologyInfo's executors."""
    found: dict[str, tuple[int, int]] = {}
    for e in info.executors:
        if e.stats is None:
            continue
        emitted, executed = found.get(e.component_id, (0, 0))
        emitted += sum(e.stats.emitted[":all-time"].values())
        bolt = e.stats.specific.bolt
        if bolt is not None:
            executed += sum(bolt.executed[":all-time"].values())
        found[e.component_id] = (emitted, executed)
    return found


def page_figures(page: Any) -> dict[str, tuple[int, int]]:
    found = {cid: (s.common_stats.emitted or 0, 0)
             for cid, s in page.id_to_spout_agg_stats.items()}
    for cid, s in page.id_to_bolt_agg_stats.items():
        bolt = s.specific_stats.bolt if s.specific_stats else None
        found[cid] = (s.common_stats.emitted or 0, (bolt.executed or 0) if bolt else 0)
    return found


def test_storm2_client_runs_a_word_count_that_reads_a_blob(
        daemon: tuple[tuple[str, int], SparkLauncher], storm2: tuple[Any, Any],
        tmp_path: Path) -> None:
    client, m = storm2
    data_dir, db = tmp_path / "data", tmp_path / "counts.sqlite"

    # The blob, readable by everyone (the creator gets rwa).
    session = client.beginCreateBlob(KEY, m.SettableBlobMeta(acl=[m.AccessControl(
        type=m.AccessControlType.OTHER, access=0x1)]))
    upload_blob(client, session, STOP_V1)
    first_version = client.getBlobMeta(KEY).version

    # Submitted with Storm's calls: code upload, then submitTopology.
    prepared = prepare(TOPOLOGY, tmp_path / "code.zip", conf={
        "topology.blobstore.map": {KEY: {"localname": "stopwords.txt"}},
        "blobwc.db": str(db), "blobwc.rate": 100})
    code = prepared.code.path.read_bytes()
    location = client.beginFileUpload()
    for i in range(0, len(code), 307200):
        client.uploadChunk(location, code[i:i + 307200])
    client.finishFileUpload(location)
    client.submitTopology(prepared.name, location, prepared.json_conf,
                          as_apache(m, prepared.struct))

    [summary] = client.getTopologySummaries()
    assert (summary.name, summary.status, summary.num_executors) == (
        prepared.name, "ACTIVE", 3)
    tid = summary.id
    log = data_dir / "topologies" / tid / "logs" / "stderr"

    # Running, with version 1: no "the" in any batch.
    wait_until("the first counts", lambda: batches(db))
    before = batches(db)
    assert all("the" not in words for words in before.values()), before
    assert any(words.get("cow") for words in before.values()), before

    # Page info: non-zero, and between getTopologyInfo's figures just before and after.
    def split_running() -> bool:
        figures = info_figures(client.getTopologyInfo(tid))
        return figures.get("split", (0, 0))[1] > 0 and figures.get("sink", (0, 0))[1] > 0
    wait_until("split and sink figures in getTopologyInfo", split_running)
    earlier = info_figures(client.getTopologyInfo(tid))
    page = client.getTopologyPageInfo(tid, ":all-time", False)
    later = info_figures(client.getTopologyInfo(tid))
    shown = page_figures(page)
    assert set(shown) == set(earlier) == {"sentences", "split", "sink"}
    for cid in shown:
        for i in (0, 1):
            assert earlier[cid][i] <= shown[cid][i] <= later[cid][i], (cid, earlier, shown,
                                                                       later)
    assert shown["sentences"][0] > 0 and shown["split"][1] > 0 and shown["sink"][1] > 0
    # Version 1 leaves 4 of 6 and 5 of 8 words: between 4 and 5 words a sentence.
    split_emitted, split_executed = shown["split"]
    assert 4 * split_executed <= split_emitted <= 5 * split_executed
    assert (page.id, page.name, page.status, page.num_executors) == (
        tid, prepared.name, "ACTIVE", 3)
    component = client.getComponentPageInfo(tid, "split", "600", False)
    assert component.component_type == m.ComponentType.BOLT
    executed = sum(e.stats.specific_stats.bolt.executed for e in component.exec_stats)
    assert shown["split"][1] <= executed <= \
        info_figures(client.getTopologyInfo(tid))["split"][1]

    # The split bolt's logger at DEBUG: its line, with the stop words it read, shows in
    # the topology's log without a restart.
    assert log_lines(log, MARKER) == []
    client.setLogConfig(tid, m.LogConfig(named_logger_level={LOGGER: m.LogLevel(
        action=m.LogLevelAction.UPDATE, target_log_level="DEBUG")}))
    assert client.getLogConfig(tid).named_logger_level[LOGGER].target_log_level == "DEBUG"
    line = wait_until("the split bolt's DEBUG line", lambda: log_lines(log, MARKER))[-1]
    assert line.endswith("stop words: a an the"), line

    # Version 2 while it runs: later batches count "the" and drop "cow".
    session = client.beginUpdateBlob(KEY)
    upload_blob(client, session, STOP_V2)
    updated_at = max(batches(db))

    def changed() -> list[int]:
        # "the" counted is version 2 (version 1 drops it); "jumped" without "cow" too.
        return sorted(b for b, words in batches(db).items() if b > updated_at
                      and words.get("the") and words.get("jumped") and "cow" not in words)
    first_new = wait_until("a batch counted with the updated stop words", changed)[0]
    # Every batch after it reads version 2 as well (Spark runs them one after another).
    wait_until("two more batches", lambda: len([b for b in batches(db) if b > first_new])
               >= 2)
    after = {b: words for b, words in batches(db).items() if b > first_new}
    assert all("cow" not in words and "moon" not in words for words in after.values()), \
        after
    wait_until("the DEBUG line with the new stop words",
               lambda: log_lines(log, "stop words: cow moon"))

    # Read back byte for byte, in several chunks, as the new version.
    begun, content, chunks = download_blob(client, KEY)
    assert content == STOP_V2 and begun.data_size == len(STOP_V2) and chunks > 1
    meta = client.getBlobMeta(KEY)
    assert begun.version == meta.version > first_version
    assert KEY in client.listBlobs("").keys
    with pytest.raises(m.IllegalStateException):      # the running topology maps it
        client.deleteBlob(KEY)

    # Kill: gone from the list, its application's processes ended, and the blob free.
    launched = json.loads((data_dir / "topologies" / tid / "launch.json").read_text())
    client.killTopologyWithOpts(prepared.name, m.KillOptions(wait_secs=0))
    wait_until("the topology to be removed", lambda: client.getTopologySummaries() == [])
    assert [p.pid for p in session_members(launched["pid"], launched["start_ticks"])] \
        == [], "processes of the killed application are still running"
    client.deleteBlob(KEY)
    with pytest.raises(m.KeyNotFoundException):
        client.getBlobMeta(KEY)
