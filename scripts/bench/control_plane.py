#!/usr/bin/env python3
"""The Nimbus control plane under a dashboard's load (issue 26): one real daemon
(``--launcher none``) holding N stored topologies, 100 Storm clients calling
getClusterInfo (30 %), getTopologyInfo (40 %), getTopologyConf (25 %) and
deactivate + activate (5 %).

    .venv/bin/python scripts/bench/control_plane.py [--topologies 50,500,1000,5000]
        [--duration 20] [--rate 1000] [--clients 100] [--baseline REF] [--json]

For each N (ascending: one daemon per checkout is filled up to each N in turn):

    fill     topologies uploaded and submitted as Storm clients do (beginFileUpload,
             uploadChunk, finishFileUpload, submitTopology; a spout and a bolt each):
             submits/s, and the daemon's resident memory per stored topology
    open     the mix offered at --rate calls/s in all, each client on a fixed schedule;
             latency counts from when a call was DUE, so queueing shows; calls not
             sent by the end are counted as unsent
    closed   the mix as fast as the clients go
    reads    getTopologyInfo + getTopologyConf alone, closed loop

``--baseline REF``: a ``git worktree add`` of REF in a temporary directory, its C
accelerators built (cached in scripts/bench/build/), a second daemon started from it
(PYTHONPATH set to it); the scenarios alternate between both, ratios current / baseline.
Daemons are stopped and the worktree removed at exit, Ctrl-C included.

The clients are processes (--client-procs) of threads, one connection each, framed
binary protocol, every reply decoded by thriftpy2 with idl/nimbus.thrift (Storm 2's
IDL) as a Storm client would (``--no-decode``: only which result field it holds). On
this 2-core machine clients and daemon share the cores: read ratios, and absolute
figures only on a quiet machine.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thriftpy2.protocol import TCyBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException
from thriftpy2.utils import deserialize, serialize

# The bench's own tree, whichever checkout a daemon runs: the same clients for both.
from nimbus_thrift.idl import nimbus_idl

REPO = Path(__file__).resolve().parents[2]
#: Built C accelerators of baseline commits, so a second run need not rebuild them.
BUILD_CACHE = REPO / "scripts" / "bench" / "build" / "control_plane"

#: The dashboard mix of issue 26 (weights in %).
MIX = {"getClusterInfo": 30, "getTopologyInfo": 40, "getTopologyConf": 25,
       "deactivate+activate": 5}
#: The small reads alone.
READS = {"getTopologyInfo": 40, "getTopologyConf": 25}
SCENARIOS = ("open", "closed", "reads")

_CALL, _EXCEPTION = 1, 3
_VERSION_1 = 0x80010000
_TYPE_STOP = 0


# ---------------------------------------------------------------------------- wire
class CallFailed(Exception):
    """The daemon answered with an exception (declared or TApplicationException)."""

    def __str__(self) -> str:   # ids of uploads and topologies out, so errors add up
        return re.sub(r"[0-9a-f]{12,}|bench-\d+[-\w]*", "*", super().__str__())[:120]


class Conn:
    """One framed, strict-binary connection; calls are encoded with thriftpy2's Cython
    protocol and their replies read whole, then decoded (or only checked)."""

    def __init__(self, host: str, port: int, timeout: float, decode: bool = True) -> None:
        self.address, self.timeout, self.decode = (host, port), timeout, decode
        self.factory, self.service, self.seqid = TCyBinaryProtocolFactory(), nimbus_idl().Nimbus, 0
        self.sock: socket.socket | None = None
        self.connect()

    def connect(self) -> None:
        self.close()
        self.sock = socket.create_connection(self.address, timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def encode(self, method: str, **args: Any) -> bytes:
        """The call's arguments struct, encoded once (a caller may keep it)."""
        return serialize(getattr(self.service, method + "_args")(**args), self.factory)

    def call(self, method: str, args: bytes, close: bool = False) -> Any:
        """Send one call and return its success value (None for a void call); close the
        connection after it if ``close``.

        Raises:
            CallFailed: the reply holds an exception.
            OSError: the connection failed or timed out (socket.timeout).
        """
        assert self.sock is not None
        self.seqid = (self.seqid + 1) & 0x7FFFFFFF
        name = method.encode()
        body = (struct.pack("!Ii", _VERSION_1 | _CALL, len(name)) + name
                + struct.pack("!i", self.seqid) + args)
        self.sock.sendall(struct.pack("!i", len(body)) + body)
        reply = self._read(struct.unpack("!i", self._read(4))[0])
        if close:
            self.close()
        version, name_len = struct.unpack_from("!Ii", reply, 0)
        if version & 0xFFFF0000 != _VERSION_1:
            raise CallFailed(f"reply header {version:#x} is not strict binary")
        offset = 8 + name_len
        (seqid,) = struct.unpack_from("!i", reply, offset)
        if seqid != self.seqid:
            raise CallFailed(f"reply seqid {seqid}, sent {self.seqid}")
        payload = bytes(reply[offset + 4:])
        if version & 0xFF == _EXCEPTION:
            exc = deserialize(TApplicationException(), payload, self.factory)
            raise CallFailed(f"TApplicationException {exc.type}: {exc.message}")
        # The first field of the result struct says which it is: 0 is success, STOP is
        # a void success, any other id is one of the declared exceptions.
        succeeded = payload[0] == _TYPE_STOP or payload[1:3] == b"\x00\x00"
        if succeeded and not self.decode:
            return None
        result = deserialize(getattr(self.service, method + "_result")(), payload,
                             self.factory)
        if not succeeded:
            for spec in result.thrift_spec.values():
                exc = getattr(result, spec[1])
                if spec[1] != "success" and exc is not None:
                    raise CallFailed(f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}")
        return getattr(result, "success", None)

    def _read(self, size: int) -> memoryview:
        assert self.sock is not None
        view, got = memoryview(bytearray(size)), 0
        while got < size:
            if not (n := self.sock.recv_into(view[got:])):
                raise ConnectionError("the daemon closed the connection")
            got += n
        return view


