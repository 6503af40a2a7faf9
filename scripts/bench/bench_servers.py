"""Benchmark nimbus-thrift against other Thrift servers on the same echo service.

Every server serves ``Echo.echo(s)`` of idl/demo.thrift over framed transport and the
binary protocol (ours and thriftpy2's threaded server also in other client forms, see
below), in a process of its own, on 127.0.0.1. The C load generator
(scripts/bench/loadgen.c) drives each one with the same closed loop: N connections,
each sending one call and waiting for its reply before the next.

    core 0                          core 1
    +--------------------------+    +--------------------------------------+
    | server under test        |    | loadgen (1 thread, epoll, N conns)   |
    | (all of its threads)     |<-->| this script (idle while loadgen runs)|
    +--------------------------+    | strace, with --strace                |
                                    +--------------------------------------+

Scenarios (payload = the string echoed):

    c1, c16, c256   1, 16, 256 connections, 16-byte payload: calls/s, p50/p99 latency
    1mib            4 connections, 1 MiB payload: MB/s (payload bytes x calls / s)
    cpu64           64 connections, each echo spending ~200 us of Python CPU (issue 18):
                    ours in one process and with processes=2, gunicorn-thrift with 2
                    workers (sync and gevent); servers on both cores, measured in
                    rotating rounds (CPU_ROUNDS), ratios against issue 18's targets

TLS scenarios (not in the default set: --tls adds them, or name them in --scenarios),
run for the servers that serve TLS here (nimbus, thriftpy2-threaded, cpp-nonblocking,
nimbus-baseline), each in a second process of that server started with mutual TLS
(peer_servers.py --tls-dir; the C++ server's certificate argument; certificates from
tls_certs.py):

    tls16, tls256   16, 256 TLS connections, all handshaken before the clock starts:
                    calls/s, p50/p99 on established connections
    handshakes      16 connections, each repeating connect + full handshake (no session
                    resumption) + one call + close: handshakes/s, p50/p99 of a cycle

The report gives the TLS figures their own table and checks issue 14's targets: ours
>= 1.5x thriftpy2-threaded at tls256, and ours at tls256 >= 0.5x ours at c256 (which
must then run in the same sitting).

Other client forms (issue 17; not in the default set: --forms adds them, or name them
in --scenarios), 16-byte payload, run for nimbus (and nimbus-baseline) and
thriftpy2-threaded only:

    compact16       16 connections, framed transport, compact protocol
    unframed16      16 connections, unframed (buffered) transport, binary protocol
    unframed256     256 connections, unframed, binary

Ours takes no option: it detects each connection's form, so these run in the same
process as its framed binary scenarios. thriftpy2's threaded server is started once
per form with the matching factories (peer_servers.py --transport/--protocol), so
each comparison is on the same transport and protocol; loadgen sends the same call in
that form (--protocol compact, --transport unframed) and checks every reply byte. The
report gives these their own table and ours/thriftpy2 per form, beside c16's framed
binary.

Each scenario runs for --warmup + --duration seconds; only calls completing in the
last --duration seconds count. After its scenarios, a server's peak RSS (VmHWM) is
read from /proc and the server is stopped (SIGTERM, then SIGKILL).

Servers that cannot run here (no JDK, no Thrift compiler, our package not importable
yet) are reported as unavailable with the reason, and the others still run.

Usage:
    scripts/bench.sh [options]                # sets everything up first
    .venv/bin/python scripts/bench/bench_servers.py [--duration S] [--warmup S]
        [--servers a,b] [--scenarios c1,c16] [--tls] [--forms] [--json] [--strace]
        [--baseline DIR]

``--baseline DIR`` also runs our server from another checkout (say, main before a
change: ``git worktree add DIR main`` and build its C modules in place with
``.venv/bin/python setup.py build_ext --inplace`` run in DIR) as ``nimbus-baseline``,
in the same run, and prints this checkout's figures as ratios of that one's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
import importlib.util

import tls_certs  # scripts/bench/, this script's directory, is first on sys.path


def _allocator_env() -> dict[str, str]:
    """The daemon's allocator settings, read from nimbus_thrift/tuning.py by path: the
    harness does not import our package, so it still runs the peers when ours is broken."""
    path = Path(__file__).resolve().parents[2] / "nimbus_thrift" / "tuning.py"
    spec = importlib.util.spec_from_file_location("_nimbus_tuning", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.ALLOCATOR_ENV)


ALLOCATOR_ENV = _allocator_env()

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench"
BUILD = BENCH / "build"
DEMO_IDL = REPO / "idl" / "demo.thrift"
LOADGEN_SRC = BENCH / "loadgen.c"
LOADGEN = BUILD / "loadgen"
HOST = "127.0.0.1"

SERVER_CORE = 0
LOADGEN_CORE = 1

#: Storm's nimbus.thrift.threads default; every server with a worker pool gets it.
WORKER_THREADS = 64
#: Storm's nimbus.childopts default heap; the Java server runs with it.
JAVA_HEAP = "-Xmx1024m"
#: Share of a core used by other processes during a run above which the report warns.
OTHER_CPU_WARN = 0.10
#: Load generator CPU share above which it may be the bottleneck and the report says so.
LOADGEN_CPU_WARN = 0.85
#: Seconds loadgen may spend connecting before the report mentions it.
SLOW_SETUP = 0.5
#: Seconds a server may take from exec to accepting connections (a cold JVM takes ~1).
STARTUP_TIMEOUT = 60.0
#: Seconds between SIGTERM and SIGKILL when stopping a server.
STOP_GRACE = 5.0
#: Seconds beyond warm-up + duration after which a hung loadgen is killed.
LOADGEN_SLACK = 30.0
#: Seconds loadgen allows its TLS connects and handshakes before the clock starts
#: (TLS_SETUP_LIMIT_S in loadgen.c); added to its deadline in the TLS scenarios.
TLS_SETUP_LIMIT = 60.0

PYTHON_PEERS = ("thriftpy2-threaded", "thriftpy2-aio", "apache-nonblocking")
#: Our server from the checkout given with --baseline (not a peer: compared on its own).
BASELINE = "nimbus-baseline"
CPP = "cpp-nonblocking"
#: The ceiling: a single-threaded C epoll server answering echo calls without decoding
#: them (c_echo.c); shown beside the others, never counted as a peer.
CEILING = "c-echo"
#: The multi-core scenario's own servers (issue 18; they run nothing else): ours with
#: make_server(processes=CPU_PROCESSES), and gunicorn-thrift with as many workers (its
#: pre-fork master, thriftpy2's Cython framed binary in each worker).
NIMBUS_PROCS = "nimbus-2proc"
GUNICORN = "gunicorn-thrift"
#: gunicorn-thrift with its gevent worker, which serves every connection (the sync
#: worker serves one per process at a time, and the other clients wait).
GUNICORN_GEVENT = "gunicorn-thrift-gevent"
SERVERS = ("nimbus", *PYTHON_PEERS, "java-hsha", CPP, CEILING, NIMBUS_PROCS, GUNICORN,
           GUNICORN_GEVENT)
#: The servers with a TLS mode here (peer_servers.py --tls-dir; the C++ server's
#: certificate argument), and why the others have none.
TLS_SERVERS = ("nimbus", "thriftpy2-threaded", CPP, BASELINE)
NO_TLS = {
    "thriftpy2-aio": "its TLS server is not measured here",
    "apache-nonblocking": "Apache's Python TNonblockingServer has no TLS",
    "java-hsha": "Java's THsHaServer has no TLS",
    CEILING: "the C ceiling serves plain framed binary only",
}
#: The peer ours is compared with over TLS, and issue 14's targets (the C++ server's
#: ratios are printed too, with no target).
TLS_PEER = "thriftpy2-threaded"
TLS_TARGET_VS_PEER = 1.5
TLS_TARGET_VS_PLAIN = 0.5
TLS_TARGET_SCENARIO, PLAIN_OF_TLS_TARGET = "tls256", "c256"
#: The servers run in the other client forms, and why the others are not: ours (and
#: the baseline) detect the form per connection; thriftpy2-threaded is started in it.
FORM_SERVERS = ("nimbus", "thriftpy2-threaded", BASELINE)
DETECTS_FORM = ("nimbus", BASELINE)
FORM_PEER = "thriftpy2-threaded"
NO_FORMS = {name: "issue 17 compares ours with thriftpy2-threaded only"
            for name in ("thriftpy2-aio", "apache-nonblocking", "java-hsha", "cpp-nonblocking",
                         CEILING)}
#: The servers the idle-connections scenario runs on: ours and the C ceiling. A
#: thread-per-connection peer would start 10,000 threads, and the others are not
#: asked for it; the baseline checkout may predate the bench server's connection limits.
IDLE_SERVERS = ("nimbus", CEILING)
#: The multi-core scenario runs on these: ours in one process ("nimbus", the same
#: server as every other scenario's, started again with the CPU-bound handler), ours in
#: CPU_PROCESSES, and gunicorn-thrift with CPU_PROCESSES workers. The server is not
#: pinned there (it may use both cores; loadgen stays on LOADGEN_CORE).
CPU_SERVERS = ("nimbus", NIMBUS_PROCS, GUNICORN, GUNICORN_GEVENT)
CPU_ONLY = (NIMBUS_PROCS, GUNICORN, GUNICORN_GEVENT)
CPU_PROCESSES = 2
#: Iterations of peer_servers.burn() per echo: ~200 us of Python CPU on the bench
#: machine (time.process_time over 500 calls: 6000 iterations, 200 us).
CPU_WORK = 6000
#: Issue 18's targets: CPU_PROCESSES processes against one, and against gunicorn-thrift.
CPU_TARGET_VS_ONE = 1.7
CPU_TARGET_VS_GUNICORN = 1.3
#: The CPU scenario runs in rounds: every CPU server is started once (with the
#: CPU-bound handler, in a process of its own, idle while the others are measured),
#: then each round measures each of them in turn, the order rotating, and a server's
#: figure is its median round. Other processes' load on a shared machine changes from
#: one second to the next; rounds give every server the same mix of it.
CPU_ROUNDS = 3
#: The framed binary scenario each form's figures are shown beside.
FORM_REFERENCE = {16: "c16", 256: "c256"}
JAVA_JAR_CANDIDATES = (
    Path("/usr/share/java/libthrift.jar"),
    Path("/usr/share/java/thrift.jar"),
    Path("/usr/share/maven-repo/org/apache/thrift/libthrift/debian/libthrift-debian.jar"),
)


#: The form every server serves: framed transport, binary protocol.
DEFAULT_FORM = ("framed", "binary")


@dataclass(frozen=True)
class Scenario:
    name: str
    connections: int
    payload: int
    label: str
    #: True: the table shows MB/s; False: calls/s and latency.
    bulk: bool = False
    #: Mutual TLS on every connection (the server runs with --tls-dir).
    tls: bool = False
    #: Each connection cycles connect + full handshake + one call + close (TLS only).
    handshakes: bool = False
    #: The rate's column heading (a handshake cycle is also one call).
    unit: str = "calls/s"
    #: Connections opened before the clock and left idle all through (the busy ones
    #: are ``connections``): what holding many quiet clients costs the busy ones.
    idle: int = 0
    #: The client form loadgen sends (loadgen --transport, --protocol).
    transport: str = "framed"
    protocol: str = "binary"
    #: Iterations of peer_servers.burn() each echo does (the server runs with
    #: --cpu-work, in a process of its own, on CPU_SERVERS only); 0: none.
    cpu_work: int = 0

    @property
    def form(self) -> tuple[str, str]:
        return (self.transport, self.protocol)

    @property
    def other_form(self) -> bool:
        """Not framed binary, the form every server serves."""
        return self.form != DEFAULT_FORM


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("c1", 1, 16, "1 conn"),
        Scenario("c16", 16, 16, "16 conns"),
        Scenario("c256", 256, 16, "256 conns"),
        Scenario("1mib", 4, 1 << 20, "4 conns x 1 MiB", bulk=True),
        Scenario("idle10k", 16, 16, "16 conns + 10k idle", idle=10_000),
        Scenario("cpu64", 64, 16, "64 conns, ~200us CPU/call", cpu_work=CPU_WORK),
        Scenario("tls16", 16, 16, "TLS 16 conns", tls=True),
        Scenario("tls256", 256, 16, "TLS 256 conns", tls=True),
        Scenario("handshakes", 16, 16, "TLS handshakes", tls=True,
                 handshakes=True, unit="hs/s"),
        Scenario("compact16", 16, 16, "compact 16 conns", protocol="compact"),
        Scenario("unframed16", 16, 16, "unframed 16 conns", transport="unframed"),
        Scenario("unframed256", 256, 16, "unframed 256 conns", transport="unframed"),
    )
}
#: Run unless --scenarios says otherwise; --tls and --forms add TLS_SCENARIOS and
#: FORM_SCENARIOS to them.
DEFAULT_SCENARIOS = [n for n, sc in SCENARIOS.items() if not sc.tls and not sc.other_form]
TLS_SCENARIOS = [n for n, sc in SCENARIOS.items() if sc.tls]
FORM_SCENARIOS = [n for n, sc in SCENARIOS.items() if sc.other_form]
#: The scenario the --strace run repeats, and the one the Java p99 comparison uses.
STRACE_SCENARIO = "c16"
JAVA_P99_SCENARIO = "c256"


class Unavailable(Exception):
    """A server cannot run on this machine; the message says why, as a phrase."""


@dataclass
class ServerResult:
    name: str
    status: str = "ok"  # ok | unavailable | failed
    reason: str = ""
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    rss_peak_kib: int | None = None
    strace: dict[str, Any] | None = None
    #: The TLS scenarios run in a process of their own: "" (not run), ok, unavailable
    #: or failed; status and reason above are those of the plaintext ones.
    tls_status: str = ""
    tls_reason: str = ""
    tls_rss_peak_kib: int | None = None
    #: The other forms' processes (thriftpy2-threaded: one per form), by form label
    #: ("framed compact"): (status, reason); and the largest peak RSS among them (ours:
    #: that of its one process, which serves every form).
    forms_status: dict[str, tuple[str, str]] = field(default_factory=dict)
    forms_rss_peak_kib: int | None = None
    #: The multi-core scenario's process (started with the CPU-bound handler): "" (not
    #: run), ok, unavailable or failed; its peak RSS is that of the parent only.
    cpu_status: str = ""
    cpu_reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "rss_peak_kib": self.rss_peak_kib,
            "tls_status": self.tls_status or None,
            "tls_reason": self.tls_reason,
            "tls_rss_peak_kib": self.tls_rss_peak_kib,
            "forms_status": {k: {"status": st, "reason": why}
                             for k, (st, why) in self.forms_status.items()},
            "forms_rss_peak_kib": self.forms_rss_peak_kib,
            "cpu_status": self.cpu_status or None,
            "cpu_reason": self.cpu_reason,
            "scenarios": self.scenarios,
            "strace": self.strace,
        }


@dataclass(frozen=True)
class TLSSetup:
    """What the TLS scenarios need, found once per run: the certificates' directory,
    or why the TLS scenarios cannot run on this machine."""

    certs: Path | None = None
    unavailable: str = ""
    openssl: str | None = None


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- building


def newer_than(target: Path, *sources: Path) -> bool:
    """True if target exists and is newer than every source."""
    if not target.exists():
        return False
    t = target.stat().st_mtime
    return all(t >= s.stat().st_mtime for s in sources if s.exists())


def check_loadgen() -> None:
    if not newer_than(LOADGEN, LOADGEN_SRC):
        raise SystemExit(
            f"bench: {LOADGEN.relative_to(REPO)} is missing or older than its source; "
            "run scripts/bench.sh, or: gcc -O2 -Wall -Wextra -DLOADGEN_TLS -o "
            f"{LOADGEN.relative_to(REPO)} {LOADGEN_SRC.relative_to(REPO)} -lssl -lcrypto "
            "(without -DLOADGEN_TLS and the libraries if OpenSSL's headers are missing)"
        )


def loadgen_features() -> dict[str, Any]:
    """What the built loadgen can do (``loadgen --features``); a loadgen from before
    that flag cannot do TLS."""
    proc = subprocess.run([str(LOADGEN), "--features"], capture_output=True, text=True)
    try:
        features: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"tls": False, "openssl": None}
    return features


def tls_setup() -> TLSSetup:
    features = loadgen_features()
    if not features.get("tls"):
        return TLSSetup(unavailable="the load generator was built without TLS (no OpenSSL "
                                    "headers: apt-get install libssl-dev, then rerun "
                                    "scripts/bench.sh)")
    try:
        certs = tls_certs.ensure_certs()
    except tls_certs.CertError as exc:
        return TLSSetup(unavailable=str(exc))
    return TLSSetup(certs=certs, openssl=features.get("openssl"))


def thrift_compiler() -> str:
    path = shutil.which("thrift")
    if path is None:
        raise Unavailable("the Thrift compiler `thrift` is not installed (apt-get install thrift-compiler)")
    return path


def build_apache_py() -> Path:
    """Generate Apache Thrift's Python code for demo.thrift; return the gen-py directory."""
    out = BUILD / "gen-py"
    stamp = out / "nimbus_demo" / "Echo.py"
    if not newer_than(stamp, DEMO_IDL):
        compiler = thrift_compiler()
        out.mkdir(parents=True, exist_ok=True)
        run_build([compiler, "--gen", "py", "-out", str(out), str(DEMO_IDL)])
    return out


