"""Storm UI's REST API, the actions, /metrics and the page's files through the web
application over a real handler with a fake launcher (the fakes tier, no sockets):
Storm's field names, figures equal to what getTopologyInfo (``nimbus-thrift info``)
shows, errors as Storm's JSON with the right status, cross-site refusals, and
authorization by the handler's own rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nimbus_thrift.nimbus.state.timeseries import Sample
from nimbus_thrift.nimbus.web.history import rate_series
from nimbus_thrift.nimbus.web.static import StaticFiles
from nimbus_thrift.nimbus.web.storm_api import pretty_secs

from support.nimbus import audit_events, request_as
from support.web import ERROR_TEXT, LOCAL, Token, WebEnv


@pytest.fixture
def env(tmp_path: Path) -> Iterator[WebEnv]:
    e = WebEnv(tmp_path / "data", admins=["root"])
    yield e
    e.close()


def _info_rows(env: WebEnv, topology_id: str) -> dict[str, dict[str, object]]:
    """Per component what ``nimbus-thrift info --json`` prints (render.component_rows)."""
    from nimbus_thrift.render import component_rows
    with request_as(LOCAL):
        info = env.handler.getTopologyInfo(topology_id)
    return {row["component"]: row for row in component_rows(info)}


# --- GET -----------------------------------------------------------------------------

def test_cluster_paths_have_storms_fields(env: WebEnv) -> None:
    tid = env.submit()
    status, summary = env.get("/api/v1/cluster/summary")
    assert status == 200
    assert {k: summary[k] for k in ("supervisors", "topologies", "slotsTotal", "slotsUsed",
                                    "slotsFree", "executorsTotal", "tasksTotal")} == {
        "supervisors": 1, "topologies": 1, "slotsTotal": 4, "slotsUsed": 1, "slotsFree": 3,
        "executorsTotal": 6, "tasksTotal": 6}
    assert summary["stormVersion"].startswith("2.8.0+nimbus.thrift.")
    status, nimbus = env.get("/api/v1/nimbus/summary")
    assert nimbus["nimbuses"][0]["status"] == "Leader"
    assert nimbus["nimbuses"][0]["port"] == env.config.port
    status, supervisors = env.get("/api/v1/supervisor/summary")
    assert [(s["id"], s["slotsTotal"], s["slotsUsed"]) for s in supervisors["supervisors"]] \
        == [("local-box", 4, 1)]
    status, topologies = env.get("/api/v1/topology/summary")
    (row,) = topologies["topologies"]
    assert {k: row[k] for k in ("id", "name", "status", "tasksTotal", "workersTotal",
                                "executorsTotal", "owner")} == {
        "id": tid, "name": "wc", "status": "ACTIVE", "tasksTotal": 6, "workersTotal": 1,
        "executorsTotal": 6, "owner": row["owner"]}
    # No resource-aware scheduler: its fields are Storm's 0.0 (docs/nimbus-api.md).
    assert (row["requestedMemOnHeap"], row["assignedCpu"]) == (0.0, 0.0)
    status, conf = env.get("/api/v1/cluster/configuration")
    assert conf["nimbus.thrift.port"] == env.config.port


def test_topology_figures_equal_info_json(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid, sentences=120, split=100, latency=250.0)
    status, page = env.get(f"/api/v1/topology/{tid}")
    assert status == 200
    rows = _info_rows(env, tid)
    (spout,) = page["spouts"]
    assert spout["spoutId"] == "sentences"
    assert spout["emitted"] == rows["sentences"]["emitted"] == 120
    assert float(spout["completeLatency"]) == rows["sentences"]["latency_ms"] == 250.0
    bolts = {b["boltId"]: b for b in page["bolts"]}
    for bolt in ("split", "count"):
        assert bolts[bolt]["executed"] == rows[bolt]["processed"]
        assert bolts[bolt]["emitted"] == rows[bolt]["emitted"]
        assert bolts[bolt]["executors"] == rows[bolt]["executors"]
        assert float(bolts[bolt]["processLatency"]) == rows[bolt]["latency_ms"]
    assert bolts["split"]["executeLatency"] == "5.000"       # 500 ms busy / 100 tuples
    # No acking on Spark: acked and failed are Storm's 0 (docs/nimbus-api.md).
    assert (spout["acked"], spout["failed"]) == (0, 0)
    assert (bolts["split"]["acked"], bolts["split"]["failed"]) == (0, 0)
    assert page["window"] == ":all-time" and page["windowHint"] == "All time"
    assert [s["window"] for s in page["topologyStats"]] == [":all-time", "600", "10800",
                                                            "86400"]
    assert page["topologyStats"][0]["emitted"] == 120 + 600 + 600
    assert page["antiForgeryToken"] == env.app.csrf_token
    assert page["configuration"]["storm.id"] == tid
    assert page["workers"][0]["componentNumTasks"] == {"sentences": 1, "split": 2,
                                                       "count": 3}
    status, ten = env.get(f"/api/v1/topology/{tid}?window=600")
    assert (ten["window"], ten["windowHint"]) == ("600", "10m 0s")


def test_component_page_has_the_full_error_text(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    env.launcher.run_errors[tid] = (("split", ERROR_TEXT, int(env.clock.now) - 30),)
    status, page = env.get(f"/api/v1/topology/{tid}/component/split")
    assert status == 200
    assert (page["id"], page["componentType"], page["executors"], page["tasks"]) == (
        "split", "bolt", 2, 2)
    (error,) = page["componentErrors"]
    assert error["error"] == ERROR_TEXT
    assert error["errorLapsedSecs"] == 30
    assert (error["errorHost"], error["errorPort"]) == ("127.0.0.1", 4040)
    assert [w["window"] for w in page["boltStats"]][0] == ":all-time"
    assert page["inputStats"][0]["component"] == "sentences"
    assert len(page["executorStats"]) == 2
    assert sum(e["executed"] for e in page["executorStats"]) == 100
    # The topology page shows the error's first line as the last error.
    status, topology = env.get(f"/api/v1/topology/{tid}")
    split = next(b for b in topology["bolts"] if b["boltId"] == "split")
    assert split["lastError"] == "ValueError: bad word"
    status, spout = env.get(f"/api/v1/topology/{tid}/component/sentences")
    assert spout["componentType"] == "spout" and "spoutSummary" in spout


def test_topology_workers(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    status, workers = env.get(f"/api/v1/topology-workers/{tid}")
    # Storm's logviewer port: the web side's (the request's Host), where the log is.
    assert (status, workers) == (200, {"hostPortList": [{"host": "127.0.0.1",
                                                         "port": 4040}],
                                       "logviewerPort": 8080})


@pytest.mark.parametrize("path", [
    "/api/v1/topology/nope", "/api/v1/topology/nope/component/split",
    "/api/v1/topology-workers/nope", "/api/nimbus-thrift/topology/nope/history"])
def test_unknown_ids_are_404_with_storms_error_json(env: WebEnv, path: str) -> None:
    status, body = env.get(path)
    assert status == 404
    assert body["error"] == "404 Not Found" and "nope" in body["errorMessage"]


def test_an_unknown_component_is_404_and_a_bad_window_400(env: WebEnv) -> None:
    tid = env.submit()
    status, body = env.get(f"/api/v1/topology/{tid}/component/nope")
    assert status == 404 and "has no component 'nope'" in body["errorMessage"]
    status, body = env.get(f"/api/v1/topology/{tid}?window=soon")
    assert (status, body["error"]) == (400, "400 Bad Request")


def test_reads_are_authorized_as_their_idl_methods(tmp_path: Path) -> None:
    env = WebEnv(tmp_path / "data", admins=["root"], users=["alice", "bob"])
    try:
        tid = env.submit(principal="alice")
        assert env.get(f"/api/v1/topology/{tid}", principal="alice")[0] == 200
        # bob may use the cluster but not read alice's topology; mallory nothing.
        assert env.get("/api/v1/topology/summary", principal="bob")[0] == 200
        status, body = env.get(f"/api/v1/topology/{tid}", principal="bob")
        assert (status, body["error"]) == (403, "403 Forbidden")
        assert env.get("/api/v1/cluster/summary", principal="mallory")[0] == 403
        # No principal (plain HTTP from another machine): anonymous, refused.
        assert env.get("/api/v1/cluster/summary", principal=None)[0] == 403
    finally:
        env.close()


# --- actions -------------------------------------------------------------------------

def test_actions_run_as_their_idl_methods(env: WebEnv) -> None:
    tid = env.submit()
    status, body = env.post(f"/api/v1/topology/{tid}/deactivate")
    assert (status, body) == (200, {"topologyOperation": "deactivate", "topologyId": tid,
                                    "status": "success"})
    assert env.launcher.state[tid] == "paused"
    assert env.get(f"/api/v1/topology/{tid}")[1]["status"] == "INACTIVE"
    assert env.post(f"/api/v1/topology/{tid}/activate")[0] == 200
    assert env.launcher.state[tid] == "running"
    options = json.dumps({"rebalanceOptions": {"numWorkers": 2,
                                               "executors": {"split": "1"}}}).encode()
    assert env.post(f"/api/v1/topology/{tid}/rebalance/0", body=options)[0] == 200
    action = env.store.action(tid)
    assert action is not None and action.options == {"num_workers": 2,
                                                     "num_executors": {"split": 1}}
    status, body = env.post(f"/api/v1/topology/{tid}/kill/7")
    assert (status, body["topologyOperation"]) == (200, "kill")
    assert env.get(f"/api/v1/topology/{tid}")[1]["status"] == "KILLED"
    assert env.store.action(tid).due_at == env.clock.now + 7
    # A killed topology cannot be activated: the handler's refusal, as a conflict.
    status, body = env.post(f"/api/v1/topology/{tid}/activate")
    assert status == 409 and "KILLED" in body["errorMessage"]


@pytest.mark.parametrize("headers, token, sentence", [
    ({}, None, "needs the x-csrf-token header"),
    ({}, "forged", "is not this daemon's antiForgeryToken"),
    ({"origin": "http://evil.example"}, Token.REAL, "from origin 'http://evil.example'"),
    ({"sec-fetch-site": "cross-site"}, Token.REAL, "cross-site request"),
    ({"origin": "https://127.0.0.1:8080"}, Token.REAL, "from origin"),     # another scheme
])
def test_cross_site_and_tokenless_actions_are_403(env: WebEnv, headers: dict[str, str],
                                                  token: str | Token | None,
                                                  sentence: str) -> None:
    tid = env.submit()
    status, body = env.post(f"/api/v1/topology/{tid}/kill/0", token=token, headers=headers)
    assert status == 403 and sentence in body["errorMessage"]
    assert env.get(f"/api/v1/topology/{tid}")[1]["status"] == "ACTIVE"
    # The same-origin page's request passes.
    assert env.post(f"/api/v1/topology/{tid}/deactivate", headers={
        "origin": "http://127.0.0.1:8080", "sec-fetch-site": "same-origin"})[0] == 200


@pytest.mark.parametrize("wait", ["x", "-1", "99999999999", "1.5"])
def test_a_bad_wait_time_is_400(env: WebEnv, wait: str) -> None:
    tid = env.submit()
    for action in ("kill", "rebalance"):
        status, body = env.post(f"/api/v1/topology/{tid}/{action}/{wait}")
        assert status == 400 and "wait-time" in body["errorMessage"]


@pytest.mark.parametrize("body", [b"{", b'{"rebalanceOptions": 3}',
                                  b'{"rebalanceOptions": {"numWorkers": "two"}}',
                                  b'{"rebalanceOptions": {"executors": {"split": -1}}}'])
def test_bad_rebalance_options_are_400(env: WebEnv, body: bytes) -> None:
    tid = env.submit()
    assert env.post(f"/api/v1/topology/{tid}/rebalance/0", body=body)[0] == 400
    assert env.store.action(tid) is None


def test_actions_are_authorized_and_unknown_ids_404(tmp_path: Path) -> None:
    env = WebEnv(tmp_path / "data", admins=["root"], users=["alice", "bob"])
    try:
        tid = env.submit(principal="alice")
        status, body = env.post(f"/api/v1/topology/{tid}/kill/0", principal="bob")
        assert status == 403 and "'bob' may not call killTopologyWithOpts" \
            in body["errorMessage"]
        assert env.get(f"/api/v1/topology/{tid}", principal="alice")[1]["status"] == "ACTIVE"
        assert env.post("/api/v1/topology/nope/activate", principal="root")[0] == 404
        assert env.post(f"/api/v1/topology/{tid}/deactivate", principal="root")[0] == 200
    finally:
        env.close()


def test_actions_take_post_only(env: WebEnv) -> None:
    tid = env.submit()
    response = env.request("GET", f"/api/v1/topology/{tid}/kill/0")
    assert response.status == 405 and ("Allow", "POST") in response.headers
    response = env.request("POST", "/api/v1/topology/summary")
    assert response.status == 405 and ("Allow", "GET, HEAD") in response.headers


# --- /metrics ------------------------------------------------------------------------

def test_metrics_show_the_daemon_and_each_component(env: WebEnv) -> None:
    tid = env.submit()
    stats = env.report(tid, sentences=120, split=100, latency=250.0)
    response = env.request("GET", "/metrics")
    assert response.status == 200
    assert ("Content-Type", "text/plain; version=0.0.4; charset=utf-8") in response.headers
    families = {f.name: f for f in text_string_to_metric_families(response.body.decode())}
    topologies = {s.labels["status"]: s.value for s in families["nimbus_thrift_topologies"]
                  .samples}
    assert topologies == {"ACTIVE": 1, "INACTIVE": 0, "REBALANCING": 0, "KILLED": 0}
    emitted = {s.labels["component"]: s.value
               for s in families["nimbus_thrift_component_emitted"].samples
               if s.name.endswith("_total") and s.labels["topology"] == tid}
    assert emitted == {c: float(s.emitted) for c, s in stats.items()}
    latency = {s.labels["component"]: s.value
               for s in families["nimbus_thrift_component_batch_latency_seconds"].samples}
    assert latency["split"] == 0.25
    assert [s.value for s in families["nimbus_thrift_uploads_in_progress"].samples] == [0]
    assert _unlisted(families) == set()


def test_metrics_count_stored_and_running_errors_per_component(env: WebEnv) -> None:
    tid, other = env.submit(), env.submit(name="other")
    env.handler.store.add_error(tid, "split", "stored once", 1)
    env.handler.store.add_error(tid, "split", "stored twice", 2)
    env.handler.store.add_error(other, "count", "elsewhere", 3)
    env.launcher.run_errors[tid] = (("count", "running now", 4), ("split", "and now", 5))
    families = {f.name: f for f in text_string_to_metric_families(
        env.request("GET", "/metrics").body.decode())}
    counted = {(s.labels["topology"], s.labels["component"]): s.value
               for s in families["nimbus_thrift_component_errors"].samples}
    assert counted == {(tid, "split"): 3, (tid, "count"): 1, (other, "count"): 1}


def test_metrics_show_the_thrift_server_and_its_methods(env: WebEnv) -> None:
    from nimbus_thrift.rpc.methodstats import BUCKETS, MethodSnapshot
    from nimbus_thrift.rpc.metrics import MetricsSnapshot

    class FakeServer:
        def metrics(self) -> MetricsSnapshot:
            return MetricsSnapshot(*range(1, 18))

        def method_metrics(self) -> dict[str, MethodSnapshot]:
            counts = [0] * (len(BUCKETS) + 1)
            counts[0], counts[3], counts[-1] = 2, 1, 1
            return {"getClusterInfo": MethodSnapshot({"ok": 3, "declared": 0, "failed": 1},
                                                     tuple(counts), 12.5)}

    from nimbus_thrift.nimbus.web import WebApp
    env.app = WebApp(env.handler, server=FakeServer)
    families = {f.name: f for f in text_string_to_metric_families(
        env.request("GET", "/metrics").body.decode())}
    assert families["nimbus_thrift_connections_accepted"].samples[0].value == 2
    assert families["nimbus_thrift_read_buffer_reserved_peak_bytes"].samples[0].value == 6
    calls = {s.labels["outcome"]: s.value for s in families["nimbus_thrift_requests"].samples
             if s.name == "nimbus_thrift_requests_total"}
    assert calls == {"ok": 3, "declared": 0, "failed": 1}
    histogram = families["nimbus_thrift_request_duration_seconds"].samples
    buckets = {s.labels["le"]: s.value for s in histogram if s.name.endswith("_bucket")}
    assert buckets["0.0001"] == 2 and buckets["0.001"] == 3 and buckets["+Inf"] == 4
    assert next(s.value for s in histogram if s.name.endswith("_sum")) == 12.5
    assert next(s.value for s in histogram if s.name.endswith("_count")) == 4
    assert _unlisted(families) == set()


def test_metrics_are_read_as_getclusterinfo(tmp_path: Path) -> None:
    env = WebEnv(tmp_path / "data", admins=["ops"], users=["alice", "bob", "carol"])
    try:
        mine = env.submit("mine", principal="alice")
        shared = env.submit("shared", principal="alice",
                            conf={"topology.readonly.users": ["carol"]})
        bobs = env.submit("bobs", principal="bob")
        for tid in (mine, shared, bobs):
            env.report(tid)
        with audit_events() as audit:
            for who in ("mallory", None):           # not a user; nobody identified
                response = env.request("GET", "/metrics", principal=who)
                assert response.status == 403
                assert b"nimbus_thrift_" not in response.body
        assert [(e["operation"], e["principal"], e["outcome"]) for e in audit()] == [
            ("getClusterInfo", "mallory", "refused"),
            ("getClusterInfo", "anonymous", "refused")]

        def shown(who: str) -> tuple[set[str], float]:
            families = list(text_string_to_metric_families(
                env.request("GET", "/metrics", principal=who).body.decode()))
            labelled = {s.labels["topology"] for f in families for s in f.samples
                        if "topology" in s.labels}
            active = next(s.value for f in families if f.name == "nimbus_thrift_topologies"
                          for s in f.samples if s.labels["status"] == "ACTIVE")
            return labelled, active
        # Each sees the series of the topologies it may read; the daemon-wide ones whole.
        assert shown("alice") == ({mine, shared}, 3)
        assert shown("bob") == ({bobs}, 3)
        assert shown("carol") == ({shared}, 3)
        assert shown("ops") == ({mine, shared, bobs}, 3)
    finally:
        env.close()


def test_the_configuration_has_no_paths_and_no_principals(tmp_path: Path) -> None:
    env = WebEnv(tmp_path / "data", admins=["root", "ops-person"], users=["alice-person"])
    try:
        status, conf = env.get("/api/v1/cluster/configuration")
        assert status == 200 and conf["nimbus.thrift.port"] == env.config.port
        text = json.dumps(conf)
        for word in (str(tmp_path), "ops-person", "alice-person"):
            assert word not in text
    finally:
        env.close()


def _unlisted(families: dict[str, Any]) -> set[str]:
    """Metric names a scrape shows that metrics.NAMES (docs/operations.md's list) lacks."""
    from nimbus_thrift.nimbus.web.metrics import NAMES
    shown = {name + ("_total" if family.type == "counter" else "")
             for name, family in families.items()}
    return shown - set(NAMES)


# --- the page's files and its own API -------------------------------------------------

def test_assets_are_served_with_types_and_no_way_out(tmp_path: Path, env: WebEnv) -> None:
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "index.html").write_text("<p>hi</p>")
    (assets / "app.js").write_text("let a = 1;")
    (tmp_path / "secret.js").write_text("no")
    from nimbus_thrift.nimbus.web import WebApp
    app = WebApp(env.handler, static=StaticFiles(assets))
    env.app = app
    index = env.request("GET", "/")
    assert (index.status, index.body) == (200, b"<p>hi</p>")
    headers = dict(index.headers)
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    script = env.request("GET", "/assets/app.js")
    assert dict(script.headers)["Content-Type"] == "text/javascript; charset=utf-8"
    again = env.request("GET", "/assets/app.js",
                        headers={"if-none-match": dict(script.headers)["ETag"]})
    assert (again.status, again.body) == (304, b"")
    for target in ("/assets/..%2Fsecret.js", "/assets/%2E%2E%2Fsecret.js",
                   "/assets/.hidden.js", "/assets/app.exe", "/assets/missing.js",
                   "/assets/..", "/../secret.js"):
        assert env.request("GET", target).status == 404, target