# ---------------------------------------------------------------------------- daemon
def code_zip() -> bytes:
    """A topology's code: the two classes its components name (checked at submit)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("benchapp/__init__.py", "")
        zf.writestr("benchapp/parts.py", "class Source:\n    pass\n\nclass Sink:\n    pass\n")
    return buf.getvalue()


def small_topology() -> Any:
    """A spout and a bolt, shuffle-grouped: what a small Storm topology looks like."""
    n = nimbus_idl()
    source, sink = (n.ComponentObject(shell=n.ShellComponent(
        execution_command="python", script=f"benchapp.parts.{c}")) for c in ("Source", "Sink"))
    stream = n.GlobalStreamId(componentId="source", streamId="default")
    return n.StormTopology(
        spouts={"source": n.SpoutSpec(spout_object=source, common=n.ComponentCommon(
            inputs={}, streams={"default": n.StreamInfo(output_fields=["x"], direct=False)}))},
        bolts={"sink": n.Bolt(bolt_object=sink, common=n.ComponentCommon(
            inputs={stream: n.Grouping(shuffle=n.NullStruct())}, streams={},
            parallelism_hint=2))},
        state_spouts={})


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and of its children (a multi-process server's), in
    bytes; 0 if it is gone."""
    pids = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        pids += [int(c) for c in task.read_text().split()]
    pages = 0
    for p in pids:
        try:
            pages += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except OSError:
            pass
    return pages * os.sysconf("SC_PAGE_SIZE")


