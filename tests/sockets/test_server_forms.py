"""Real sockets: one port serves every form of client (issue 17): framed and unframed,
binary and compact, THeader; each connection is answered in its own form, unframed
messages may arrive a byte at a time or pipelined, oversized and malformed ones are
refused, restricted servers close other forms with one log line, detection works on
the bytes inside TLS, and the read budget is whole again afterwards."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from types import ModuleType
from typing import Any

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.codec import binary, compact, header
from support.certs import make_pki
from support.rawthrift import connect, recv_exact, wait_closed, wait_for


def serve(demo: ModuleType, handler: Any = None, **options: Any) -> nimbus_thrift.Server:
    server = nimbus_thrift.make_server(demo.Echo, handler or EchoHandler(), port=0,
                                       **{"worker_threads": 4, **options})
    server.start()
    return server


def msg(demo: ModuleType, protocol: str, method: str = "echo", seqid: int = 1,
        mtype: int = 1, **args: Any) -> bytes:
    codec = compact if protocol == "compact" else binary
    return codec.encode_message(method, mtype, seqid, getattr(demo.Echo, method + "_args")(**args))


_PENDING: dict[socket.socket, bytes] = {}


def read_message(sock: socket.socket, protocol: str) -> bytes:
    """One unframed message read off ``sock`` (found with the server's own scanner);
    bytes of the next one stay for the next call."""
    from nimbus_thrift.rpc.codec.unframed import Scanner
    scan = Scanner(protocol, 1 << 24)
    data = _PENDING.pop(sock, b"")
    while True:
        end = scan.feed(data, len(data)) if data else None
        if end is not None:
            if end < len(data):
                _PENDING[sock] = data[end:]
            return data[:end]
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk


def reply_of(demo: ModuleType, protocol: str, data: bytes, method: str = "echo") -> tuple:
    codec = compact if protocol == "compact" else binary
    head = codec.read_message_header(data)
    from thriftpy2.thrift import TApplicationException
    cls = TApplicationException if head.type == binary.EXCEPTION \
        else getattr(demo.Echo, method + "_result")
    return head.name, head.type, head.seqid, codec.decode_struct(cls, data, head.end)[0]


def read_framed(sock: socket.socket) -> bytes:
    size = struct.unpack(">I", recv_exact(sock, 4))[0]
    return recv_exact(sock, size)


def events(entries: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in entries if e["event"] == name]


@pytest.mark.parametrize("protocol", ["binary", "compact"])
def test_unframed_clients_byte_by_byte_and_pipelined(demo: ModuleType, protocol: str) -> None:
    with serve(demo) as server:
        with connect(server.address) as sock:
            # One byte per send, with the socket flushed between (TCP_NODELAY).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for byte in msg(demo, protocol, seqid=5, s="drip"):
                sock.send(bytes([byte]))
            assert reply_of(demo, protocol, read_message(sock, protocol))[2:] == \
                (5, demo.Echo.echo_result(success="drip"))
            # Three pipelined in one write: answered in order, one in flight at a time.
            sock.sendall(b"".join(msg(demo, protocol, seqid=i, s=str(i)) for i in (6, 7, 8)))
            for i in (6, 7, 8):
                name, mtype, seqid, body = reply_of(demo, protocol, read_message(sock, protocol))
                assert (seqid, body.success) == (i, str(i))
            # A oneway call then a call: no reply for the first.
            sock.sendall(msg(demo, protocol, "notify", 9, mtype=4, event="e")
                         + msg(demo, protocol, "events", 10))
            name, mtype, seqid, body = reply_of(demo, protocol, read_message(sock, protocol),
                                                "events")
            assert (name, seqid, body.success) == ("events", 10, ["e"])
        wait_for(lambda: server.metrics().connections_open == 0, what="close")
        assert server.metrics().bytes_reserved == 0


def test_framed_compact_and_theader_on_the_same_port(demo: ModuleType) -> None:
    class Headers(EchoHandler):
        def echo(self, s: str) -> str:
            request = nimbus_thrift.current_request()
            assert request is not None
            return s + "|" + ",".join(f"{k.decode()}={v.decode()}"
                                      for k, v in sorted(request.headers.items()))

    with serve(demo, Headers()) as server:
        with connect(server.address) as fc, connect(server.address) as hc:
            body = msg(demo, "compact", seqid=3, s="fc")
            fc.sendall(struct.pack(">I", len(body)) + body)
            assert reply_of(demo, "compact", read_framed(fc))[3].success == "fc|"
            frame = header.encode(msg(demo, "compact", seqid=4, s="hc"), 2, 1, 4,
                                  (header.TRANSFORM_ZLIB,), {b"user": b"ann"})
            hc.sendall(frame)
            parsed, _ = header.parse(read_framed(hc), 1 << 20)
            assert (parsed.seqid, parsed.flags, parsed.protocol_id, parsed.transforms) == \
                (4, 1, 2, (1,))
            assert reply_of(demo, "compact", parsed.payload)[3].success == "hc|user=ann"
        wait_for(lambda: server.metrics().connections_open == 0, what="close")
        assert server.metrics().bytes_reserved == 0


def test_unframed_message_over_the_limit_is_refused_in_its_form(demo: ModuleType,
                                                                 logs) -> None:
    with serve(demo, max_frame_size=4096) as server:
        with connect(server.address) as sock:
            sock.sendall(msg(demo, "compact", seqid=12, s="x" * 9000)[:6000])
            name, mtype, seqid, exc = reply_of(demo, "compact", read_message(sock, "compact"))
            assert (name, mtype, seqid, exc.type) == ("echo", binary.EXCEPTION, 12, 7)
            assert "4096" in exc.message
            assert wait_closed(sock) == b""
        with connect(server.address) as sock:           # others carry on
            sock.sendall(msg(demo, "binary", s="ok"))
            assert reply_of(demo, "binary", read_message(sock, "binary"))[3].success == "ok"
        wait_for(lambda: server.metrics().connections_open == 0, what="close")
        assert server.metrics().bytes_reserved == 0
        assert server.metrics().bytes_reserved_peak < 20_000
    assert len(events(logs, "unframed_message_refused")) == 1


def test_restricted_server_closes_other_forms_with_one_log_line(demo: ModuleType,
                                                                logs) -> None:
    with serve(demo, transports=("framed",), protocols=("binary",)) as server:
        with connect(server.address) as sock:
            sock.sendall(msg(demo, "compact", s="no"))
            assert wait_closed(sock) == b""
        with connect(server.address) as sock:
            body = msg(demo, "binary", s="yes")
            sock.sendall(struct.pack(">I", len(body)) + body)
            assert reply_of(demo, "binary", read_framed(sock))[3].success == "yes"
        wait_for(lambda: server.metrics().connections_open == 0, what="close")
        assert server.metrics().bytes_reserved == 0
    lines = events(logs, "client_form_not_accepted")
    assert len(lines) == 1 and lines[0]["detected"] == "unframed compact"


def test_invalid_form_options_are_refused(demo: ModuleType) -> None:
    from nimbus_thrift.rpc.options import OptionError
    with pytest.raises(OptionError, match="transports must be"):
        nimbus_thrift.make_server(demo.Echo, EchoHandler(), transports=("http",))


def test_unframed_trickle_is_held_to_the_frame_read_timeout(demo: ModuleType) -> None:
    with serve(demo, frame_read_timeout=0.3, first_request_timeout=None) as server:
        with connect(server.address) as sock:
            sock.sendall(msg(demo, "binary", s="slow")[:20])     # never finished
            started = time.monotonic()
            assert wait_closed(sock, timeout=10) == b""
            assert time.monotonic() - started < 8
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="release")


def test_detection_reads_the_bytes_inside_tls(demo: ModuleType, tmp_path) -> None:
    certs = make_pki(tmp_path, clients=("alice",))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs.server.cert, certs.server.key)
    with serve(demo, ssl_context=ctx) as server:
        client_ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
        raw = socket.create_connection(server.address, timeout=5)
        with client_ctx.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(msg(demo, "compact", seqid=2, s="secret"))
            assert reply_of(demo, "compact", read_message(sock, "compact"))[3].success == \
                "secret"
