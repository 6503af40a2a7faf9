"""Fakes tier: the socket-free parts of rpc/tls.py: naming a client from its
certificate, naming what a plaintext client sent, and the stream's translation of
TLS conditions into what a nonblocking socket raises."""

from __future__ import annotations

import ssl
import struct

import pytest

from nimbus_thrift.rpc.tls import TLSStream, _plaintext_kind, common_name

CERT = {"subject": ((("countryName", "SE"),), (("organizationName", "Team"),),
                    (("commonName", "alice"),)),
        "issuer": ((("commonName", "test-ca"),),)}


def test_common_name_is_the_subjects():
    assert common_name(CERT) == "alice"
    assert common_name({"subject": ((("organizationName", "Team"),),)}) is None
    assert common_name({}) is None


@pytest.mark.parametrize("head,kind", [
    (struct.pack(">i", 29) + b"\x80", "plaintext framed Thrift"),
    (struct.pack(">i", 29) + b"\x82", "plaintext framed Thrift"),
    (b"GET /", "an HTTP request"),
    (b"\x80\x01\x00\x01\x00", "an unframed TBinaryProtocol message"),
    (b"\x82\x21\x00\x04e", "an unframed TCompactProtocol message"),
    (b"\xff\xfe\x00", "not a TLS ClientHello"),
])
def test_what_a_plaintext_client_sent_is_named(head, kind):
    assert kind in _plaintext_kind(head)


class FakeSSL:
    """What ssl.SSLSocket's nonblocking calls do, scripted."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.sent: list[bytes] = []

    def _next(self):
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def recv_into(self, buffer, nbytes=0):
        return self._next()

    def send(self, data):
        self.sent.append(bytes(data))
        return self._next()

    def pending(self):
        return 7


def test_the_stream_speaks_like_a_nonblocking_socket():
    stream = TLSStream(FakeSSL(ssl.SSLWantReadError(), ssl.SSLWantWriteError(),
                               ssl.SSLZeroReturnError(), 5))
    buf = bytearray(10)
    with pytest.raises(BlockingIOError):
        stream.recv_into(buf)
    with pytest.raises(BlockingIOError):
        stream.recv_into(buf)
    assert stream.recv_into(buf) == 0          # close_notify is the end of the stream
    assert stream.recv_into(buf) == 5
    assert stream.pending() == 7


def test_a_tls_error_is_a_connection_error_and_sendmsg_is_one_write():
    fake = FakeSSL(ssl.SSLError(1, "bad record mac"), ssl.SSLWantWriteError(), 6)
    stream = TLSStream(fake)
    with pytest.raises(ConnectionError, match="TLS error"):
        stream.recv_into(bytearray(4))
    with pytest.raises(BlockingIOError):
        stream.sendmsg([b"abc", memoryview(b"def")])
    assert stream.sendmsg([b"abc", memoryview(b"def")]) == 6
    assert fake.sent == [b"abcdef", b"abcdef"]   # the same bytes again after "would block"