class Daemon:
    """``python -m nimbus_thrift.cli nimbus`` from ``checkout`` (PYTHONPATH set to it),
    on port 0; the port is read from its banner, its log drained into a file."""

    def __init__(self, label: str, checkout: Path, data_dir: Path, max_topologies: int,
                 log_level: str, extra_args: list[str]) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("NIMBUS_THRIFT_") and k != "PYTHONPATH"}
        env.update(PYTHONPATH=str(checkout), NIMBUS_THRIFT_LAUNCHER="none",
                   NIMBUS_THRIFT_STANDBY_DRIVERS="0",
                   NIMBUS_THRIFT_MAX_TOPOLOGIES=str(max_topologies))
        where = subprocess.run(
            [sys.executable, "-c", "import nimbus_thrift; print(nimbus_thrift.__file__)"],
            cwd=checkout, env=env, capture_output=True, text=True, check=True).stdout.strip()
        if not Path(where).resolve().is_relative_to(checkout.resolve()):
            raise SystemExit(f"{label}: nimbus_thrift imports from {where}, not {checkout}")
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimbus_thrift.cli", "nimbus", "--port", "0",
             "--data-dir", str(data_dir), "--ui-port", "0", "--log-format", "json",
             "--log-level", log_level, *extra_args],
            cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True)   # Ctrl-C reaches us; we stop it
        self.port, self.ready = 0, threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        try:
            if not self.ready.wait(120) or not self.port:
                raise SystemExit(f"{label}: nimbus did not start:\n" + (
                    self.log_path.read_text()[-2000:] if self.log_path.exists() else ""))
            Conn("127.0.0.1", self.port, 60).call("getClusterInfo", b"\x00", close=True)
        except BaseException:   # Ctrl-C too: the caller has not put us on its exit stack yet
            self.stop()
            raise

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        try:
            with open(self.log_path, "w") as log:
                for line in self.proc.stderr:
                    log.write(line)
                    if not self.port and line.startswith("nimbus listening on "):
                        self.port = int(line.split()[3].rsplit(":", 1)[1])
                        self.ready.set()
        finally:
            self.ready.set()    # at exit too: the starter stops waiting

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; by its own PID only."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


def fill(daemon: Daemon, start: int, stop: int, clients: int) -> dict[str, Any]:
    """Submit topologies ``start .. stop - 1`` from ``clients`` threads, each upload
    then submit as a Storm client does; returns the rate and the errors."""
    code, names, failures = code_zip(), iter(range(start, stop)), list[str]()

    def submitter() -> None:
        conn = Conn("127.0.0.1", daemon.port, 60)
        while (i := next(names, None)) is not None:     # next() on a range is atomic
            try:
                at = conn.call("beginFileUpload", b"\x00")
                conn.call("uploadChunk", conn.encode("uploadChunk", location=at, chunk=code))
                conn.call("finishFileUpload", conn.encode("finishFileUpload", location=at))
                conf = json.dumps({"topology.workers": 1, "bench.index": i})
                conn.call("submitTopology", conn.encode(
                    "submitTopology", name=f"bench-{i:05d}", uploadedJarLocation=at,
                    jsonConf=conf, topology=small_topology()))
            except (CallFailed, OSError) as exc:
                failures.append(str(exc))       # list.append is atomic
                conn.connect()
        conn.close()

    began = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: submitter(), range(clients)))     # raises what they raised
    took, errors = time.monotonic() - began, Counter(failures)
    done = stop - start - len(failures)
    return {"submitted": done, "seconds": round(took, 3), "errors": dict(errors),
            "clients": clients, "submits_per_s": round(done / took, 1) if took else 0.0}


def stored(daemon: Daemon) -> tuple[list[str], list[str]]:
    """Ids and names of the stored topologies (from getClusterInfo)."""
    summary = Conn("127.0.0.1", daemon.port, 120).call("getClusterInfo", b"\x00", close=True)
    tops = sorted(summary.topologies, key=lambda t: t.name)
    return [t.id for t in tops], [t.name for t in tops]


# ---------------------------------------------------------------------------- load
@dataclass
class Plan:
    """What every client thread of one scenario does (plain data, sent to processes)."""
    port: int
    mix: dict[str, int]
    duration: float
    rate: float            # calls/s offered in all; 0 = closed loop
    clients: int
    timeout: float
    decode: bool
    ids: list[str]
    names: list[str]
    seed: int


