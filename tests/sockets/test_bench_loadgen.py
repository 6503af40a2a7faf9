"""Real sockets: the benchmark's C load generator (scripts/bench/loadgen.c) in each client
form it sends (issue 17): framed binary (its default), framed compact, unframed binary
and unframed compact. Its requests are exactly our encoder's bytes; against our server
(port 0) it completes calls with no errors; and it notices replies that are not the
echo it asked for (another string, an EXCEPTION), so a bad server cannot pass."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.codec import binary, compact
from support.rawthrift import recv_exact

LOADGEN_SRC = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "loadgen.c"
#: Generous: each run is 0.1 s warm-up + 0.3 s measured.
RUN_TIMEOUT = 60.0
#: (transport, protocol) for loadgen's --transport and --protocol.
FORMS = [("framed", "binary"), ("framed", "compact"), ("unframed", "binary"),
         ("unframed", "compact")]
OTHER_FORMS = FORMS[1:]


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """loadgen built without TLS (what scripts/bench.sh builds when OpenSSL is absent)."""
    gcc = shutil.which("gcc")
    assert gcc is not None, "gcc is needed to build scripts/bench/loadgen.c"
    exe = tmp_path_factory.mktemp("loadgen") / "loadgen"
    subprocess.run([gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(LOADGEN_SRC)],
                   check=True, capture_output=True, timeout=RUN_TIMEOUT)
    return exe


def form_options(form: tuple[str, str]) -> list[str]:
    """loadgen's options for `form`: none for framed binary, so its defaults are tested."""
    if form == FORMS[0]:
        return []
    return ["--transport", form[0], "--protocol", form[1]]


def run(loadgen: Path, port: int, form: tuple[str, str], *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(loadgen), "--port", str(port), "--connections", "4", "--duration", "0.3",
         "--warmup", "0.1", *form_options(form), *extra],
        capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["transport"], result["protocol"]) == form
    return result


def serve(demo: ModuleType, handler: Any) -> nimbus_thrift.Server:
    server = nimbus_thrift.make_server(demo.Echo, handler, host="127.0.0.1", port=0,
                                       worker_threads=4)
    server.start()
    return server


def port_of(server: nimbus_thrift.Server) -> int:
    assert server.address is not None
    return server.address[1]


def expected_request(demo: ModuleType, form: tuple[str, str], payload: str) -> bytes:
    """Connection 0's request (seqid 1) as our encoder writes it."""
    transport, protocol = form
    codec = compact if protocol == "compact" else binary
    msg = codec.encode_message("echo", 1, 1, demo.Echo.echo_args(s=payload))
    return struct.pack(">I", len(msg)) + msg if transport == "framed" else msg


@pytest.mark.parametrize("form", FORMS, ids="-".join)
def test_requests_are_our_encoders_bytes(demo: ModuleType, loadgen: Path,
                                         form: tuple[str, str]) -> None:
    # Payload 200: the string's length needs two varint bytes in compact.
    payload = "".join(chr(ord("a") + i % 26) for i in range(200))
    want = expected_request(demo, form, payload)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(RUN_TIMEOUT)
        proc = subprocess.Popen(
            [str(loadgen), "--port", str(listener.getsockname()[1]), "--connections", "1",
             "--duration", "0.3", "--warmup", "0", "--payload", "200", *form_options(form)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(RUN_TIMEOUT)
                got = recv_exact(conn, len(want))
        finally:
            out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert got.hex() == want.hex()
    # No reply came (the connection was closed): an error, not a call.
    result = json.loads(out.strip().splitlines()[-1])
    assert result["calls_total"] == 0 and result["errors"] >= 1, err


@pytest.mark.parametrize("form", FORMS, ids="-".join)
def test_calls_complete_against_our_server(demo: ModuleType, loadgen: Path,
                                           form: tuple[str, str]) -> None:
    with serve(demo, EchoHandler()) as server:
        for payload in ("16", "300"):
            result = run(loadgen, port_of(server), form, "--payload", payload)
            assert result["calls"] > 0, result
            assert result["errors"] == 0, result["first_error"]
            assert result["connections_alive"] == 4


class Reversing(EchoHandler):
    """Answers with a string as long as the one sent, but not the same."""

    def echo(self, s: str) -> str:
        return s[::-1]


class Failing(EchoHandler):
    def echo(self, s: str) -> str:
        raise RuntimeError("no echo today")


@pytest.mark.parametrize("form", OTHER_FORMS, ids="-".join)
def test_a_different_string_is_an_error(demo: ModuleType, loadgen: Path,
                                        form: tuple[str, str]) -> None:
    with serve(demo, Reversing()) as server:
        result = run(loadgen, port_of(server), form)
    assert result["calls_total"] == 0
    assert result["error_kinds"]["bad_reply"] >= 1
    assert "reply is not the echoed string" in result["first_error"]


@pytest.mark.parametrize("form", OTHER_FORMS, ids="-".join)
def test_an_exception_reply_is_an_error(demo: ModuleType, loadgen: Path,
                                        form: tuple[str, str]) -> None:
    with serve(demo, Failing()) as server:
        result = run(loadgen, port_of(server), form)
    assert result["calls_total"] == 0
    assert result["error_kinds"]["exception"] >= 1
    assert "EXCEPTION reply" in result["first_error"]
    if form[0] == "framed":
        # A whole EXCEPTION frame leaves the connection in step: no reconnects.
        assert result["error_kinds"]["exception"] == result["errors"]
        assert result["connections_alive"] == 4


@pytest.mark.parametrize("option, value", [("--protocol", "json"), ("--transport", "header")])
def test_an_unknown_form_is_refused_with_a_sentence(loadgen: Path, option: str,
                                                    value: str) -> None:
    proc = subprocess.run([str(loadgen), "--port", "9", option, value], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 64
    assert f"{option} must be" in proc.stderr and value in proc.stderr
