"""The HTTP side with a real word count (examples/wordcount.py through the Spark
launcher, a daemon process on local Spark): Storm's REST API answers the same figures
as ``nimbus-thrift info --json`` for the same topology, /metrics shows them per
component, and the REST actions deactivate, activate and kill it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nimbus_thrift.client.client import NimbusClient
from support.daemon_process import DaemonProcess
from support.spark_daemon import FAST_JVM_ENV, SPARK_TIMEOUT, wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


def ui_url(d: DaemonProcess) -> str | None:
    for line in d.lines:
        match = re.search(r"web UI, REST API and /metrics at (http://\S+?)/?$", line.strip())
        if match:
            return match.group(1)
    return None


def rest(url: str, path: str, *, token: str | None = None) -> Any:
    request = urllib.request.Request(url + path, method="POST" if token else "GET",
                                     headers={"x-csrf-token": token} if token else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def info_json(port: int, name: str) -> dict[str, Any]:
    result = subprocess.run(CLI + ["info", name, "--json", "--port", str(port)],
                            capture_output=True, text=True, timeout=120, check=True)
    return {row["component"]: row for row in json.loads(result.stdout)["components"]}


def settled_info(port: int, name: str) -> dict[str, Any] | None:
    first = info_json(port, name)
    time.sleep(3)
    return first if first and info_json(port, name) == first else None


def test_rest_figures_equal_info_json_and_actions_work(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "data", "--launcher", "spark", "--ui-port", "-1",
                      env={**FAST_JVM_ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        url = wait_until("the web UI's URL in the banner", lambda: ui_url(d), timeout=30)
        with NimbusClient("127.0.0.1", d.port, timeout=60, connect_timeout=5) as client:
            topology_id = client.submit_topology(
                WORDCOUNT, conf={"wordcount.db": str(tmp_path / "wc.sqlite"),
                                 "wordcount.rate": 500},
                wait=True, timeout=SPARK_TIMEOUT)
        page = wait_until("non-zero figures on the REST page", lambda: (
            p := rest(url, f"/api/v1/topology/{topology_id}"))["spouts"][0].get("emitted")
            and p)
        token = page["antiForgeryToken"]
        assert rest(url, f"/api/v1/topology/{topology_id}/deactivate",
                    token=token)["status"] == "success"
        wait_until("paused", lambda: rest(url, f"/api/v1/topology/{topology_id}")
                   ["schedulerInfo"] == "paused")
        rows = wait_until("the figures to settle", lambda: settled_info(d.port, "wordcount"),
                          every=0)
        page = rest(url, f"/api/v1/topology/{topology_id}")
        assert page["status"] == "INACTIVE"
        components = {**{s["spoutId"]: s for s in page["spouts"]},
                      **{b["boltId"]: b for b in page["bolts"]}}
        assert set(components) == set(rows) == {"sentences", "split", "count", "sink"}
        for component, row in rows.items():
            shown = components[component]
            assert (shown["executors"], shown["tasks"]) == (row["executors"], row["tasks"])
            assert shown["emitted"] == row["emitted"], component
            if "boltId" in shown:
                assert shown["executed"] == row["processed"], component
        assert rows["sentences"]["emitted"] > 0 and rows["count"]["processed"] > 0
        for component, row in rows.items():
            one = rest(url, f"/api/v1/topology/{topology_id}/component/{component}")
            assert one["executors"] == row["executors"]
            assert sum(e.get("emitted", 0) for e in one["executorStats"]) == row["emitted"]
        history = rest(url, f"/api/nimbus-thrift/topology/{topology_id}/history")
        assert history["sparkUi"] is None       # a topology's Spark UI is off by default
        assert {c: v["rate"] for c, v in history["components"].items()} == \
            {c: row["rate"] for c, row in rows.items()}
        with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
            families = {f.name: f for f in text_string_to_metric_families(
                response.read().decode())}
        emitted = {s.labels["component"]: s.value
                   for s in families["nimbus_thrift_component_emitted"].samples
                   if s.labels.get("topology") == topology_id}
        assert emitted == {c: float(row["emitted"]) for c, row in rows.items()}

        assert rest(url, f"/api/v1/topology/{topology_id}/activate",
                    token=token)["status"] == "success"
        wait_until("counts to grow after activate", lambda: rest(
            url, f"/api/v1/topology/{topology_id}")["spouts"][0]["emitted"]
            > rows["sentences"]["emitted"])
        with pytest.raises(urllib.error.HTTPError) as refused:
            rest(url, f"/api/v1/topology/{topology_id}/kill/0", token="forged")
        assert refused.value.code == 403
        refused.value.close()       # it holds the response's socket
        assert rest(url, f"/api/v1/topology/{topology_id}/kill/0",
                    token=token)["status"] == "success"
        wait_until("the topology to be removed", lambda: not rest(
            url, "/api/v1/topology/summary")["topologies"])
    finally:
        if d.proc.poll() is None:
            d.sigterm()