@dataclass
class Tally:
    """One thread's counts, merged per process, then per scenario."""
    latencies: dict[str, list[float]] = field(default_factory=dict)
    offered: Counter[str] = field(default_factory=Counter)
    unsent: Counter[str] = field(default_factory=Counter)
    timeouts: Counter[str] = field(default_factory=Counter)
    errors: dict[str, Counter[str]] = field(default_factory=dict)

    def merge(self, other: "Tally") -> None:
        for kind, values in other.latencies.items():
            self.latencies.setdefault(kind, []).extend(values)
        self.offered.update(other.offered)
        self.unsent.update(other.unsent)
        self.timeouts.update(other.timeouts)
        for kind, errs in other.errors.items():
            self.errors.setdefault(kind, Counter()).update(errs)


class Client:
    """One connection's calls, with the encoded arguments kept per topology."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.conn = Conn("127.0.0.1", plan.port, plan.timeout, plan.decode)
        self.encoded: dict[tuple[str, str], bytes] = {}

    def args(self, method: str, key: str, **kwargs: Any) -> bytes:
        if (method, key) not in self.encoded:
            self.encoded[(method, key)] = self.conn.encode(method, **kwargs)
        return self.encoded[(method, key)]

    def run(self, kind: str, rng: random.Random) -> None:
        if kind == "getClusterInfo":
            self.conn.call(kind, b"\x00")
        elif kind == "deactivate+activate":
            name = rng.choice(self.plan.names)
            self.conn.call("deactivate", self.args("deactivate", name, name=name))
            self.conn.call("activate", self.args("activate", name, name=name))
        else:
            tid = rng.choice(self.plan.ids)
            self.conn.call(kind, self.args(kind, tid, id=tid))

    def timed(self, kind: str, rng: random.Random, since: float, tally: Tally) -> None:
        """Run one call of ``kind``, its latency counted from ``since``."""
        errors = tally.errors.setdefault(kind, Counter())
        try:
            self.run(kind, rng)
            tally.latencies.setdefault(kind, []).append(time.monotonic() - since)
            return
        except socket.timeout:
            tally.timeouts[kind] += 1
        except CallFailed as exc:
            errors[str(exc)] += 1
            return
        except OSError as exc:
            errors[f"connection: {exc}"[:120]] += 1
        try:    # a connection that failed or timed out may still get the late reply
            self.conn.connect()
        except OSError as exc:
            errors[f"reconnect: {exc}"[:120]] += 1


def run_thread(client: Client, index: int, start_at: float, tally: Tally) -> None:
    plan = client.plan
    rng = random.Random(plan.seed * 100_003 + index)
    kinds, weights = list(plan.mix), list(plan.mix.values())
    end = start_at + plan.duration
    if plan.rate:
        # Open loop: this connection's share of the rate on a fixed schedule (a random
        # phase each), so a slow answer delays the calls due after it and their wait
        # counts: latency is measured from when a call was due.
        interval = plan.clients / plan.rate
        due = start_at + rng.random() * interval
        while due < end:
            kind = rng.choices(kinds, weights)[0]
            tally.offered[kind] += 1
            now = time.monotonic()
            if now >= end:
                tally.unsent[kind] += 1
            else:
                time.sleep(max(0.0, due - now))
                client.timed(kind, rng, due, tally)
            due += interval
    else:
        while time.monotonic() < end:
            kind = rng.choices(kinds, weights)[0]
            tally.offered[kind] += 1
            client.timed(kind, rng, time.monotonic(), tally)
    client.conn.close()


def client_process(plan: Plan, first: int, count: int, pipe: Any) -> None:
    """Open ``count`` connections, say so, wait for the start time, run, send the tally."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops us
    try:
        clients = [Client(plan) for _ in range(count)]
        pipe.send("ready")
        start_at = pipe.recv()
        tallies = [Tally() for _ in clients]
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(run_thread, clients, range(first, first + count),
                          [start_at] * count, tallies))
        for tally in tallies[1:]:
            tallies[0].merge(tally)
        pipe.send(tallies[0])
    except BaseException:
        pipe.send(traceback.format_exc())