def test_history_gives_rates_and_the_spark_ui(env: WebEnv) -> None:
    tid = env.submit()
    env.report(tid)
    status, body = env.get(f"/api/nimbus-thrift/topology/{tid}/history")
    assert status == 200
    assert body["sparkUi"] == "http://127.0.0.1:4040"
    assert body["components"] == {"sentences": {"type": "spout", "rate": 10.0},
                                  "split": {"type": "bolt", "rate": 10.0},
                                  "count": {"type": "bolt", "rate": 60.0}}
    assert env.get(f"/api/nimbus-thrift/topology/{tid}/history?seconds=0")[0] == 400


def test_rate_series_are_per_interval_and_per_run() -> None:
    samples = [Sample(100.0, 1.0, {"s": (0, 0, 1.0, 0.0), "b": (0, 0, 1.0, 0.0)}),
               Sample(110.0, 1.0, {"s": (50, 0, 1.0, 0.0), "b": (0, 20, 1.0, 0.0)}),
               Sample(120.0, 1.0, {"s": (150, 0, 1.0, 0.0), "b": (0, 20, 1.0, 0.0)}),
               # A relaunch: counts restart, no rate across runs.
               Sample(130.0, 125.0, {"s": (5, 0, 1.0, 0.0), "b": (0, 1, 1.0, 0.0)}),
               Sample(140.0, 125.0, {"s": (25, 0, 1.0, 0.0), "b": (0, 11, 1.0, 0.0)})]
    assert rate_series(samples, {"s"}) == {
        "s": [[110.0, 5.0], [120.0, 10.0], [140.0, 2.0]],
        "b": [[110.0, 2.0], [120.0, 0.0], [140.0, 1.0]]}


