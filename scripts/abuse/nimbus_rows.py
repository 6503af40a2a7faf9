"""Issue 13's table, replayed against a real daemon: the rows a hostile or careless
Nimbus client can do with cheap requests (rows 3-5 also have their own
scripts beside this one). For each row: what the attacker (from 127.0.0.2) got, how a
well-behaved client on 127.0.0.1 fared meanwhile, and the daemon's memory.

Usage:
    .venv/bin/python scripts/abuse/nimbus_rows.py [--rows 1,2,3,5,6,7,8,9,10,11,12,13]
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

from abuse_common import tcp_mem_mib
from harness import ATTACKER, Daemon, Probe, Raw, outcome

from nimbus_thrift.idl import nimbus_idl

N = nimbus_idl()


def shell(script: str) -> Any:
    return N.ComponentObject(shell=N.ShellComponent(execution_command="python",
                                                    script=script))


def topology(spouts: list[str], sink: str = "app.parts.Sink") -> Any:
    stream = {"default": N.StreamInfo(output_fields=["x"], direct=False)}
    return N.StormTopology(
        spouts={f"s{i}": N.SpoutSpec(spout_object=shell(script), common=N.ComponentCommon(
            inputs={}, streams=stream)) for i, script in enumerate(spouts)},
        bolts={"sink": N.Bolt(bolt_object=shell(sink), common=N.ComponentCommon(
            inputs={N.GlobalStreamId(componentId="s0", streamId="default"):
                    N.Grouping(shuffle=N.NullStruct())}, streams={}))},
        state_spouts={})


def code_zip(extra: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("app/__init__.py", "")
        zf.writestr("app/parts.py", "class Source: pass\nclass Sink: pass\n")
        for name, text in (extra or {}).items():
            zf.writestr(name, text)
    return buf.getvalue()


def upload(client: Any, data: bytes) -> str:
    location = client.beginFileUpload()
    for i in range(0, len(data), 300_000):
        client.uploadChunk(location, data[i:i + 300_000])
    client.finishFileUpload(location)
    return location


def timed(func: Callable[[], Any]) -> tuple[float, str]:
    start = time.perf_counter()
    result = outcome(func)
    return time.perf_counter() - start, result


def big_module(size: int = 2 << 20) -> dict[str, str]:
    """``size`` bytes of plain source (compresses to a few KB), four classes at its end."""
    body = "x = [1, 2, 3]\n" * (size // 14)
    return {"big/__init__.py": "", "big/mod.py": body + "".join(
        f"class S{i}: pass\n" for i in range(4))}


def row1(d: Daemon) -> list[str]:
    with d.client() as client:
        other = upload(client, code_zip())
        client.submitTopology("other", other, "{}", topology(["app.parts.Source"]))
        location = upload(client, code_zip(big_module()))
    lat: list[float] = []
    stop = threading.Event()

    def toggler() -> None:
        with d.client() as client:
            while not stop.is_set():
                for method in ("deactivate", "activate"):
                    start = time.perf_counter()
                    client.call(method, "other")
                    lat.append(time.perf_counter() - start)
    with Probe(d) as probe:
        thread = threading.Thread(target=toggler)
        thread.start()
        attacker = Raw(d)
        took, got = timed(lambda: attacker.call(
            "submitTopology", "big", location, "{}",
            topology([f"big.mod.S{i}" for i in range(4)])))
        stop.set()
        thread.join()
    return [f"submit of 4 spouts in a 2 MiB module: {got} in {took:.1f} s "
            f"[{'ok' if took < 5 else 'MISSED'}: < 5 s]",
            f"another topology's deactivate/activate meanwhile: worst "
            f"{max(lat) * 1e3:.0f} ms over {len(lat)}", probe.summary()]


def row2(d: Daemon) -> list[str]:
    with d.client() as client:
        # Just under the parse cap (max_code_parse_bytes, 256 KiB), so each is parsed.
        locations = [upload(client, code_zip(big_module(250 << 10))) for _ in range(64)]
    results: list[str] = []

    def submit(i: int) -> None:
        attacker = Raw(d)
        results.append(outcome(lambda: attacker.call(
            "submitTopology", f"big{i}", locations[i], "{}",
            topology([f"big.mod.S{k}" for k in range(4)]))))
    with Probe(d, "getNimbusConf") as probe:
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(64)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - start
    kinds: dict[str, int] = {}
    for r in results:
        kinds[r.split(":")[0]] = kinds.get(r.split(":")[0], 0) + 1
    return [f"64 concurrent slow submits: {kinds} in {took:.1f} s",
            f"(a refusal reads: {next((r for r in results if r != 'ok'), '-')})",
            probe.summary()]


def row6(d: Daemon) -> list[str]:
    attacker = Raw(d)
    got = [outcome(lambda: attacker.call("beginFileUpload")) for _ in range(256)]
    refused = sum(1 for g in got if g != "ok")
    with Probe(d) as probe, d.client() as client:
        good = outcome(lambda: upload(client, code_zip()))
    downloads = [outcome(lambda: attacker.call("beginFileDownload", "x")) for _ in range(8)]
    return [f"256 beginFileUpload from {ATTACKER}: {256 - refused} open, {refused} refused "
            f"({next((g for g in got if g != 'ok'), '-')})",
            f"an upload from 127.0.0.1 meanwhile: {good}",
            f"beginFileDownload of an unknown file: {downloads[0]}", probe.summary()]


def row3(d: Daemon, connections: int = 260, size: int = 1_000_000) -> list[str]:
    """Connections each declare a frame of ``size`` bytes and send all of it but the
    last byte: every byte they send is real, so it is charged (not just declared)."""
    rss = d.rss_mib()
    attackers, refused = [], 0
    header = struct.pack("!i", size)
    with Probe(d) as probe:
        for _ in range(connections):
            try:
                attacker = Raw(d, timeout=5)
                attacker.sock.sendall(header + b"\0" * (size - 1))
                attackers.append(attacker)
            except OSError:
                refused += 1
        time.sleep(10)
        growth = d.rss_mib("VmHWM") - rss
    for attacker in attackers:
        attacker.close()
    return [f"{len(attackers)} connections sent {size - 1:,} of a {size:,}-byte frame; "
            f"{refused} could not",
            f"daemon RSS {rss:.0f} -> peak {d.rss_mib('VmHWM'):.0f} MiB "
            f"[{'ok' if growth < 100 else 'MISSED'}: < 100 MiB growth]", probe.summary()]


def row5(d: Daemon, connections: int = 1000) -> list[str]:
    """Many connections each ask for a ~1 MB reply (a topology's 900 KB conf) with a
    small request, and never read it."""
    conf = '{"pad": "' + "x" * 900_000 + '"}'
    with d.client() as client:
        location = upload(client, code_zip())
        client.submitTopology("bigconf", location, conf, topology(["app.parts.Source"]))
        tid = client.getClusterInfo().topologies[0].id
    rss, tcp_before = d.rss_mib(), tcp_mem_mib()
    peak_tcp, attackers, refused = tcp_before, [], 0
    with Probe(d) as probe:
        for _ in range(connections):
            try:
                attacker = Raw(d)
                attacker.send("getTopologyConf", tid)
                attackers.append(attacker)
            except OSError:
                refused += 1
            if len(attackers) % 50 == 0:
                peak_tcp = max(peak_tcp, tcp_mem_mib())
        end = time.monotonic() + 10
        while time.monotonic() < end:
            peak_tcp = max(peak_tcp, tcp_mem_mib())
            time.sleep(0.5)
    growth = d.rss_mib("VmHWM") - rss
    for attacker in attackers:
        attacker.close()
    return [f"{len(attackers)} connections sent getTopologyConf (900 KB reply) and read "
            f"nothing; {refused} refused",
            f"daemon RSS {rss:.0f} -> peak {d.rss_mib('VmHWM'):.0f} MiB "
            f"[{'ok' if growth < 100 else 'MISSED'}: < 100 MiB growth]; machine's TCP "
            f"memory {tcp_before:.0f} -> peak {peak_tcp:.0f} MiB", probe.summary()]


def row7(d: Daemon) -> list[str]:
    rss = d.rss_mib()
    empty = [N.JavaObjectArg() for _ in range(1_000_000)]
    spout = N.ComponentObject(java_object=N.JavaObject(full_class_name="x", args_list=empty))
    bad = N.StormTopology(spouts={"s": N.SpoutSpec(spout_object=spout, common=N.ComponentCommon(
        inputs={}, streams={}))}, bolts={}, state_spouts={})
    got = []
    with Probe(d) as probe:
        for _ in range(8):
            attacker = Raw(d)
            got.append(outcome(lambda: attacker.call("submitTopology", "t", "loc", "{}", bad)))
            attacker.close()
    return [f"8 submits of ~1M empty structs: {got[0]}",
            f"daemon RSS {rss:.0f} -> peak {d.rss_mib('VmHWM'):.0f} MiB, now "
            f"{d.rss_mib():.0f} MiB [{'ok' if d.rss_mib('VmHWM') - rss < 400 else 'MISSED'}: "
            "< 400 MiB growth]", probe.summary()]


def row8(d: Daemon) -> list[str]:
    with d.client() as client:
        location = upload(client, code_zip())
        got = outcome(lambda: client.submitTopology(
            "huge", location, '{"topology.workers": 1099511627776}',
            topology(["app.parts.Source"])))
        hint = topology(["app.parts.Source"])
        hint.spouts["s0"].common.parallelism_hint = 2**31 - 1
        got_hint = outcome(lambda: client.submitTopology("hint", location, "{}", hint))
        listed = outcome(client.getClusterInfo)
    return [f"topology.workers 2**40: {got}", f"parallelism hint 2**31-1: {got_hint}",
            f"getClusterInfo afterwards: {listed}"]


def row9(d: Daemon) -> list[str]:
    with d.client() as client:
        location = upload(client, code_zip())
        got = [outcome(lambda: client.submitTopology(
            f"mem{i}", location, '{"spark.driver.memory": "64g"}',
            topology(["app.parts.Source"]))) for i in range(150)]
    accepted = sum(1 for g in got if g == "ok")
    return [f"150 submits asking for spark.driver.memory=64g: {accepted} accepted, "
            f"{150 - accepted} refused ({next((g for g in got if g != 'ok'), '-')})"]


def row10_11(d: Daemon) -> list[str]:
    with d.client() as client:
        location = upload(client, code_zip())
        got = outcome(lambda: client.submitTopology("x" * 250, location, "{}",
                                                    topology(["app.parts.Source"])))
        listed = [t.name[:20] for t in client.getClusterInfo().topologies]
        allowed = client.isTopologyNameAllowed("a\u202eb\u0085\u2028c")
    return [f"row 10, a 250-character name: {got}; listed afterwards: {listed}",
            f"row 11, isTopologyNameAllowed('a\\u202eb\\u0085\\u2028c'): {allowed}"]


def row12(d: Daemon) -> list[str]:
    def mode(path: Path) -> str:
        return oct(stat.S_IMODE(path.stat().st_mode))
    files = [d.data_dir, d.data_dir / "nimbus.sqlite3", d.data_dir / "inbox"]
    return ["data directory made 0755 beforehand; after start: " +
            ", ".join(f"{p.name} {mode(p)}" for p in files if p.exists())]


def row13(d: Daemon) -> list[str]:
    conf = '{"pad": "' + "x" * 900_000 + '"}'
    with d.client() as client:
        location = upload(client, code_zip())
        for i in range(50):
            client.submitTopology(f"conf{i}", location, conf, topology(["app.parts.Source"]))
        start = time.perf_counter()
        for _ in range(20):
            client.getClusterInfo()
        took = (time.perf_counter() - start) / 20
    return [f"getClusterInfo with 50 topologies of 900 KB confs: {took * 1e3:.1f} ms a call"]


ROWS: dict[str, tuple[Callable[[Daemon], list[str]], dict[str, Any]]] = {
    "1": (row1, {}), "2": (row2, {}), "3": (row3, {}), "5": (row5, {}), "6": (row6, {}),
    "7": (row7, {}), "8": (row8, {}),
    # The Spark launcher for its memory admission; nothing it admits here starts
    # (spark-submit is /bin/true).
    "9": (row9, {"launcher": "spark", "spark_submit": "/bin/true"}),
    "10,11": (row10_11, {}), "12": (row12, {}), "13": (row13, {}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    wanted = set(parser.parse_args().rows.split(","))
    for name, (func, settings) in ROWS.items():
        if not wanted & set(name.split(",")):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            if name == "12":
                (work / "data").mkdir(mode=0o755)
                os.chmod(work / "data", 0o755)
            d = Daemon(work, **settings)
            try:
                rss = d.rss_mib()
                lines = func(d)
                lines.append(f"daemon RSS {rss:.0f} MiB at start, peak "
                             f"{d.rss_mib('VmHWM'):.0f} MiB")
            finally:
                d.stop()
        print(f"row {name}:")
        for line in lines:
            print(f"  {line}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