def run_scenario(plan: Plan, procs: int) -> tuple[Tally, float]:
    """Run ``plan`` from ``procs`` processes; returns the merged tally and the
    seconds the scenario took (its duration plus the answers still awaited)."""
    ctx = mp.get_context("spawn")      # the parent has threads (log drainers)
    share = [plan.clients // procs + (i < plan.clients % procs) for i in range(procs)]
    workers, pipes, first = [], [], 0
    try:
        for count in share:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=client_process, args=(plan, first, count, theirs),
                               daemon=True)
            proc.start()
            workers.append(proc)
            pipes.append(mine)
            first += count
        for pipe in pipes:
            said = pipe.recv() if pipe.poll(120) else "nothing in 120 s"
            if said != "ready":
                raise RuntimeError(f"a client process did not connect:\n{said}")
        # Every connection is open: all processes start at the same instant, a moment
        # ahead so the last one to read it is not late.
        start_at = time.monotonic() + 0.2
        for pipe in pipes:
            pipe.send(start_at)
        total = Tally()
        for pipe in pipes:
            got = pipe.recv() if pipe.poll(plan.duration + 2 * plan.timeout + 60) else "no tally"
            if isinstance(got, str):
                raise RuntimeError(f"a client process failed:\n{got}")
            total.merge(got)
        return total, time.monotonic() - start_at
    finally:
        for proc in workers:
            if proc.is_alive():
                proc.terminate()
            proc.join(10)


def summarise(tally: Tally, duration: float, took: float) -> dict[str, Any]:
    """Per kind and in all: offered, answered, calls/s answered, p50/p99/max (ms),
    unsent, timeouts, errors."""
    def ms(lat: list[float], q: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3, 2) if lat else None

    def row(kinds: list[str]) -> dict[str, Any]:
        lat = sorted(v for k in kinds for v in tally.latencies.get(k, []))
        errors = sum((tally.errors.get(k, Counter()) for k in kinds), Counter[str]())
        return {"offered": sum(tally.offered[k] for k in kinds), "answered": len(lat),
                "calls_per_s": round(len(lat) / duration, 1), "p50_ms": ms(lat, 0.5),
                "p99_ms": ms(lat, 0.99), "max_ms": ms(lat, 1.0),
                "unsent": sum(tally.unsent[k] for k in kinds),
                "timeouts": sum(tally.timeouts[k] for k in kinds),
                "errors": dict(errors)}
    kinds = sorted(tally.offered, key=lambda k: list(MIX).index(k))
    return {"seconds": round(took, 2), "all": row(kinds),
            "kinds": {k: row([k]) for k in kinds}}


# ---------------------------------------------------------------------------- checkouts
def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def label_of(checkout: Path) -> str:
    """The checkout's short commit, with '+changes' when its tree differs from it."""
    dirty = git("status", "--porcelain", "--untracked-files=no", cwd=checkout)
    return git("rev-parse", "--short", "HEAD", cwd=checkout) + ("+changes" if dirty else "")