def java_classpath_jars() -> list[Path]:
    thrift_jar = next((p for p in JAVA_JAR_CANDIDATES if p.exists()), None)
    if thrift_jar is None:
        raise Unavailable("libthrift-java is not installed (no /usr/share/java/libthrift.jar or thrift.jar)")
    slf4j = Path("/usr/share/java/slf4j-api.jar")
    if not slf4j.exists():
        raise Unavailable("slf4j-api.jar, which libthrift needs, is not in /usr/share/java")
    jars = [thrift_jar, slf4j]
    # libthrift logs through slf4j; without a binding it prints a warning at start.
    nop = Path("/usr/share/java/slf4j-nop.jar")
    if nop.exists():
        jars.append(nop)
    return jars


def build_java() -> list[str]:
    """Generate and compile the Java echo server; return the command that runs it
    (without the port)."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise Unavailable(f"`{tool}` is not installed (apt-get install default-jdk-headless)")
    jars = java_classpath_jars()
    src = BENCH / "java" / "EchoHsHa.java"
    gen = BUILD / "gen-java"
    classes = BUILD / "java-classes"
    main_class = classes / "EchoHsHa.class"
    if not newer_than(main_class, src, DEMO_IDL, *jars):
        compiler = thrift_compiler()
        shutil.rmtree(gen, ignore_errors=True)
        shutil.rmtree(classes, ignore_errors=True)
        gen.mkdir(parents=True)
        classes.mkdir(parents=True)
        # JDK 11+ has no javax.annotation.Generated; the generator would emit it.
        run_build([compiler, "--gen", "java:generated_annotations=suppress", "-out", str(gen), str(DEMO_IDL)])
        sources = [str(p) for p in sorted(gen.rglob("*.java"))] + [str(src)]
        cp = ":".join(str(j) for j in jars)
        run_build(["javac", "-nowarn", "-d", str(classes), "-cp", cp, *sources])
    cp = ":".join([str(classes), *(str(j) for j in jars)])
    return ["java", JAVA_HEAP, "-cp", cp, "EchoHsHa"]


#: Headers the C++ server needs, and the Debian package that has each.
CPP_HEADERS = {
    Path("/usr/include/thrift/server/TNonblockingServer.h"): "libthrift-dev",
    Path("/usr/include/thrift/transport/TNonblockingSSLServerSocket.h"): "libthrift-dev",
    Path("/usr/include/boost/numeric/conversion/cast.hpp"): "libboost-dev",
    Path("/usr/include/event2/event.h"): "libevent-dev",
    Path("/usr/include/openssl/ssl.h"): "libssl-dev",
}


def build_cpp() -> list[str]:
    """Generate and compile the C++ echo server; return the command that runs it
    (without its arguments)."""
    if shutil.which("g++") is None:
        raise Unavailable("`g++` is not installed (apt-get install g++)")
    for header, package in CPP_HEADERS.items():
        if not header.exists():
            raise Unavailable(f"{header} is missing (apt-get install {package})")
    src = BENCH / "cpp" / "EchoNonblocking.cpp"
    gen = BUILD / "gen-cpp"
    exe = BUILD / "cpp-echo-nonblocking"
    if not newer_than(exe, src, DEMO_IDL):
        compiler = thrift_compiler()
        shutil.rmtree(gen, ignore_errors=True)
        gen.mkdir(parents=True)
        run_build([compiler, "--gen", "cpp", "-out", str(gen), str(DEMO_IDL)])
        run_build(["g++", "-O2", "-std=c++17", f"-I{gen}", "-o", str(exe), str(src),
                   str(gen / "Echo.cpp"), str(gen / "demo_types.cpp"),
                   "-lthriftnb", "-lthrift", "-levent", "-lssl", "-lcrypto", "-lpthread"])
    return [str(exe)]


def build_ceiling() -> list[str]:
    """Compile the C epoll echo server (c_echo.c); return its command."""
    if shutil.which("gcc") is None:
        raise Unavailable("`gcc` is not installed (apt-get install gcc)")
    src, exe = BENCH / "c_echo.c", BUILD / "c-echo"
    if not newer_than(exe, src):
        BUILD.mkdir(parents=True, exist_ok=True)
        run_build(["gcc", "-O2", "-Wall", "-o", str(exe), str(src)])
    return [str(exe)]


def run_build(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise Unavailable(f"`{Path(cmd[0]).name}` failed: " + " | ".join(tail))


def server_command(name: str, port: int, baseline: Path | None = None,
                   tls_dir: Path | None = None, form: tuple[str, str] = DEFAULT_FORM,
                   cpu_work: int = 0) -> list[str]:
    """The argv that runs server `name` on `port` (with mutual TLS when `tls_dir` is
    given; serving the client `form` (transport, protocol) when it is not framed
    binary: only FORM_PEER is told; with a CPU-bound echo given `cpu_work`, on
    CPU_SERVERS); builds what it needs first."""
    py = [sys.executable, str(BENCH / "peer_servers.py")]
    if name in CPU_SERVERS and cpu_work:
        work = ["--cpu-work", str(cpu_work)]
        if name in (GUNICORN, GUNICORN_GEVENT):
            kind = ["--worker-class", "gevent"] if name == GUNICORN_GEVENT else []
            return [*py, GUNICORN, "--port", str(port), "--workers", str(CPU_PROCESSES),
                    *kind, *work]
        procs = ["--processes", str(CPU_PROCESSES)] if name == NIMBUS_PROCS else []
        return [*py, "nimbus", "--port", str(port), "--workers", str(WORKER_THREADS),
                *procs, *work]
    tls = [] if tls_dir is None else ["--tls-dir", str(tls_dir)]
    if form != DEFAULT_FORM:
        assert name == FORM_PEER, name
        tls += ["--transport", form[0], "--protocol", form[1]]
    if name == BASELINE:
        # That checkout's own launcher, which puts that checkout first on sys.path.
        assert baseline is not None
        launcher = baseline / "scripts" / "bench" / "peer_servers.py"
        if tls and "--tls-dir" not in launcher.read_text(errors="replace"):
            raise Unavailable("that checkout's bench launcher has no TLS mode (--tls-dir)")
        return [sys.executable, str(launcher),
                "nimbus", "--port", str(port), "--workers", str(WORKER_THREADS), *tls]
    if name == "java-hsha":
        return [*build_java(), str(port), str(WORKER_THREADS)]
    if name == CPP:
        return [*build_cpp(), str(port), str(WORKER_THREADS), *tls[1:]]
    if name == CEILING:
        return [*build_ceiling(), str(port)]
    if name == "apache-nonblocking":
        gen = build_apache_py()
        return [*py, name, "--port", str(port), "--workers", str(WORKER_THREADS), "--gen-py", str(gen)]
    return [*py, name, "--port", str(port), "--workers", str(WORKER_THREADS), *tls]


# --------------------------------------------------------------------------- processes


def pin_to(core: int | None) -> Callable[[], None] | None:
    """A preexec_fn that pins the child (and every thread it starts) to one core."""
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen[bytes], port: int, err_path: Path) -> None:
    """Return once `port` accepts a connection; raise Unavailable if the server exits
    first or does not listen within STARTUP_TIMEOUT."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise Unavailable(f"exited with {proc.returncode} before listening: {last_lines(err_path)}")
        try:
            with socket.create_connection((HOST, port), timeout=1.0):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise Unavailable(f"not listening on port {port} after {STARTUP_TIMEOUT:.0f} s")
        # Polling interval while the server starts, not a guess at when it is ready.
        time.sleep(0.02)