def test_pretty_secs_is_storms() -> None:
    assert [pretty_secs(s) for s in (0, 5, 358, 600, 10800, 86400, 93784)] == [
        "0s", "5s", "5m 58s", "10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "1d 2h 3m 4s"]


@pytest.mark.parametrize("host, status", [
    ("127.0.0.1:8080", 200), ("localhost:8080", 200), ("[::1]:8080", 200),
    ("LOCALHOST", 200), ("10.1.2.3", 200),
    ("evil.example:8080", 403), ("127.0.0.1.nip.io", 403)])
def test_only_the_daemons_names_are_served(env: WebEnv, host: str, status: int) -> None:
    # DNS rebinding: another site's name pointed at the daemon must not be served, or
    # its page could read the antiForgeryToken.
    response = env.request("GET", "/api/v1/cluster/summary", headers={"host": host})
    assert response.status == status
    if status == 403:
        assert "is not a name of this daemon" in json.loads(response.body)["errorMessage"]


def test_history_gives_each_components_rate_over_time(env: WebEnv,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    tid = env.submit()
    env.report(tid)
    samples = [Sample(100.0, 1.0, {"sentences": (0, 0, 1.0, 0.0)}),
               Sample(110.0, 1.0, {"sentences": (30, 0, 1.0, 0.0)})]
    asked: list[tuple[str, float]] = []

    def recent(topology_id: str, seconds: float) -> list[Sample]:
        asked.append((topology_id, seconds))
        return samples
    monkeypatch.setattr(env.handler.figures, "samples", recent, raising=False)
    status, body = env.get(f"/api/nimbus-thrift/topology/{tid}/history?seconds=120")
    assert status == 200 and asked == [(tid, 120.0)]
    assert body["history"] == {"sentences": [[110.0, 3.0]]}


def test_metrics_show_restarts_batches_and_launcher_failures(env: WebEnv,
                                                             monkeypatch) -> None:
    import dataclasses
    tid = env.submit()
    plain = env.launcher.status

    def status(topology_id: str):
        return dataclasses.replace(plain(topology_id), restarts=2, batches=41,
                                   last_batch_secs=0.75)
    monkeypatch.setattr(env.launcher, "status", status)
    # A launcher call that raises is recorded on the topology and counted.
    env.launcher.fail.add("launch")
    env.handler.launching.call(tid, env.launcher.launch, None)
    families = {f.name: f for f in text_string_to_metric_families(
        env.request("GET", "/metrics").body.decode())}

    def value(name: str) -> dict[str, float]:
        return {next(iter(s.labels.values())): s.value for s in families[name].samples
                if not s.name.endswith("_created")}
    assert value("nimbus_thrift_topology_restarts") == {tid: 2}
    assert value("nimbus_thrift_topology_batches") == {tid: 41}
    assert value("nimbus_thrift_topology_last_batch_seconds") == {tid: 0.75}
    assert value("nimbus_thrift_launcher_failures") == {"launch": 1}
    assert _unlisted(families) == set()