def baseline_worktree(ref: str, where: Path, stack: ExitStack) -> Path:
    """``git worktree add`` of ``ref`` under ``where``, its C accelerators built (or
    copied from the cache of an earlier build of the same commit); removed at exit."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = where / f"baseline-{commit[:10]}"
    git("worktree", "add", "--detach", str(tree), commit)
    stack.callback(lambda: subprocess.run(["git", "worktree", "remove", "--force", str(tree)],
                                          cwd=REPO, capture_output=True))
    cache = BUILD_CACHE / commit
    if not cache.is_dir():
        say(f"building the C accelerators of {commit[:10]} in {tree}")
        log = where / "build_ext.log"
        with open(log, "w") as out:
            done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"],
                                  cwd=tree, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit(f"build_ext failed in {tree}:\n{log.read_text()[-3000:]}")
        shutil.copytree(tree / "nimbus_thrift", cache / "nimbus_thrift", ignore=lambda d, names: [
            n for n in names if not n.endswith(".so") and not Path(d, n).is_dir()])
    shutil.copytree(cache, tree, dirs_exist_ok=True)     # only the .so files are there
    if not list((tree / "nimbus_thrift").rglob("*.so")):
        raise SystemExit(f"no C accelerator was built in {tree}: the baseline would run "
                         f"on pure Python")
    return tree


# ---------------------------------------------------------------------------- report
def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _ms(value: float | None) -> str:
    if value is None:    # nothing answered
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def table(n: int, result: dict[str, Any], labels: list[str]) -> str:
    """The text table of one N: the fill, then per scenario and kind of call calls/s
    answered and p50/p99 for each checkout, and current / baseline."""
    sides = [result["sides"][label] for label in labels]
    lines = [f"== {n} topologies " + "=" * 60]
    for label, side in zip(labels, sides):
        f = side["fill"]
        lines.append(f"  {label}: fill {f['submits_per_s']:.1f} submits/s ({f['submitted']} in "
                     f"{f['seconds']:.1f} s, {f['clients']} clients, errors {f['errors'] or 0})"
                     f"; RSS {side['rss_bytes'] / 2**20:.0f} MiB, "
                     f"{side['rss_per_topology_bytes'] / 1024:.1f} KiB per topology")
    two = len(labels) == 2
    lines.append(f"  {'scenario':<8} {'call':<20}" + "".join(f" | {x[:26]:>26}" for x in labels)
                 + (" | current/baseline" if two else ""))
    lines.append(" " * 31 + " | {:>8} {:>8} {:>8}".format("calls/s", "p50", "p99") * len(labels)
                 + (" | calls/s     p99" if two else ""))
    notes = []
    for scenario in result["scenarios"]:
        for kind in ["all", *MIX]:
            got = [s["scenarios"][scenario] for s in sides]
            rows = [r["all"] if kind == "all" else r["kinds"].get(kind) for r in got]
            if any(r is None for r in rows):
                continue
            ratios = (f" | {_ratio(rows[0]['calls_per_s'], rows[1]['calls_per_s']):>7}"
                      f" {_ratio(rows[0]['p99_ms'], rows[1]['p99_ms']):>7}") if two else ""
            lines.append(f"  {scenario if kind == 'all' else '':<8} {kind:<20}" + "".join(
                f" | {r['calls_per_s']:>8.0f} {_ms(r['p50_ms']):>8} {_ms(r['p99_ms']):>8}"
                for r in rows) + ratios)
            for label, r in zip(labels, rows):
                errors = sum(r["errors"].values())
                if kind == "all" and (scenario == "open" or r["unsent"] + r["timeouts"] + errors):
                    notes.append(f"  {scenario}, {label}: offered {r['offered']}, answered "
                                 f"{r['answered']}, unsent {r['unsent']}, timeouts "
                                 f"{r['timeouts']}, errors {errors}")
                notes += [f"    {scenario} {kind} {label}: {count} x {what}"
                          for what, count in r["errors"].items() if kind != "all"]
    return "\n".join(lines + notes)


# ---------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = parser.add_argument
    add("--topologies", default="50,500,1000,5000",
        help="stored topologies, comma-separated (filled in ascending order)")
    add("--duration", type=float, default=20.0, help="seconds per scenario")
    add("--rate", type=float, default=1000.0, help="calls/s offered in all (open loop)")
    add("--clients", type=int, default=100, help="concurrent connections")
    add("--client-procs", type=int, default=4, help="processes the clients run in")
    add("--scenarios", default=",".join(SCENARIOS), help="some of " + ",".join(SCENARIOS))
    add("--timeout", type=float, default=30.0, help="seconds before a call times out")
    add("--fill-clients", type=int, default=4, help="connections submitting at once")
    add("--no-decode", dest="decode", action="store_false",
        help="check only which field a reply holds (decode only errors)")
    add("--checkout", type=Path, default=REPO, help="the checkout measured as 'current'")
    add("--baseline", metavar="REF", help="also measure a daemon from this commit")
    add("--daemon-arg", action="append", default=[],
        help="a flag for both daemons, e.g. --daemon-arg=--workers=16 (repeatable)")
    add("--log-level", default="warning", help="the daemons' log level")
    add("--keep-data", action="store_true", help="keep the data directories and logs")
    add("--json", action="store_true", help="results as JSON on stdout (progress on stderr)")
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(x) for x in args.topologies.split(",") if x.strip()})
    except ValueError:
        parser.error(f"--topologies must be numbers, comma-separated: {args.topologies!r}")
    args.scenario_list = [s for s in args.scenarios.split(",") if s]
    if not args.sizes or args.sizes[0] < 1:
        parser.error("--topologies needs at least one number of 1 or more")
    if unknown := set(args.scenario_list) - set(SCENARIOS):
        parser.error(f"unknown scenarios {sorted(unknown)}: choose from {SCENARIOS}")
    if not 1 <= args.client_procs <= args.clients:
        parser.error("--client-procs must be 1 or more, and at most --clients")
    return args


def measure(args: argparse.Namespace, stack: ExitStack) -> dict[str, Any]:
    if args.keep_data:
        work = Path(tempfile.mkdtemp(prefix="control-plane-"))
        say(f"data directories and logs in {work}")
    else:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="control-plane-")))
    checkouts = {f"current {label_of(args.checkout)}": args.checkout}
    if args.baseline:
        checkouts[f"baseline {args.baseline}"] = baseline_worktree(args.baseline, work, stack)
    labels, daemons = list(checkouts), {}
    for i, (label, checkout) in enumerate(checkouts.items()):
        daemons[label] = daemon = Daemon(label, checkout, work / f"data{i}",
                                         max(args.sizes) + 10, args.log_level, args.daemon_arg)
        stack.callback(daemon.stop)
        say(f"{label}: daemon pid {daemon.proc.pid} on port {daemon.port}")
    rss0 = {label: rss_bytes(d.proc.pid) for label, d in daemons.items()}
    out: dict[str, Any] = {"labels": labels, "rss0_bytes": rss0, "by_topologies": {}, **{
        k: getattr(args, k) for k in ("duration", "rate", "clients", "client_procs", "decode")}}
    filled = 0
    for n in args.sizes:
        result: dict[str, Any] = {"scenarios": args.scenario_list,
                                  "sides": {label: {"scenarios": {}} for label in labels}}
        stored_of = {}
        for label, daemon in daemons.items():
            say(f"{label}: filling {filled} -> {n} topologies")
            side = result["sides"][label]
            side["fill"] = f = fill(daemon, filled, n, args.fill_clients)
            side["rss_bytes"] = rss_bytes(daemon.proc.pid)
            side["rss_per_topology_bytes"] = round((side["rss_bytes"] - rss0[label]) / n)
            stored_of[label] = stored(daemon)
            if len(stored_of[label][0]) != n:
                say(f"{label}: {len(stored_of[label][0])} topologies stored, not {n}; "
                    f"submit errors: {f['errors']}")
            if not stored_of[label][0]:
                raise SystemExit(f"{label}: no topology stored, nothing to measure")
        filled = n
        for scenario in args.scenario_list:
            # Alternate the sides scenario by scenario, so a change in the machine's
            # load falls on both.
            for label, daemon in daemons.items():
                ids, names = stored_of[label]
                say(f"{label}: {n} topologies, {scenario} for {args.duration:g} s")
                plan = Plan(port=daemon.port, mix=READS if scenario == "reads" else MIX,
                            duration=args.duration, rate=args.rate * (scenario == "open"),
                            clients=args.clients, timeout=args.timeout, decode=args.decode,
                            ids=ids, names=names, seed=n)
                tally, took = run_scenario(plan, args.client_procs)
                if daemon.proc.poll() is not None:
                    raise SystemExit(f"{label}: the daemon exited ({daemon.proc.returncode}):"
                                     f"\n{daemon.log_path.read_text()[-3000:]}")
                result["sides"][label]["scenarios"][scenario] = summarise(
                    tally, args.duration, took)
        out["by_topologies"][str(n)] = result
        if not args.json:
            print(table(n, result, labels), flush=True)
    return out


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C (daemons stopped, worktree removed), and so does
    # SIGINT even where a shell started us with it ignored (in the background).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupt)
    try:
        with ExitStack() as stack:
            try:
                out = measure(args, stack)
            finally:    # a second Ctrl-C must not cut the cleanup short
                for signum in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, signal.SIG_IGN)
    except KeyboardInterrupt:
        say("interrupted: daemons stopped, worktree removed")
        return 130
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