def last_lines(path: Path, n: int = 2) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return " | ".join(lines[-n:]) or "(no output)"


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE; only ever our own child, by its PID."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        log(f"pid {proc.pid} ignored SIGTERM for {STOP_GRACE:.0f} s; sending SIGKILL")
        proc.kill()
        proc.wait()


def vm_hwm_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def vm_rss_kib(pid: int) -> int | None:
    """The process's resident set now (VmRSS, KiB), or None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of all threads of `pid` so far, and of its live child
    processes (a pre-forking server's workers; none for the others)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    children = 0.0
    for kids in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            pids = kids.read_text().split()
        except OSError:
            continue
        children += sum(cpu_seconds(int(kid)) or 0.0 for kid in pids)
    # Fields after the parenthesised command name; utime and stime are fields 14, 15.
    fields = stat.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK") + children


def system_busy_seconds() -> float:
    """CPU time all cores spent in user, nice and system mode since boot. Interrupt
    and softirq time is left out: loopback TCP is mostly softirq work, which the kernel
    does not charge to the processes whose traffic it is."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system = (int(x) for x in fields[1:4])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class RunConfig:
    duration: float
    warmup: float
    pin: bool
    #: Give every server the allocator settings nimbus-thrift's demo server uses (the
    #: "reuse" profile, see nimbus_thrift/tuning.py), so a 1 MiB comparison measures the
    #: servers, not glibc's defaults. --untuned-malloc runs everyone with the defaults instead.
    tuned_malloc: bool = True
    #: Another checkout whose server runs as BASELINE (--baseline), or None.
    baseline: Path | None = None
    #: The TLS scenarios' certificates (tls_certs.py), when they run.
    tls_certs: Path | None = None


def server_env(cfg: RunConfig) -> dict[str, str]:
    """The environment of a server process: ours, plus the allocator settings for all
    servers alike (Java's heap is its own; glibc's settings only touch its native side)."""
    env = dict(os.environ)
    if cfg.tuned_malloc:
        env.update(ALLOCATOR_ENV)
    else:
        for key in ALLOCATOR_ENV:
            env.pop(key, None)
    return env


def run_loadgen(
    port: int, scenario: Scenario, cfg: RunConfig, server_pid: int | None = None
) -> dict[str, Any]:
    """Run one loadgen; return its JSON result. With `server_pid`, also add
    ``server_cpu_util``: the server's CPU time over the measured window divided by the
    window (1.0 = its core was saturated), sampled when loadgen says the window opens
    and closes (its stderr lines "loadgen: measuring" / "loadgen: done")."""
    cmd = [
        str(LOADGEN),
        "--host", HOST,
        "--port", str(port),
        "--connections", str(scenario.connections),
        "--payload", str(scenario.payload),
        "--duration", str(cfg.duration),
        "--warmup", str(cfg.warmup),
    ]
    if scenario.tls:
        assert cfg.tls_certs is not None
        certs = cfg.tls_certs
        cmd += ["--tls-ca", str(certs / "ca.pem"),
                "--tls-cert", str(certs / "client.pem"), "--tls-key", str(certs / "client.key")]
        if scenario.handshakes:
            cmd.append("--handshakes")
    if scenario.other_form:
        cmd += ["--transport", scenario.transport, "--protocol", scenario.protocol]
    deadline = (time.monotonic() + cfg.warmup + cfg.duration + LOADGEN_SLACK
                + (TLS_SETUP_LIMIT if scenario.tls else 0.0))
    idle = open_idle(port, scenario.idle)
    try:
        return _run_loadgen(cmd, deadline, cfg, server_pid, idle_count=len(idle))
    finally:
        for sock in idle:
            sock.close()


