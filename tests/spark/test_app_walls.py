"""What other local accounts can reach of a topology's Spark application (issue 24), on
real Spark through the daemon: its settings are in a 0600 properties file, not on any
process's command line; its Spark UI is off unless its conf turns it on (and cannot
kill jobs then); its driver's RPC and block-manager ports ask for the application's
secret (``spark.authenticate``), so a process that has not it gets nothing dispatched.

The secret is checked the cheap way: a raw Spark RPC frame (``RpcRequest`` naming an
endpoint that does not exist) sent to every port the driver JVM listens on. Without
authentication the driver's dispatcher answers it ("Could not find nimbus-probe."); with
it, the port wants a SASL handshake first ("Expected SaslMessage").
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nimbus_thrift.nimbus.spark.proctree import proc_cmdline, session_members
from nimbus_thrift.nimbus.spark.properties import write_properties
from support.daemon_process import DaemonProcess
from support.spark_daemon import (FAST_JVM_ENV, SPARK_TIMEOUT, SparkDaemons, client_of,
                                  wait_until)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
#: Java reading a properties file as Spark does (``Utils.getPropertiesFromFile``:
#: ``Properties.load`` through a UTF-8 reader), printing each key and value as JSON
#: strings of UTF-16 code units.
JAVA_READER = """
import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
public class ReadProps {
  static String hex(String s) { StringBuilder b = new StringBuilder();
    for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
    return b.toString(); }
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    try (Reader r = new InputStreamReader(new FileInputStream(a[0]), StandardCharsets.UTF_8)) {
      p.load(r); }
    for (String k : p.stringPropertyNames())
      System.out.println(hex(k) + " " + hex(p.getProperty(k)));
  }
}
"""


def _from_hex(units: str) -> str:
    data = bytes.fromhex(units)
    return data.decode("utf-16-be", "surrogatepass")


def test_java_reads_the_file_as_written(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    confs = {"spark.a": "plain", "spark.key with spaces": " lead and trail ",
             "spark.syntax=:#!": "a=b:c#d!e\\f", "spark.lines": "1\nspark.authenticate=false\r",
             "spark.tabs\tand\fforms": "\t\f", "spark.unicode.é": "€ \U0001f600 \x00\x7f",
             "spark.empty": ""}
    path = write_properties(tmp_path, confs)
    source = tmp_path / "ReadProps.java"
    source.write_text(JAVA_READER)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    out = subprocess.run([java, str(source), str(path)], capture_output=True, text=True,
                         timeout=120, env=env, check=True).stdout
    read = {_from_hex(key): _from_hex(value)
            for key, _, value in (line.partition(" ") for line in out.splitlines())}
    assert read == confs


# --- a running topology ------------------------------------------------------------------

def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its socket inodes in the kernel's
    tables, as ``ss -ltnp`` finds them)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:          # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _utf(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data            # Java's DataOutput.writeUTF


def rpc_probe(port: int) -> bytes:
    """What a Spark port answers to an ``RpcRequest`` (frame type 3) from a process
    without the application's secret: a ``RequestMessage`` to the endpoint
    ``nimbus-probe`` at 127.0.0.1:``port``, with a Java-serialized null as content.
    Whatever comes back within a few seconds (b"" if the port closed or said nothing)."""
    body = (b"\x00"                                        # no sender address
            + b"\x01" + _utf("127.0.0.1") + struct.pack(">i", port)
            + _utf("nimbus-probe")
            + b"\xac\xed\x00\x05\x70")                     # ObjectOutputStream: null
    message = b"\x03" + struct.pack(">qi", 7, len(body)) + body
    frame = struct.pack(">q", 8 + len(message)) + message
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(frame)
            while len(data) < 8 or len(data) < struct.unpack(">q", data[:8])[0]:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:                       # reset, refused, timed out: nothing dispatched
        pass
    return data


def http_answer(port: int) -> bytes:
    """The first bytes a port answers to an HTTP request (b"" when none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(16)
    except OSError:
        return b""


def launch_record(data_dir: Path, topology_id: str) -> dict[str, Any]:
    return json.loads((data_dir / "topologies" / topology_id / "launch.json").read_text())


@pytest.fixture
def daemon_factory(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Callable[..., DaemonProcess]]:
    daemons = SparkDaemons(tmp_path / "data", tmp_path_factory.mktemp("cache"),
                           env=FAST_JVM_ENV)
    yield daemons.start
    daemons.stop_all()


def test_settings_off_command_lines_ui_off_and_driver_ports_ask_for_the_secret(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    data_dir = tmp_path / "data"
    secret = f"s3cr3t-{secrets.token_hex(8)}"
    d = daemon_factory()
    with client_of(d) as client:
        walled = client.submit_topology(WORDCOUNT, name="walled", conf={
            "wordcount.db": str(tmp_path / "walled.sqlite"), "wordcount.rate": 200,
            "spark.hadoop.fs.s3a.secret.key": secret,
            "spark.authenticate": False,                  # a local master's: ignored
            "spark.ui.port": 4040})                       # the launcher's: ignored
        lit = client.submit_topology(WORDCOUNT, name="lit", conf={
            "wordcount.db": str(tmp_path / "lit.sqlite"), "wordcount.rate": 200,
            "spark.ui.enabled": True, "spark.ui.killEnabled": True})
        infos = {tid: wait_until(f"{tid} running", lambda tid=tid: (
            i := client.getTopologyInfo(tid)).sched_status == "running" and i)
            for tid in (walled, lit)}

        # The settings: a 0600 file in the work directory, on no command line of any
        # process of the application (the JVM, the Python driver, its workers).
        record = launch_record(data_dir, walled)
        work = data_dir / "topologies" / walled
        properties = work / "spark.properties"
        assert (properties.stat().st_mode & 0o777) == 0o600
        assert f"spark.hadoop.fs.s3a.secret.key={secret}\n" in properties.read_text()
        members = session_members(record["pid"], record["start_ticks"])
        assert len(members) >= 2                          # the JVM and the Python driver
        for member in members:
            cmdline = " ".join(proc_cmdline(member.pid))
            assert secret not in cmdline and "--conf" not in cmdline, cmdline
        jvm = " ".join(proc_cmdline(record["pid"]))
        assert f"--properties-file {properties}" in jvm
        assert "spark.authenticate" not in jvm and "spark.hadoop" not in jvm

        # No UI: no port taken, none said, none answering HTTP.
        assert record["ui_port"] == 0
        assert {e.port for e in infos[walled].executors} == {0}
        ports = listening_ports(record["pid"])
        assert ports, "the driver JVM listens on nothing"
        assert not [p for p in ports if http_answer(p).startswith(b"HTTP/")]

        # Every port of the driver JVM refuses an RPC from a process without the
        # secret; one at least (the driver's RPC port) asks for the SASL handshake.
        answers = {port: rpc_probe(port) for port in ports}
        assert not [p for p, a in answers.items() if b"Could not find" in a], answers
        assert [p for p, a in answers.items() if b"Expected SaslMessage" in a], answers

        # The topology that turned its UI on has it, at the port the launcher took,
        # and the UI cannot kill its jobs whatever its conf said.
        lit_record = launch_record(data_dir, lit)
        port = lit_record["ui_port"]
        # The worker's port is the UI's (what ``nimbus-thrift info`` links to).
        assert port and {e.port for e in infos[lit].executors} == {port}
        assert port in listening_ports(lit_record["pid"])
        base = f"http://127.0.0.1:{port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=30) as resp:
            (app,) = json.load(resp)
        with urllib.request.urlopen(f"{base}/{app['id']}/environment", timeout=30) as resp:
            properties_seen = dict(json.load(resp)["sparkProperties"])
        assert properties_seen["spark.ui.killEnabled"] == "false"
        assert properties_seen["spark.authenticate"] == "true"
        lit_secret = next(line.partition("=")[2] for line in (
            data_dir / "topologies" / lit / "spark.properties").read_text().splitlines()
            if line.startswith("spark.authenticate.secret="))
        assert lit_secret not in json.dumps(properties_seen)      # Spark redacts it

        for name in ("walled", "lit"):
            client.killTopologyWithOpts(name, client.idl.KillOptions(wait_secs=0))
        wait_until("both removed", lambda: not client.getClusterInfo().topologies)
    for rec in (record, lit_record):
        wait_until("no process left", lambda rec=rec: not session_members(
            rec["pid"], rec["start_ticks"]), timeout=30)
