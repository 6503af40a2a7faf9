"""Issue 32 through the web application over a real handler with a fake launcher (the
fakes tier, no sockets): every field Storm's docs/STORM-UI-REST-API.md lists for the
paths served is there with Storm's type (neutral where Spark has no meaning for it);
``workerLogLink`` leads to the topology's log, served bounded and under the
topology's read ACL; ``schedulerInfo`` is Storm's word or two, and the launcher's
sentence is in the page's own endpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest

from nimbus_thrift.nimbus.web.logs import DEFAULT_LOG_BYTES, MAX_LOG_BYTES
from support.web import ERROR_TEXT, WebEnv

#: Storm's type names in its document, as JSON decodes them. "Double" may be written
#: as a whole number by Storm; here it is always a float.
STRING, INT, DOUBLE, BOOL, ARRAY, DICT = str, int, float, bool, list, dict
#: The String-or-null fields Storm leaves null for a component with no error.
MAYBE_INT = (int, type(None))

CLUSTER = {"stormVersion": STRING, "supervisors": INT, "topologies": INT,
           "slotsTotal": INT, "slotsUsed": INT, "slotsFree": INT, "executorsTotal": INT,
           "tasksTotal": INT, "schedulerDisplayResource": BOOL, "totalMem": DOUBLE,
           "totalCpu": DOUBLE, "availMem": DOUBLE, "availCpu": DOUBLE,
           "memAssignedPercentUtil": DOUBLE, "cpuAssignedPercentUtil": DOUBLE}
SUPERVISOR = {"id": STRING, "host": STRING, "uptime": STRING, "uptimeSeconds": INT,
              "slotsTotal": INT, "slotsUsed": INT, "totalMem": DOUBLE,
              "totalCpu": DOUBLE, "usedMem": DOUBLE, "usedCpu": DOUBLE}
NIMBUS = {"host": STRING, "port": INT, "status": STRING, "nimbusUpTime": STRING,
          "nimbusUpTimeSeconds": STRING, "nimbusLogLink": STRING, "version": STRING}
RESOURCES = {"requestedMemOnHeap": DOUBLE, "requestedMemOffHeap": DOUBLE,
             "requestedCpu": DOUBLE}
ASSIGNED = {"assignedMemOnHeap": DOUBLE, "assignedMemOffHeap": DOUBLE,
            "assignedCpu": DOUBLE}
TOPOLOGY_ROW = {"id": STRING, "name": STRING, "status": STRING, "uptime": STRING,
                "uptimeSeconds": INT, "tasksTotal": INT, "workersTotal": INT,
                "executorsTotal": INT, "replicationCount": INT,
                "requestedTotalMem": DOUBLE, "assignedTotalMem": DOUBLE,
                **RESOURCES, **ASSIGNED}
TOPOLOGY = {"id": STRING, "name": STRING, "uptime": STRING, "uptimeSeconds": INT,
            "status": STRING, "tasksTotal": INT, "workersTotal": INT,
            "executorsTotal": INT, "msgTimeout": INT, "windowHint": STRING,
            "schedulerDisplayResource": BOOL, "replicationCount": INT, "debug": BOOL,
            "samplingPct": DOUBLE, "assignedTotalMem": DOUBLE, **ASSIGNED, **RESOURCES,
            "topologyStats": ARRAY, "workers": ARRAY, "spouts": ARRAY, "bolts": ARRAY}
TOPOLOGY_STATS = {"windowPretty": STRING, "window": STRING, "emitted": INT,
                  "transferred": INT, "completeLatency": STRING, "acked": INT,
                  "failed": INT}
WORKER = {"supervisorId": STRING, "host": STRING, "port": INT, "topologyId": STRING,
          "topologyName": STRING, "executorsTotal": INT, "componentNumTasks": DICT,
          "uptime": STRING, "uptimeSeconds": INT, "workerLogLink": STRING, **ASSIGNED}
LAST_ERROR = {"lastError": STRING, "errorHost": STRING, "errorPort": MAYBE_INT,
              "errorTime": MAYBE_INT, "errorLapsedSecs": MAYBE_INT,
              "errorWorkerLogLink": STRING}
SPOUT = {"spoutId": STRING, "executors": INT, "emitted": INT, "completeLatency": STRING,
         "transferred": INT, "tasks": INT, "acked": INT, "failed": INT, **LAST_ERROR,
         **RESOURCES}
BOLT = {"boltId": STRING, "capacity": STRING, "processLatency": STRING,
        "executeLatency": STRING, "executors": INT, "tasks": INT, "acked": INT,
        "failed": INT, "emitted": INT, **LAST_ERROR, **RESOURCES}
COMPONENT = {"user": STRING, "id": STRING, "encodedId": STRING, "name": STRING,
             "executors": INT, "tasks": INT, "schedulerDisplayResource": BOOL,
             "topologyId": STRING, "topologyStatus": STRING, "encodedTopologyId": STRING,
             "window": STRING, "componentType": STRING, "windowHint": STRING,
             "debug": BOOL, "samplingPct": DOUBLE, "eventLogLink": STRING,
             "profilingAndDebuggingCapable": BOOL, "profileActionEnabled": BOOL,
             "profilerActive": ARRAY, "componentErrors": ARRAY, "outputStats": ARRAY,
             **RESOURCES}
COMPONENT_ERROR = {"errorTime": INT, "errorHost": STRING, "errorPort": MAYBE_INT,
                   "error": STRING, "errorLapsedSecs": INT, "errorWorkerLogLink": STRING}
SPOUT_WINDOW = {"windowPretty": STRING, "window": STRING, "emitted": INT,
                "completeLatency": STRING, "transferred": INT, "acked": INT, "failed": INT}
BOLT_WINDOW = {"windowPretty": STRING, "window": STRING, "transferred": INT,
               "processLatency": STRING, "acked": INT, "failed": INT}
INPUT = {"component": STRING, "encodedComponentId": STRING, "executeLatency": STRING,
         "processLatency": STRING, "executed": INT, "acked": INT, "failed": INT,
         "stream": STRING}
OUTPUT = {"transferred": INT, "emitted": INT, "stream": STRING}
EXECUTOR = {"id": STRING, "host": STRING, "port": INT, "uptime": STRING,
            "uptimeSeconds": INT, "workerLogLink": STRING, "emitted": INT,
            "transferred": INT, "acked": INT, "failed": INT}


def assert_fields(value: dict[str, Any], fields: dict[str, Any], where: str) -> None:
    """Each of ``fields`` is in ``value`` with its type (a bool is not an int here)."""
    for name, kind in fields.items():
        assert name in value, f"{where} lacks {name}"
        got = value[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        assert isinstance(got, kinds) and (bool in kinds or not isinstance(got, bool)), \
            f"{where}.{name} is {got!r}, not {kind}"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[WebEnv]:
    e = WebEnv(tmp_path / "data", admins=["root"])
    yield e
    e.close()


def log_file(env: WebEnv, topology_id: str) -> Path:
    path = env.data_dir / "topologies" / topology_id / "logs" / "stderr"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_every_documented_field_has_storms_type(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    env.launcher.run_errors[tid] = (("split", ERROR_TEXT, int(env.clock.now) - 30),)
    assert_fields(env.get("/api/v1/cluster/summary")[1], CLUSTER, "cluster")
    for row in env.get("/api/v1/supervisor/summary")[1]["supervisors"]:
        assert_fields(row, SUPERVISOR, "supervisor")
    for row in env.get("/api/v1/nimbus/summary")[1]["nimbuses"]:
        assert_fields(row, NIMBUS, "nimbus")
    (row,) = env.get("/api/v1/topology/summary")[1]["topologies"]
    assert_fields(row, TOPOLOGY_ROW, "topology summary")

    status, page = env.get(f"/api/v1/topology/{tid}")
    assert status == 200
    assert_fields(page, TOPOLOGY, "topology")
    for stats in page["topologyStats"]:
        assert_fields(stats, TOPOLOGY_STATS, "topologyStats")
        assert (stats["acked"], stats["failed"]) == (0, 0)
    (worker,) = page["workers"]
    assert_fields(worker, WORKER, "worker")
    for spout in page["spouts"]:
        assert_fields(spout, SPOUT, "spout")
    bolts = {b["boltId"]: b for b in page["bolts"]}
    for bolt in bolts.values():
        assert_fields(bolt, BOLT, "bolt")
    # A component without an error has Storm's own empty values; one with has a link
    # to the log it was written to.
    assert {k: bolts["count"][k] for k in LAST_ERROR} == {
        "lastError": "", "errorHost": "", "errorPort": None, "errorTime": None,
        "errorLapsedSecs": None, "errorWorkerLogLink": ""}
    assert bolts["split"]["errorWorkerLogLink"] == worker["workerLogLink"]

    status, bolt = env.get(f"/api/v1/topology/{tid}/component/split")
    assert status == 200
    assert_fields(bolt, COMPONENT, "component")
    assert bolt["user"] == page["owner"]
    for error in bolt["componentErrors"]:
        assert_fields(error, COMPONENT_ERROR, "componentErrors")
    for window in bolt["boltStats"]:
        assert_fields(window, BOLT_WINDOW, "boltStats")
    for row in bolt["inputStats"]:
        assert_fields(row, INPUT, "inputStats")
    for row in bolt["outputStats"]:
        assert_fields(row, OUTPUT, "outputStats")
    assert bolt["executorStats"]
    for row in bolt["executorStats"]:
        assert_fields(row, EXECUTOR, "executorStats")
    status, spout = env.get(f"/api/v1/topology/{tid}/component/sentences")
    for window in spout["spoutSummary"]:
        assert_fields(window, SPOUT_WINDOW, "spoutSummary")
    workers = env.get(f"/api/v1/topology-workers/{tid}")[1]
    assert_fields(workers, {"hostPortList": ARRAY, "logviewerPort": INT}, "workers")


def test_the_worker_log_link_serves_the_topologys_log(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    log_file(env, tid).write_bytes(b"first line\nsplit: ValueError: bad word\n")
    link = env.get(f"/api/v1/topology/{tid}")[1]["workers"][0]["workerLogLink"]
    parts = urlsplit(link)
    # Where the request came in (its Host), the daemon's own web side.
    assert (parts.scheme, parts.netloc) == ("http", "127.0.0.1:8080")
    component = env.get(f"/api/v1/topology/{tid}/component/split")[1]
    assert {e["workerLogLink"] for e in component["executorStats"]} == {link}
    response = env.request("GET", parts.path)
    assert response.status == 200
    assert ("Content-Type", "text/plain; charset=utf-8") in response.headers
    assert response.body == b"first line\nsplit: ValueError: bad word\n"
    assert dict(response.headers)["X-Log-Size"] == str(len(response.body))


def test_the_log_is_read_in_bounded_pieces(env: WebEnv) -> None:
    tid = env.submit()
    path = log_file(env, tid)
    with open(path, "wb") as f:
        # A gigabyte of log (sparse: no disk), its end known; reading it whole into
        # memory is what the route must never do.
        f.truncate(1 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"the end\n")
    size = (1 << 30) + 8
    base = f"/api/nimbus-thrift/topology/{tid}/log"
    tail = env.request("GET", base)
    assert tail.status == 200 and len(tail.body) == DEFAULT_LOG_BYTES
    assert tail.body.endswith(b"the end\n")
    headers = dict(tail.headers)
    assert (headers["X-Log-Start"], headers["X-Log-Size"]) == (
        str(size - DEFAULT_LOG_BYTES), str(size))
    piece = env.request("GET", f"{base}?start={size - 8}&length=3")
    assert (piece.body, dict(piece.headers)["X-Log-Start"]) == (b"the", str(size - 8))
    assert env.request("GET", f"{base}?start={size + 5}").body == b""   # past the end
    assert len(env.request("GET", f"{base}?length={MAX_LOG_BYTES}").body) == MAX_LOG_BYTES
    for bad in (f"length={MAX_LOG_BYTES + 1}", "length=0", "length=x", "start=-1"):
        status, body = env.get(f"{base}?{bad}")
        assert status == 400 and "is not a whole number" in body["errorMessage"], bad


def test_the_log_route_applies_the_topologys_read_acl(tmp_path: Path) -> None:
    env = WebEnv(tmp_path / "data", admins=["ops"], users=["alice", "bob", "carol"])
    try:
        tid = env.submit(principal="alice", conf={"topology.readonly.users": ["carol"]})
        log_file(env, tid).write_bytes(b"alice's log\n")
        path = f"/api/nimbus-thrift/topology/{tid}/log"
        for reader in ("alice", "carol", "ops"):
            response = env.request("GET", path, principal=reader)
            assert (response.status, response.body) == (200, b"alice's log\n"), reader
        status, body = env.get(path, principal="bob")
        assert status == 403 and "error" in body
        # As the other per-topology paths: an unknown topology is a 404.
        assert env.get("/api/nimbus-thrift/topology/nope/log", principal="alice")[0] \
            == 404
    finally:
        env.close()


def test_a_log_not_yet_written_or_not_a_file_is_empty(env: WebEnv, tmp_path: Path
                                                      ) -> None:
    tid = env.submit()
    path = f"/api/nimbus-thrift/topology/{tid}/log"
    response = env.request("GET", path)
    assert (response.status, response.body, dict(response.headers)["X-Log-Size"]) == (
        200, b"", "0")
    secret = tmp_path / "secret"
    secret.write_text("not the topology's\n")
    log_file(env, tid).symlink_to(secret)      # what a topology's code may do
    response = env.request("GET", path)
    assert (response.status, response.body) == (200, b"")


def test_scheduler_info_is_short_and_the_page_has_the_sentence(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    (row,) = env.get("/api/v1/topology/summary")[1]["topologies"]
    assert row["schedulerInfo"] == "running"
    assert env.get(f"/api/v1/topology/{tid}")[1]["schedulerInfo"] == "running"
    history = env.get(f"/api/nimbus-thrift/topology/{tid}/history")[1]
    assert history["detail"] == env.handler.run_status(tid).detail == "fake: running"