def open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to the server, left idle (from this script, on the load
    generator's core). Each is checked open after the others connected: a server that
    refused some would make the figure meaningless."""
    if not count:
        return []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        if hard < count + 256:
            raise Unavailable(f"{count:,} idle connections need RLIMIT_NOFILE {count + 256:,}; "
                              f"the hard limit is {hard:,}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            socks.append(socket.create_connection((HOST, port), timeout=10))
        for sock in socks:
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    raise Unavailable("the server closed idle connections")
            except BlockingIOError:
                pass
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _run_loadgen(cmd: list[str], deadline: float, cfg: RunConfig, server_pid: int | None,
                 idle_count: int = 0) -> dict[str, Any]:
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=pin_to(LOADGEN_CORE if cfg.pin else None),
    )
    marks: dict[str, tuple[float, float | None, float]] = {}
    diagnostics: list[str] = []
    rss_kib: int | None = None
    try:
        assert proc.stderr is not None and proc.stdout is not None
        # stdout is one short line, written after "done": reading stderr to its end
        # first cannot deadlock on a full stdout pipe.
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"loadgen did not finish within {LOADGEN_SLACK:.0f} s of its run time")
            line = proc.stderr.readline()
            if not line:
                break
            mark = line.strip().removeprefix("loadgen: ")
            if mark == "done" and server_pid:
                rss_kib = vm_rss_kib(server_pid)
            if mark in ("measuring", "done"):
                marks[mark] = (
                    time.monotonic(),
                    cpu_seconds(server_pid) if server_pid else None,
                    system_busy_seconds(),
                )
            else:
                diagnostics.append(line.rstrip())
        out = proc.stdout.read()
        proc.wait(timeout=LOADGEN_SLACK)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"loadgen exited with {proc.returncode}: {' | '.join(diagnostics)[-300:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if rss_kib is not None:
        result["server_rss_kib"] = rss_kib
    if idle_count:
        result["idle_connections"] = idle_count
    if "measuring" in marks and "done" in marks:
        (t0, c0, b0), (t1, c1, b1) = marks["measuring"], marks["done"]
        if c0 is not None and c1 is not None and t1 > t0:
            server = (c1 - c0) / (t1 - t0)
            result["server_cpu_util"] = round(server, 3)
            # Whatever else kept the cores busy meanwhile (other processes, this
            # script): more than a few percent means the numbers are disturbed.
            other = (b1 - b0) / (t1 - t0) - server - result["cpu_util"]
            result["other_cpu_util"] = round(max(0.0, other), 3)
    return result


STRACE_TOTAL = re.compile(r"^\s*100\.00\s+\S+\s+(?:\S+\s+)?(\d+)\s+(?:\d+\s+)?total\s*$")


def strace_run(pid: int, port: int, cfg: RunConfig, logs: Path) -> dict[str, Any]:
    """Run the STRACE_SCENARIO again with `strace -c -f` attached to the server and
    return syscalls per call. strace slows the server a lot; these calls/s are not
    comparable with the table's."""
    strace = shutil.which("strace")
    if strace is None:
        raise Unavailable("strace is not installed")
    out = logs / f"strace-{pid}.txt"
    err = logs / f"strace-{pid}.err"
    with open(err, "wb") as err_f:
        proc = subprocess.Popen(
            [strace, "-c", "-f", "-o", str(out), "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=err_f,
            preexec_fn=pin_to(LOADGEN_CORE if cfg.pin else None),
        )
    try:
        # strace says "Process N attached [with M threads]" once it has them all.
        deadline = time.monotonic() + 10.0
        while "attached" not in err.read_text(errors="replace"):
            if proc.poll() is not None:
                raise Unavailable(f"strace exited: {last_lines(err)}")
            if time.monotonic() > deadline:
                raise Unavailable("strace did not attach within 10 s")
            time.sleep(0.02)
        result = run_loadgen(port, SCENARIOS[STRACE_SCENARIO], cfg)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # detach and write the summary
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    by_call: dict[str, int] = {}
    total = 0
    for line in out.read_text(errors="replace").splitlines():
        m = STRACE_TOTAL.match(line)
        if m:
            total = int(m.group(1))
            continue
        parts = line.split()
        if len(parts) in (5, 6) and re.fullmatch(r"[\d.]+", parts[0]) and parts[3].isdigit():
            by_call[parts[-1]] = int(parts[3])
    calls = max(1, int(result["calls_total"]))
    top = sorted(by_call.items(), key=lambda kv: -kv[1])[:6]
    return {
        "scenario": STRACE_SCENARIO,
        "calls": result["calls_total"],
        "calls_per_s_under_strace": result["calls_per_s"],
        "syscalls": total,
        "syscalls_per_call": round(total / calls, 2),
        "top_per_call": {name: round(n / calls, 2) for name, n in top},
    }


def bench_server(name: str, scenarios: list[Scenario], cfg: RunConfig, want_strace: bool,
                 tls: TLSSetup) -> ServerResult:
    """Run `name`'s plaintext scenarios in one process of it and its TLS scenarios (if
    it serves TLS here) in another, each started fresh."""
    res = ServerResult(name)
    forms = [sc for sc in scenarios if sc.other_form and name in FORM_SERVERS]
    # Ours detects the form: its other forms run in the framed binary process.
    plain = [sc for sc in scenarios if not sc.tls and not sc.other_form and not sc.cpu_work
             and name not in CPU_ONLY and (not sc.idle or name in IDLE_SERVERS)] + (
        forms if name in DETECTS_FORM else [])
    secure = [sc for sc in scenarios if sc.tls]
    # The CPU scenarios run after every server's other scenarios, in rounds
    # (run_cpu_rounds).
    if plain:
        res.status, res.reason, res.rss_peak_kib = run_server(name, plain, cfg, res, want_strace)
        if name in DETECTS_FORM and forms:
            res.forms_rss_peak_kib = res.rss_peak_kib
            for form in dict.fromkeys(sc.form for sc in forms):
                res.forms_status[form_label(form)] = (res.status, res.reason)
    if name not in DETECTS_FORM:
        # One process per form, each started with that form's factories.
        for form in dict.fromkeys(sc.form for sc in forms):
            status, reason, rss = run_server(name, [sc for sc in forms if sc.form == form],
                                             cfg, res, False, form=form)
            res.forms_status[form_label(form)] = (status, reason)
            if rss:
                res.forms_rss_peak_kib = max(rss, res.forms_rss_peak_kib or 0)
    if secure and name in TLS_SERVERS:
        if tls.unavailable:
            res.tls_status, res.tls_reason = "unavailable", tls.unavailable
        else:
            res.tls_status, res.tls_reason, res.tls_rss_peak_kib = run_server(
                name, secure, cfg, res, False, tls_dir=tls.certs)
    return res


def form_label(form: tuple[str, str]) -> str:
    return " ".join(form)


def run_server(name: str, scenarios: list[Scenario], cfg: RunConfig, res: ServerResult,
               want_strace: bool, tls_dir: Path | None = None,
               form: tuple[str, str] = DEFAULT_FORM) -> tuple[str, str, int | None]:
    """Start `name` (serving `form`, see server_command), run `scenarios` against it
    (results into res.scenarios), stop it. Returns its status (ok, unavailable or
    failed), the reason, and its peak RSS."""
    logs = BUILD / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        port = free_port()
        cmd = server_command(name, port, cfg.baseline, tls_dir, form)
    except Unavailable as exc:
        return "unavailable", str(exc), None
    stem = name if tls_dir is None else f"{name}-tls"
    if form != DEFAULT_FORM:
        stem += "-" + "-".join(form)
    out_path, err_path = logs / f"{stem}.out", logs / f"{stem}.err"
    with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out_f,
            stderr=err_f,
            cwd=REPO,
            env=server_env(cfg),
            preexec_fn=pin_to(SERVER_CORE if cfg.pin else None),
        )
    ran = 0
    status, reason, rss = "ok", "", None
    try:
        wait_listening(proc, port, err_path)
        log(f"{stem}: pid {proc.pid} listening on {HOST}:{port}")
        for sc in scenarios:
            r = run_loadgen(port, sc, cfg, server_pid=proc.pid)
            res.scenarios[sc.name] = r
            ran += 1
            log(
                f"{name} {sc.name}: {r['calls_per_s']:.0f} {sc.unit}, p50 {r['latency_us']['p50']} us, "
                f"p99 {r['latency_us']['p99']} us, {r['mb_per_s']:.1f} MB/s, errors {r['errors']}, "
                f"cpu server {r.get('server_cpu_util', 0):.0%} loadgen {r['cpu_util']:.0%} "
                f"other {r.get('other_cpu_util', 0):.0%}"
            )
            if proc.poll() is not None:
                raise Unavailable(f"exited with {proc.returncode} during {sc.name}: {last_lines(err_path)}")
        if want_strace:
            try:
                res.strace = strace_run(proc.pid, port, cfg, logs)
            except Unavailable as exc:
                res.strace = {"unavailable": str(exc)}
        rss = vm_hwm_kib(proc.pid)
    except Unavailable as exc:
        status, reason = ("unavailable" if not ran else "failed"), str(exc)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        status, reason = "failed", str(exc)
    finally:
        stop_process(proc)
    return status, reason, rss


def run_cpu_rounds(results: dict[str, ServerResult], scenarios: list[Scenario],
                   cfg: RunConfig) -> None:
    """Run the CPU scenarios on the CPU_SERVERS among ``results`` in CPU_ROUNDS rounds
    (see there); each server's median round goes to its results, with every round's
    calls/s beside it ("rounds")."""
    cpu = [sc for sc in scenarios if sc.cpu_work]
    names = [n for n in CPU_SERVERS if n in results and results[n].status != "not run"]
    if not cpu or not names:
        return
    logs = BUILD / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}

    def fail(name: str, status: str, reason: str) -> None:
        res = results[name]
        res.cpu_status, res.cpu_reason = status, reason
        if name in CPU_ONLY:
            res.status, res.reason = status, reason
        log(f"{name} (CPU scenario): {status} ({reason})")

    try:
        for name in names:
            try:
                port = free_port()
                cmd = server_command(name, port, cfg.baseline, cpu_work=CPU_WORK)
            except Unavailable as exc:
                fail(name, "unavailable", str(exc))
                continue
            out_path, err_path = logs / f"{name}-cpu.out", logs / f"{name}-cpu.err"
            with open(out_path, "wb") as out_f, open(err_path, "wb") as err_f:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f, cwd=REPO,
                    env=server_env(cfg),
                    # Both cores (this script runs pinned to LOADGEN_CORE, and its
                    # children would inherit that).
                    preexec_fn=(lambda: os.sched_setaffinity(0, {SERVER_CORE, LOADGEN_CORE}))
                    if cfg.pin else None,
                )
            try:
                wait_listening(proc, port, err_path)
            except Unavailable as exc:
                stop_process(proc)
                fail(name, "unavailable", str(exc))
                continue
            log(f"{name}-cpu: pid {proc.pid} listening on {HOST}:{port}")
            started[name] = (proc, port, err_path)
            results[name].cpu_status = "ok"
        for sc in cpu:
            rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in started}
            order = list(started)
            for r in range(CPU_ROUNDS):
                for name in order[r % len(order):] + order[:r % len(order)]:
                    proc, port, err_path = started[name]
                    if results[name].cpu_status != "ok":
                        continue
                    if proc.poll() is not None:
                        fail(name, "failed", f"exited with {proc.returncode}: "
                                             f"{last_lines(err_path)}")
                        continue
                    try:
                        result = run_loadgen(port, sc, cfg, server_pid=proc.pid)
                    except (RuntimeError, subprocess.TimeoutExpired) as exc:
                        fail(name, "failed", str(exc))
                        continue
                    rounds[name].append(result)
                    log(f"{name} {sc.name} round {r + 1}/{CPU_ROUNDS}: "
                        f"{result['calls_per_s']:.0f} calls/s, p50 {result['latency_us']['p50']} us, "
                        f"cpu server {result.get('server_cpu_util', 0):.0%} "
                        f"loadgen {result['cpu_util']:.0%} other {result.get('other_cpu_util', 0):.0%}")
            for name, done in rounds.items():
                if done:
                    ranked = sorted(done, key=lambda x: x["calls_per_s"])
                    median = dict(ranked[len(ranked) // 2])
                    median["rounds_calls_per_s"] = [round(x["calls_per_s"]) for x in done]
                    results[name].scenarios[sc.name] = median
        for name, (proc, _, _) in started.items():
            if name in CPU_ONLY:
                results[name].rss_peak_kib = vm_hwm_kib(proc.pid)
    finally:
        for proc, _, _ in started.values():
            stop_process(proc)


# --------------------------------------------------------------------------- reporting


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us < 1000:
        return f"{us:.0f}us"
    if us < 10_000:
        return f"{us / 1000:.2f}ms"
    if us < 1_000_000:
        return f"{us / 1000:.1f}ms"
    return f"{us / 1e6:.2f}s"


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def cells(res: ServerResult, sc: Scenario) -> list[str]:
    r = res.scenarios.get(sc.name)
    width = 2 if sc.bulk else 3
    if r is None:
        return ["-"] * width
    flag = "!" if r["errors"] else ""
    p99 = fmt_us(r["latency_us"]["p99"]) + flag
    if sc.bulk:
        return [f"{r['mb_per_s']:.1f}", p99]
    return [fmt_rate(r["calls_per_s"]), fmt_us(r["latency_us"]["p50"]), p99]


def render_table(results: list[ServerResult], scenarios: list[Scenario], tls: bool = False,
                 forms: bool = False) -> str:
    """The plaintext table, or with `tls` the TLS one (its servers, their TLS process's
    RSS), or with `forms` the other forms' one (its servers' RSS there)."""
    head1 = ["server"]
    head2 = [""]
    groups: list[int] = []
    for sc in scenarios:
        sub = ["MB/s", "p99"] if sc.bulk else [sc.unit, "p50", "p99"]
        head1 += [sc.label] + [""] * (len(sub) - 1)
        head2 += sub
        groups.append(len(sub))
    head1 += ["RSS peak"]
    head2 += ["MiB"]
    rows = []
    for res in results:
        status = res.tls_status if tls else res.status
        rss = res.tls_rss_peak_kib if tls else res.rss_peak_kib
        if forms:
            statuses = {st for st, _ in res.forms_status.values()}
            status = "unavailable" if statuses == {"unavailable"} else "ok"
            rss = res.forms_rss_peak_kib
        if tls and not status:
            continue
        if status == "unavailable" and not any(sc.name in res.scenarios for sc in scenarios):
            rows.append([res.name, "unavailable (see below)"])
            continue
        row = [res.name]
        for sc in scenarios:
            row += cells(res, sc)
        row.append(f"{rss / 1024:.0f}" if rss else "-")
        rows.append(row)
    ncol = len(head1)
    # A group's label spans its columns, so it does not size the first of them.
    labels = [head1[0]] + [""] * (ncol - 2) + [head1[-1]]
    table = [labels, head2] + [r for r in rows if len(r) > 2]
    widths = [max(len(r[i]) for r in table if i < len(r)) for i in range(ncol)]
    # A group label wider than its columns widens the group's last column.
    col = 1
    for sc, n in zip(scenarios, groups):
        span = sum(widths[col:col + n]) + 2 * (n - 1)
        if len(sc.label) > span:
            widths[col + n - 1] += len(sc.label) - span
        col += n

    def line(r: list[str]) -> str:
        if len(r) == 2 and r[1].startswith("unavailable"):
            return f"{r[0]:<{widths[0]}}  {r[1]}"
        parts = [f"{r[0]:<{widths[0]}}"]
        c = 1
        for n in groups + [1]:
            group = []
            for i in range(c, c + n):
                group.append(f"{r[i]:>{widths[i]}}" if r is not head1 else r[i])
            if r is head1:
                span = sum(widths[c:c + n]) + 2 * (n - 1)
                parts.append(f"{group[0]:^{span}}")
            else:
                parts.append("  ".join(group))
            c += n
        return " | ".join(parts).rstrip()

    return "\n".join(line(r) for r in [head1, head2] + rows)


def best_peer(results: list[ServerResult], sc: str, key: Callable[[dict[str, Any]], float], low: bool) -> tuple[str, float] | None:
    cands = [
        (r.name, key(r.scenarios[sc]))
        for r in results
        if r.name in PYTHON_PEERS and sc in r.scenarios and r.scenarios[sc]["calls"] > 0
    ]
    if not cands:
        return None
    return (min if low else max)(cands, key=lambda kv: kv[1])


def tls_comparisons(results: list[ServerResult], scenarios: list[Scenario]) -> dict[str, Any]:
    """Ours over TLS against TLS_PEER (every TLS scenario both ran) and against our own
    plaintext calls/s, with issue 14's targets."""
    by_name = {r.name: r for r in results}
    ours = by_name.get("nimbus")
    names = {sc.name for sc in scenarios}
    out: dict[str, Any] = {"peer": TLS_PEER, "vs": {}, "vs_own_plaintext": None}

    def rate(res: ServerResult | None, sc: str) -> float | None:
        r = res.scenarios.get(sc) if res else None
        return r["calls_per_s"] if r and r["calls"] else None

    for other in (n for n in TLS_SERVERS if n not in ("nimbus", BASELINE)):
        for sc in scenarios:
            if not sc.tls:
                continue
            mine, theirs = rate(ours, sc.name), rate(by_name.get(other), sc.name)
            if mine and theirs:
                entry: dict[str, Any] = {"ratio": round(mine / theirs, 3)}
                if other == TLS_PEER and sc.name == TLS_TARGET_SCENARIO:
                    entry.update(target=TLS_TARGET_VS_PEER,
                                 met=mine / theirs >= TLS_TARGET_VS_PEER)
                out["vs"].setdefault(other, {})[sc.name] = entry
    if TLS_TARGET_SCENARIO in names:
        secure, plain = rate(ours, TLS_TARGET_SCENARIO), rate(ours, PLAIN_OF_TLS_TARGET)
        if PLAIN_OF_TLS_TARGET not in names:
            out["vs_own_plaintext"] = {"missing": f"needs {PLAIN_OF_TLS_TARGET} in the same run"}
        elif secure and plain:
            out["vs_own_plaintext"] = {
                "scenario": TLS_TARGET_SCENARIO, "plaintext": PLAIN_OF_TLS_TARGET,
                "ratio": round(secure / plain, 3), "target": TLS_TARGET_VS_PLAIN,
                "met": secure / plain >= TLS_TARGET_VS_PLAIN,
            }
    return out


def form_comparisons(results: list[ServerResult], scenarios: list[Scenario]) -> list[dict[str, Any]]:
    """Ours / FORM_PEER calls/s in each other form that both ran, beside the framed
    binary scenario with as many connections (FORM_REFERENCE), when that ran too."""
    if not any(sc.other_form for sc in scenarios):
        return []
    by_name = {r.name: r for r in results}
    ours, peer = by_name.get("nimbus"), by_name.get(FORM_PEER)
    counts = {sc.connections for sc in scenarios if sc.other_form}
    shown = [sc for sc in scenarios if not sc.tls and (
        sc.other_form or sc.name in {FORM_REFERENCE.get(n) for n in counts})]
    out = []
    for sc in sorted(shown, key=lambda sc: (sc.connections, sc.other_form)):
        mine = ours.scenarios.get(sc.name) if ours else None
        theirs = peer.scenarios.get(sc.name) if peer else None
        if not mine or not theirs or not mine["calls"] or not theirs["calls"]:
            continue
        out.append({"scenario": sc.name, "transport": sc.transport, "protocol": sc.protocol,
                    "connections": sc.connections, "peer": FORM_PEER,
                    "calls_per_s": round(mine["calls_per_s"] / theirs["calls_per_s"], 3),
                    "p99": round(mine["latency_us"]["p99"] / theirs["latency_us"]["p99"], 3)
                    if theirs["latency_us"]["p99"] else None})
    return out


def comparisons(results: list[ServerResult], scenarios: list[Scenario]) -> dict[str, Any]:
    by_name = {r.name: r for r in results}
    ours = by_name.get("nimbus")
    out: dict[str, Any] = {"vs_best_python_peer": {}, "p99_vs_java": None, "vs_baseline": {},
                           "vs_ceiling": {}, "idle": None,
                           "tls": tls_comparisons(results, scenarios),
                           "forms": form_comparisons(results, scenarios),
                           "cpu": cpu_comparisons(results, scenarios)}
    if ours is None:
        return out
    base = by_name.get(BASELINE)
    for sc in scenarios if base is not None else ():
        assert base is not None
        mine, theirs = ours.scenarios.get(sc.name), base.scenarios.get(sc.name)
        if not mine or not theirs or not mine["calls"] or not theirs["calls"]:
            continue
        rate = "mb_per_s" if sc.bulk else "calls_per_s"
        out["vs_baseline"][sc.name] = {
            "throughput": round(mine[rate] / theirs[rate], 3) if theirs[rate] else None,
            "p99": round(mine["latency_us"]["p99"] / theirs["latency_us"]["p99"], 3)
            if theirs["latency_us"]["p99"] else None,
        }
    for sc in scenarios:
        mine = ours.scenarios.get(sc.name)
        # TLS scenarios have their own comparison (only one peer serves TLS here).
        if sc.tls or not mine or not mine["calls"]:
            continue
        rate_key: Callable[[dict[str, Any]], float] = (
            (lambda r: r["mb_per_s"]) if sc.bulk else (lambda r: r["calls_per_s"])
        )
        entry: dict[str, Any] = {}
        best = best_peer(results, sc.name, rate_key, low=False)
        if best and best[1] > 0:
            entry["throughput"] = {"peer": best[0], "ratio": round(rate_key(mine) / best[1], 3)}
        best = best_peer(results, sc.name, lambda r: r["latency_us"]["p99"], low=True)
        if best and best[1] > 0:
            entry["p99"] = {"peer": best[0], "ratio": round(mine["latency_us"]["p99"] / best[1], 3)}
        if entry:  # no Python peer ran this scenario: no line (and no empty heading)
            out["vs_best_python_peer"][sc.name] = entry
    ceiling = by_name.get(CEILING)
    for sc in scenarios if ceiling is not None else ():
        assert ceiling is not None
        mine, theirs = ours.scenarios.get(sc.name), ceiling.scenarios.get(sc.name)
        rate = "mb_per_s" if sc.bulk else "calls_per_s"
        if mine and theirs and mine["calls"] and theirs[rate]:
            out["vs_ceiling"][sc.name] = round(mine[rate] / theirs[rate], 3)
    idle = next((sc for sc in scenarios if sc.idle), None)
    busy = next((sc for sc in scenarios if not sc.idle and not sc.tls and not sc.other_form
                 and not sc.bulk and idle is not None and sc.connections == idle.connections),
                None)
    with_idle = ours.scenarios.get(idle.name) if idle is not None else None
    if idle is not None and with_idle and with_idle["calls"]:
        without = ours.scenarios.get(busy.name) if busy is not None else None
        out["idle"] = {
            "scenario": idle.name, "idle": idle.idle, "calls_per_s": with_idle["calls_per_s"],
            "rss_kib": with_idle.get("server_rss_kib"),
            "without": busy.name if busy is not None and without else None,
            "ratio": round(with_idle["calls_per_s"] / without["calls_per_s"], 3)
            if without and without["calls_per_s"] else None,
        }
    java = by_name.get("java-hsha")
    mine = ours.scenarios.get(JAVA_P99_SCENARIO)
    theirs = java.scenarios.get(JAVA_P99_SCENARIO) if java else None
    if mine and theirs and theirs["latency_us"]["p99"]:
        out["p99_vs_java"] = {
            "scenario": JAVA_P99_SCENARIO,
            "nimbus_us": mine["latency_us"]["p99"],
            "java_us": theirs["latency_us"]["p99"],
            "ratio": round(mine["latency_us"]["p99"] / theirs["latency_us"]["p99"], 3),
        }
    return out


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render_tls(results: list[ServerResult], scenarios: list[Scenario], comp: dict[str, Any],
               tls: TLSSetup) -> list[str]:
    """The TLS section: its table, what was negotiated, and issue 14's targets."""
    secure = [sc for sc in scenarios if sc.tls]
    negotiated = next((r["tls"] for res in results for name, r in res.scenarios.items()
                       if SCENARIOS[name].tls and r.get("tls")), None)
    what = (f"{negotiated['version']} {negotiated['cipher']}" if negotiated
            else "nothing negotiated")
    lines = ["", f"Mutual TLS: client certificates required, ECDSA P-256 certificates, {what}, "
                 f"loadgen on {tls.openssl or 'OpenSSL'}."]
    hs = SCENARIOS["handshakes"]
    if hs in secure:
        lines.append(f"{hs.label}: {hs.connections} connections, each repeating connect + full "
                     "handshake (no resumption) + 1 call + close; p50/p99 of a whole cycle.")
    lines.append("")
    if any(res.tls_status for res in results):
        lines.append(render_table(results, secure, tls=True))
    else:
        lines.append("  (no server with a TLS mode was run: "
                     + ", ".join(s for s in TLS_SERVERS if s != BASELINE) + " have one)")
    skipped = [f"{res.name} ({NO_TLS[res.name]})" for res in results if res.name in NO_TLS]
    if skipped:
        lines.append("No TLS mode here: " + ", ".join(skipped) + ".")
    t = comp["tls"]
    target = t["vs"].get(t["peer"], {}).get(TLS_TARGET_SCENARIO)
    own = t["vs_own_plaintext"]
    lines += ["", "nimbus over TLS (issue 14's targets; higher is better):"]
    heading = len(lines)
    for other, by_scenario in t["vs"].items():
        for sc in secure:
            e = by_scenario.get(sc.name)
            if e is None:
                continue
            # Three decimals where a target is judged, so 0.497 does not print as 0.50.
            goal = (f" (target >= {e['target']:g}x: {met(e['met'])})" if "target" in e else "")
            head = f"vs {other}, {sc.label}:"
            ratio = f"{e['ratio']:.3f}" if "target" in e else f"{e['ratio']:.2f}"
            lines.append(f"  {head:<40} {ratio}x {sc.unit}{goal}")
    if target is None and TLS_TARGET_SCENARIO in {sc.name for sc in secure}:
        lines.append(f"  vs {t['peer']} at {SCENARIOS[TLS_TARGET_SCENARIO].label}: not measured "
                     f"(needs both nimbus and {t['peer']} in --servers)")
    if own is None:
        if TLS_TARGET_SCENARIO in {sc.name for sc in secure}:
            lines.append(f"  vs its own plaintext: not measured (nimbus did not complete "
                         f"{TLS_TARGET_SCENARIO} and {PLAIN_OF_TLS_TARGET})")
    elif "missing" in own:
        lines.append(f"  vs its own plaintext at 256 conns: not measured; it needs "
                     f"{PLAIN_OF_TLS_TARGET} in the same run (add it to --scenarios)")
    else:
        head = (f"{SCENARIOS[own['scenario']].label} vs its own "
                f"{SCENARIOS[own['plaintext']].label}:")
        lines.append(f"  {head:<40} {own['ratio']:.3f}x calls/s "
                     f"(target >= {own['target']:g}x: {met(own['met'])})")
    if len(lines) == heading:
        lines.append("  nothing to compare: run nimbus with another TLS server "
                     f"({', '.join(s for s in TLS_SERVERS if s not in ('nimbus', BASELINE))})")
    return lines


def render_forms(results: list[ServerResult], scenarios: list[Scenario],
                 comp: dict[str, Any]) -> list[str]:
    """The other forms' section: their table, and ours / FORM_PEER per form."""
    forms = [sc for sc in scenarios if sc.other_form]
    lines = ["", "Other client forms (issue 17): ours detects each connection's form on its one "
                 f"port (one process for every form); {FORM_PEER} runs one process per "
                 "form, started with that form's transport and protocol factories.", ""]
    shown = [r for r in results if r.forms_status]
    if shown:
        lines.append(render_table(shown, forms, forms=True))
    else:
        lines.append(f"  (neither nimbus nor {FORM_PEER} was run)")
    skipped = [f"{res.name} ({NO_FORMS[res.name]})" for res in results if res.name in NO_FORMS]
    if skipped:
        lines.append("Not run in other forms: " + ", ".join(skipped) + ".")
    if comp["forms"]:
        lines += ["", f"nimbus / {FORM_PEER} by form, same transport and protocol "
                      "(calls/s: higher is better; p99: lower is better):"]
        for e in comp["forms"]:
            head = f"{e['transport']} {e['protocol']}, {e['connections']} conns ({e['scenario']}):"
            p99 = f", p99 {e['p99']:.2f}x" if e["p99"] else ""
            lines.append(f"  {head:<44} calls/s {e['calls_per_s']:.2f}x{p99}")
    return lines


def cpu_comparisons(results: list[ServerResult], scenarios: list[Scenario]) -> dict[str, Any]:
    """Issue 18's multi-core ratios: ours in CPU_PROCESSES processes against ours in
    one, and against gunicorn-thrift with CPU_PROCESSES workers, in each CPU scenario."""
    by_name = {r.name: r for r in results}
    out: dict[str, Any] = {}

    def rate(name: str, sc: str) -> float | None:
        res = by_name.get(name)
        r = res.scenarios.get(sc) if res else None
        return r["calls_per_s"] if r and r["calls"] else None

    for sc in (sc for sc in scenarios if sc.cpu_work):
        procs = rate(NIMBUS_PROCS, sc.name)
        entry: dict[str, Any] = {"connections_answered": {}}
        for key, other, target in (("vs_one_process", "nimbus", CPU_TARGET_VS_ONE),
                                   ("vs_gunicorn", GUNICORN, CPU_TARGET_VS_GUNICORN),
                                   ("vs_gunicorn_gevent", GUNICORN_GEVENT,
                                    CPU_TARGET_VS_GUNICORN)):
            theirs = rate(other, sc.name)
            if procs and theirs:
                entry[key] = {"ratio": round(procs / theirs, 3), "target": target,
                              "met": procs / theirs >= target}
        entry["calls_per_cpu_second"] = {}
        for name in CPU_SERVERS:
            res = by_name.get(name)
            r = res.scenarios.get(sc.name) if res else None
            if r and r["calls"] and r.get("server_cpu_util"):
                # What a server does with the CPU it gets: on a shared machine the
                # share each server gets varies from run to run, this much less.
                entry["calls_per_cpu_second"][name] = round(
                    r["calls_per_s"] / r["server_cpu_util"])
            if r and r["calls"]:
                # Little's law: calls/s x mean latency is how many connections had a
                # call answered on average. A connection whose call is never answered
                # adds nothing to either (loadgen only times answered calls). Calls
                # begun before the window can push it a little over the count.
                entry["connections_answered"][name] = round(min(
                    sc.connections, r["calls_per_s"] * r["latency_us"]["mean"] / 1e6), 1)
        out[sc.name] = entry
    return out


def render_cpu(results: list[ServerResult], scenarios: list[Scenario],
               comp: dict[str, Any]) -> list[str]:
    """The multi-core section: its table and issue 18's ratios."""
    cpu = [sc for sc in scenarios if sc.cpu_work]
    shown = [r for r in results if r.name in CPU_SERVERS and (r.cpu_status or r.scenarios)]
    lines = ["", f"More than one core (issue 18), {CPU_ROUNDS} rounds: echo spends {CPU_WORK} iterations of Python "
                 f"(~200 us of CPU) per call; servers not pinned (both cores), loadgen on core "
                 f"{LOADGEN_CORE}; nimbus = make_server() in one process, {NIMBUS_PROCS} = "
                 f"processes={CPU_PROCESSES}, {GUNICORN} = {CPU_PROCESSES} workers "
                 f"(thriftpy_sync), {GUNICORN_GEVENT} = {CPU_PROCESSES} workers "
                 "(thriftpy_gevent).", ""]
    if shown:
        lines.append(render_table(shown, cpu))
    for res in shown:
        if res.cpu_status in ("unavailable", "failed"):
            lines.append(f"{res.name} (CPU scenario): {res.cpu_status} ({res.cpu_reason})")
    for sc in cpu:
        e = comp["cpu"].get(sc.name, {})
        answered = e.get("connections_answered", {})
        by_name = {r.name: r for r in results}
        rounds = {n: by_name[n].scenarios[sc.name].get("rounds_calls_per_s")
                  for n in CPU_SERVERS if n in by_name and sc.name in by_name[n].scenarios}
        if rounds:
            lines.append(f"calls/s in each of the {CPU_ROUNDS} rounds (the table shows each "
                         "server's median round): "
                         + "; ".join(f"{n} {', '.join(f'{v:,}' for v in rs or [])}"
                                     for n, rs in rounds.items()))
        per_cpu = e.get("calls_per_cpu_second", {})
        if per_cpu:
            lines.append("Calls per second of server CPU (all its processes): "
                         + ", ".join(f"{n} {v:,}" for n, v in per_cpu.items()))
        if answered:
            lines.append(f"Connections answered on average, of {sc.connections} (calls/s x mean "
                         "latency): " + ", ".join(f"{n} {v:g}" for n, v in answered.items()))
        for key, other, target in (("vs_one_process", "nimbus (one process)", CPU_TARGET_VS_ONE),
                                   ("vs_gunicorn", GUNICORN, CPU_TARGET_VS_GUNICORN),
                                   ("vs_gunicorn_gevent", GUNICORN_GEVENT,
                                    CPU_TARGET_VS_GUNICORN)):
            lines.append(f"{NIMBUS_PROCS} / {other}: "
                         + (f"{e[key]['ratio']:.3f}x calls/s (target >= {target:g}x: "
                            f"{met(e[key]['met'])})" if key in e else "not measured"))
    return lines


def render_report(results: list[ServerResult], scenarios: list[Scenario], cfg: RunConfig,
                  comp: dict[str, Any], tls: TLSSetup | None = None) -> str:
    plain = [sc for sc in scenarios if not sc.tls and not sc.other_form and not sc.cpu_work]
    lines = [
        f"Echo benchmark: closed loop, {cfg.duration:g} s measured after {cfg.warmup:g} s warm-up per scenario; "
        + (f"server on core {SERVER_CORE}, loadgen on core {LOADGEN_CORE}" if cfg.pin else "NOT pinned (fewer than 2 cores)")
        + "; 16-byte payload unless stated; MB = 10^6 bytes; ! = errors (listed below)",
        "Allocator: every server runs with "
        + (" ".join(f"{k}={v}" for k, v in ALLOCATOR_ENV.items()) + " (the demo server's settings)"
           if cfg.tuned_malloc else "glibc's default settings (--untuned-malloc)"),
    ]
    if plain:
        lines += ["", render_table([r for r in results if r.name not in CPU_ONLY], plain)]
    if any(sc.cpu_work for sc in scenarios):
        lines += render_cpu(results, scenarios, comp)
    if any(sc.other_form for sc in scenarios):
        lines += render_forms(results, scenarios, comp)
    if tls is not None and any(sc.tls for sc in scenarios):
        lines += render_tls(results, scenarios, comp, tls)
    lines += [
        "",
        "CPU over the measured window, share of one core: server / loadgen / anything else",
    ]
    for res in results:
        if not res.scenarios:
            continue
        parts = []
        for sc in scenarios:
            r = res.scenarios.get(sc.name)
            if r:
                parts.append(
                    f"{sc.name} {r.get('server_cpu_util', 0):.0%}/{r['cpu_util']:.0%}/{r.get('other_cpu_util', 0):.0%}"
                )
        lines.append(f"  {res.name:<20} " + "  ".join(parts))
    vs = comp["vs_best_python_peer"]
    if vs:
        lines += ["", "nimbus vs the best Python peer (throughput: higher is better; p99: lower is better):"]
        for sc in scenarios:
            e = vs.get(sc.name)
            if not e:
                continue
            what = "MB/s" if sc.bulk else "calls/s"
            bits = []
            if "throughput" in e:
                bits.append(f"{what} {e['throughput']['ratio']:.2f}x {e['throughput']['peer']}")
            if "p99" in e:
                bits.append(f"p99 {e['p99']['ratio']:.2f}x {e['p99']['peer']}")
            lines.append(f"  {sc.label:<18} " + ", ".join(bits))
    vc = comp.get("vs_ceiling")
    if vc:
        lines += ["", f"nimbus as a share of the C ceiling ({CEILING}, c_echo.c: no Thrift "
                      "decoding at all):"]
        lines += [f"  {SCENARIOS[name].label:<18} {ratio:.2f}" for name, ratio in vc.items()]
    idle = comp.get("idle")
    if idle:
        rss = f", server RSS {idle['rss_kib'] / 1024:.0f} MiB" if idle["rss_kib"] else ""
        versus = (f", {idle['ratio']:.2f}x of {SCENARIOS[idle['without']].label} without them"
                  if idle["ratio"] else "")
        lines += ["", f"nimbus with {idle['idle']:,} idle connections: "
                      f"{idle['calls_per_s']:,.0f} calls/s on the busy ones{versus}{rss}"]
    vb = comp["vs_baseline"]
    if vb:
        lines += ["", f"nimbus vs {BASELINE} ({cfg.baseline}; throughput: higher is better; "
                      "p99: lower is better):"]
        for sc in scenarios:
            e = vb.get(sc.name)
            if e:
                what = "MB/s" if sc.bulk else sc.unit
                bits = [f"{what} {e['throughput']:.2f}x" if e["throughput"] else "",
                        f"p99 {e['p99']:.2f}x" if e["p99"] else ""]
                lines.append(f"  {sc.label:<18} " + ", ".join(b for b in bits if b))
    j = comp["p99_vs_java"]
    if j:
        lines += [
            "",
            f"nimbus p99 at {SCENARIOS[j['scenario']].label}: {fmt_us(j['nimbus_us'])} "
            f"vs java-hsha {fmt_us(j['java_us'])} ({j['ratio']:.2f}x)",
        ]
    busy = [
        f"{res.name} {name} ({r['other_cpu_util']:.0%})"
        for res in results
        for name, r in res.scenarios.items()
        if r.get("other_cpu_util", 0) > OTHER_CPU_WARN
    ]
    if busy:
        lines += ["", "WARNING: something else used the CPUs during " + ", ".join(busy)
                  + "; those numbers are disturbed."]
    saturated = [
        f"{res.name} {name} ({r['cpu_util']:.0%})"
        for res in results
        for name, r in res.scenarios.items()
        if r["cpu_util"] > LOADGEN_CPU_WARN
    ]
    if saturated:
        lines += ["", "WARNING: the load generator was near saturation during " + ", ".join(saturated)
                  + "; those numbers are lower bounds for the server."]
    # TLS scenarios handshake every connection before the clock: their set-up is slow
    # by nature, and the handshakes scenario measures that cost on its own.
    slow = [
        f"{res.name} {name} {r['setup_s']:.1f} s"
        for res in results
        for name, r in res.scenarios.items()
        if r.get("setup_s", 0) > SLOW_SETUP and not SCENARIOS[name].tls
    ]
    if slow:
        lines += ["", "Slow connection setup (before the clock starts; usually an accept backlog "
                      "overflowing, so SYNs are retried after 1 s): " + ", ".join(slow)]
    errs = []
    for res in results:
        for name, r in res.scenarios.items():
            if r["errors"]:
                kinds = ", ".join(f"{k} {v}" for k, v in r["error_kinds"].items() if v)
                errs.append(f"  {res.name} {name}: {r['errors']} errors ({kinds}); first: {r['first_error']}")
        if res.status == "failed":
            errs.append(f"  {res.name}: failed: {res.reason}")
        if res.tls_status == "failed":
            errs.append(f"  {res.name} (TLS): failed: {res.tls_reason}")
        for form, (status, reason) in res.forms_status.items():
            if status == "failed" and res.name not in DETECTS_FORM:
                errs.append(f"  {res.name} ({form}): failed: {reason}")
    if errs:
        lines += ["", "ERRORS:"] + errs
    for res in results:
        if res.status == "unavailable":
            lines.append(f"{res.name}: unavailable ({res.reason})")
        if res.tls_status == "unavailable":
            lines.append(f"{res.name} (TLS): unavailable ({res.tls_reason})")
        for form, (status, reason) in res.forms_status.items():
            if status == "unavailable" and res.name not in DETECTS_FORM:
                lines.append(f"{res.name} ({form}): unavailable ({reason})")
    traced = [r for r in results if r.strace]
    if traced:
        lines += ["", f"Syscalls per call under strace -c -f ({SCENARIOS[STRACE_SCENARIO].label}; "
                      "strace slows the server, so its calls/s are not comparable):"]
        for res in traced:
            s = res.strace or {}
            if "unavailable" in s:
                lines.append(f"  {res.name:<20} unavailable ({s['unavailable']})")
                continue
            top = ", ".join(f"{k} {v:g}" for k, v in s["top_per_call"].items())
            lines.append(f"  {res.name:<20} {s['syscalls_per_call']:.2f}  ({top})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def runs_on(name: str, sc: Scenario) -> bool:
    """Whether scenario `sc` is run for server `name`."""
    if sc.tls:
        return name in TLS_SERVERS
    if sc.other_form:
        return name in FORM_SERVERS
    if sc.cpu_work:
        return name in CPU_SERVERS
    if name in CPU_ONLY:
        return False
    if sc.idle:
        return name in IDLE_SERVERS
    return True


def csv_choice(allowed: tuple[str, ...] | list[str], what: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(bad) or '(none given)'}; choose from {', '.join(allowed)}"
            )
        return names

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Benchmark nimbus-thrift against other Thrift servers (echo, framed, binary; "
                    "--forms: compact and unframed too).",
    )
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per scenario (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each (default 1)")
    parser.add_argument("--servers", type=csv_choice(SERVERS, "server"), default=list(SERVERS),
                        help=f"comma-separated subset of {','.join(SERVERS)}")
    parser.add_argument("--scenarios", type=csv_choice(list(SCENARIOS), "scenario"),
                        default=list(DEFAULT_SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)} "
                             f"(default {','.join(DEFAULT_SCENARIOS)})")
    parser.add_argument("--tls", action="store_true",
                        help=f"add the TLS scenarios ({','.join(TLS_SCENARIOS)}) to --scenarios")
    parser.add_argument("--forms", action="store_true",
                        help=f"add the other client forms' scenarios ({','.join(FORM_SCENARIOS)}: "
                             "compact protocol, unframed transport) to --scenarios")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--strace", action="store_true",
                        help=f"also run {STRACE_SCENARIO} under `strace -c -f` and print syscalls per call")
    parser.add_argument("--untuned-malloc", action="store_true",
                        help="run every server with glibc's default allocator settings instead "
                             "of the ones nimbus-thrift's demo server sets (applied to all servers)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run our server from the checkout DIR (C modules built in "
                             f"place) as {BASELINE} and print ratios against it")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0:
        parser.error("--duration must be positive and --warmup not negative")
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        if not (args.baseline / "scripts" / "bench" / "peer_servers.py").is_file():
            parser.error(f"--baseline {args.baseline} is not a nimbus-thrift checkout "
                         "(no scripts/bench/peer_servers.py)")

    check_loadgen()
    cores = os.sched_getaffinity(0)
    pin = {SERVER_CORE, LOADGEN_CORE} <= cores
    if pin:
        # This script only waits while loadgen runs, but keep it off the server's core.
        os.sched_setaffinity(0, {LOADGEN_CORE})
    else:
        log(f"cores {sorted(cores)} do not include {SERVER_CORE} and {LOADGEN_CORE}; running unpinned")
    chosen = (args.scenarios + [n for n in TLS_SCENARIOS if args.tls]
              + [n for n in FORM_SCENARIOS if args.forms])
    scenarios = [SCENARIOS[n] for n in SCENARIOS if n in chosen]
    tls = tls_setup() if any(sc.tls for sc in scenarios) else None
    if tls is not None and tls.unavailable:
        log(f"TLS scenarios unavailable: {tls.unavailable}")
    cfg = RunConfig(duration=args.duration, warmup=args.warmup, pin=pin,
                    tuned_malloc=not args.untuned_malloc, baseline=args.baseline,
                    tls_certs=tls.certs if tls else None)

    results = []
    # The baseline runs just before ours, so the two see the most similar machine.
    names = [s for s in SERVERS if s in args.servers]
    if args.baseline is not None:
        names.insert(names.index("nimbus") if "nimbus" in names else 0, BASELINE)
    for name in names:
        if not any(runs_on(name, sc) for sc in scenarios):
            # Nothing to run for it; the report says it has no TLS mode (or other forms)
            # here.
            results.append(ServerResult(name, status="not run",
                                        reason=NO_TLS.get(name, NO_FORMS.get(name, ""))))
            continue
        log(f"{name}: starting")
        res = bench_server(name, scenarios, cfg, args.strace, tls or TLSSetup())
        if res.status != "ok":
            log(f"{name}: {res.status} ({res.reason})")
        if res.tls_status not in ("", "ok"):
            log(f"{name} (TLS): {res.tls_status} ({res.tls_reason})")
        for form, (status, reason) in res.forms_status.items():
            if status != "ok" and name not in DETECTS_FORM:
                log(f"{name} ({form}): {status} ({reason})")
        results.append(res)
    run_cpu_rounds({r.name: r for r in results}, scenarios, cfg)
    comp = comparisons(results, scenarios)

    if args.json:
        doc = {
            "config": {
                "duration_s": cfg.duration,
                "warmup_s": cfg.warmup,
                "pinned": pin,
                "server_core": SERVER_CORE,
                "loadgen_core": LOADGEN_CORE,
                "worker_threads": WORKER_THREADS,
                "allocator_env": ALLOCATOR_ENV if cfg.tuned_malloc else None,
                "baseline": str(cfg.baseline) if cfg.baseline else None,
                "scenarios": {s.name: {"connections": s.connections, "payload_bytes": s.payload,
                                       "tls": s.tls, "handshakes": s.handshakes,
                                       "transport": s.transport, "protocol": s.protocol}
                              for s in scenarios},
                "tls": None if tls is None else {
                    "certs": str(tls.certs) if tls.certs else None,
                    "loadgen_openssl": tls.openssl,
                    "unavailable": tls.unavailable or None,
                },
            },
            "servers": {r.name: r.to_json() for r in results},
            "comparisons": comp,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(render_report(results, scenarios, cfg, comp, tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
