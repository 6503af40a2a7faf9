"""streamparse's own CLI against the daemon (issue 32): a daemon process on local Spark
runs examples/wordcount.py, and ``sparse`` (streamparse 5.0.1, from the venv
scripts/setup.sh makes for it, .venv-streamparse) is run as a streamparse user would,
from a project directory whose config.json points at the daemon's Thrift port and web
port without SSH. streamparse asks Leiningen for the Storm version (``lein deps
:tree``): a stand-in ``lein`` on the PATH answers one.

``list``, ``stats --all``, ``stats -n``, ``slot_usage``, ``worker_uptime`` and ``kill
-n`` each exit 0 and show the topology; ``list`` shows its name whole (a sentence in
sched_status once wrapped it over two lines), ``stats`` has no MISSING field, and the
log URL ``worker_uptime`` prints serves the topology's log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from nimbus_thrift.client.client import NimbusClient
from support.daemon_process import DaemonProcess
from support.spark_daemon import FAST_JVM_ENV, SPARK_TIMEOUT, wait_until
from test_web_api_spark import rest, ui_url

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
#: Where scripts/setup.sh installs streamparse (a venv of its own: see there).
SPARSE = ROOT / ".venv-streamparse" / "bin" / "sparse"
#: What the stand-in ``lein deps :tree`` prints: the line streamparse's
#: storm_lib_version looks for, naming the Storm API the daemon speaks.
LEIN_TREE = '[org.apache.storm/storm-core "2.8.0"]'


def project(tmp_path: Path, thrift_port: int, web_port: int) -> tuple[Path, dict[str, str]]:
    """A streamparse project directory for this daemon, and the environment to run
    ``sparse`` in (the stand-in ``lein`` first on the PATH)."""
    directory = tmp_path / "project"
    (directory / "topologies").mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({
        "serializer": "json", "topology_specs": "topologies/",
        "virtualenv_specs": "virtualenvs/",
        "envs": {"prod": {"user": "", "nimbus": f"127.0.0.1:{thrift_port}",
                          "ui.port": web_port, "use_ssh_for_nimbus": False,
                          "workers": [], "log": {}, "virtualenv_root": ""}}}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lein = bin_dir / "lein"
    lein.write_text(f"#!/bin/sh\necho '{LEIN_TREE}'\n")
    lein.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{SPARSE.parent}:{os.environ['PATH']}",
           # Its SSH stack's deprecation warnings are not what is tested.
           "PYTHONWARNINGS": "ignore",
           # Leiningen's own switch: sparse refuses to run as root without it (a real
           # lein would wait for a "yes"); harmless for another user.
           "LEIN_ROOT": "1"}
    env.pop("VIRTUAL_ENV", None)
    return directory, env


def sparse(directory: Path, env: dict[str, str], *args: str) -> str:
    """``sparse ARGS`` in ``directory``; its output, after checking it exited 0."""
    result = subprocess.run([str(SPARSE), *args], cwd=directory, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    print(f"$ sparse {' '.join(args)}\n{result.stdout}")     # pytest shows it on failure
    return result.stdout


def table_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first table texttable drew in ``text``, by column header, each
    cell's wrapped pieces joined (no spaces: the values compared have none)."""
    lines = [line for line in text.splitlines() if line.startswith(("+", "|"))]
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.startswith("+"):
            if blocks[-1]:
                blocks.append([])
        else:
            blocks[-1].append(line)
    cells = [["".join(piece.strip() for piece in column)
              for column in zip(*(line.strip("|").split("|") for line in block))]
             for block in blocks if block]
    header, *rows = cells
    return [dict(zip(header, row)) for row in rows]


def test_streamparses_own_cli_lists_reads_and_kills_the_topology(tmp_path: Path) -> None:
    if not SPARSE.exists():
        pytest.skip(f"{SPARSE} is missing: scripts/setup.sh installs streamparse there")
    d = DaemonProcess(tmp_path / "data", "--launcher", "spark", "--ui-port", "-1",
                      env={**FAST_JVM_ENV, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        url = wait_until("the web UI's URL in the banner", lambda: ui_url(d), timeout=30)
        web_port = int(url.rsplit(":", 1)[1])
        with NimbusClient("127.0.0.1", d.port, timeout=60, connect_timeout=5) as client:
            topology_id = client.submit_topology(
                WORDCOUNT, conf={"wordcount.db": str(tmp_path / "wc.sqlite"),
                                 "wordcount.rate": 200},
                wait=True, timeout=SPARK_TIMEOUT)
        wait_until("figures on the REST page", lambda: rest(
            url, f"/api/v1/topology/{topology_id}")["spouts"][0]["emitted"])
        directory, env = project(tmp_path, d.port, web_port)

        listed = sparse(directory, env, "list", "-e", "prod")
        # One row, sched_status Storm's word. (streamparse's table gives each of the
        # sixteen columns of Storm 1.1's TopologySummary an equal share of 115
        # characters, so every cell wraps at about five whatever the values: a
        # sentence in sched_status made the row dozens of lines tall.)
        (row,) = table_rows(listed)
        assert (row["id"], row["name"], row["status"], row["sched_status"]) == (
            topology_id, "wordcount", "ACTIVE", "running"), listed
        assert len(listed.splitlines()) < 20, listed

        cluster = sparse(directory, env, "stats", "--all", "-e", "prod")
        assert re.search(rf"\|\s*wordcount\s*\|\s*{re.escape(topology_id)}\s*\|", cluster), \
            cluster
        assert "MISSING" not in cluster, cluster

        stats = sparse(directory, env, "stats", "-n", "wordcount", "-e", "prod")
        assert topology_id in stats and "# Bolt (All time)" in stats, stats
        assert "MISSING" not in stats, stats
        for component in ("sentences", "split", "count", "sink"):
            assert re.search(rf"\|\s*{component}\s*\|", stats), (component, stats)

        slots = sparse(directory, env, "slot_usage", "-e", "prod")
        assert re.search(r"\|\s*Host\s*\|\s*wordcount\s*\|", slots), slots

        uptime = sparse(directory, env, "worker_uptime", "-e", "prod")
        links = set(re.findall(r"http://\S+/log\b", uptime))
        assert links == {f"{url}/api/nimbus-thrift/topology/{topology_id}/log"}, uptime
        with urllib.request.urlopen(links.pop(), timeout=60) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            assert int(response.headers["X-Log-Size"]) > 0

        sparse(directory, env, "kill", "-n", "wordcount", "-e", "prod")
        killed = rest(url, "/api/v1/topology/summary")["topologies"]
        assert [t["status"] for t in killed] in ([], ["KILLED"]), killed
        # Storm's default wait (the message timeout, 30 s), then the application stops.
        wait_until("the topology to be removed", lambda: not rest(
            url, "/api/v1/topology/summary")["topologies"])
    finally:
        if d.proc.poll() is None:
            d.sigterm()
