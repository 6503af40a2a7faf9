"""The netlink sock_diag messages of rpc/localpeer.py as bytes: the one exact request
for the client's socket of a loopback connection (asserted as hex), and every way a
reply can fail to name a live owner (an error, a time-wait socket, another socket, a
short read), which must give None rather than a uid."""

from __future__ import annotations

import socket
import struct

import pytest

from nimbus_thrift.rpc.localpeer import (REPLY_MIN_BYTES, DiagKey, PeerLookup, Reply,
                                         build_request, diag_key, parse_reply, user_name)

LO4 = bytes([127, 0, 0, 1])
LO6 = bytes(15) + b"\x01"
KEY4 = DiagKey(socket.AF_INET, LO4, 40000, LO4, 6627)
KEY6 = DiagKey(socket.AF_INET6, LO6, 40000, LO6, 6627)


# --- which connections are looked up, and as what --------------------------------------

def test_the_key_is_the_clients_socket_seen_from_its_side() -> None:
    # src/sport: our peer's address (the client's local end); dst/dport: ours.
    assert diag_key(("127.0.0.1", 40000), ("127.0.0.1", 6627)) == KEY4
    assert diag_key(("127.0.0.2", 5), ("127.0.0.1", 6627)) == DiagKey(
        socket.AF_INET, bytes([127, 0, 0, 2]), 5, LO4, 6627)
    assert diag_key(("::1", 40000, 0, 0), ("::1", 6627, 0, 0)) == KEY6


def test_a_v4_mapped_peer_on_a_dual_stack_listener_is_looked_up_as_ipv4() -> None:
    # The client's socket is an AF_INET one: the kernel files it under IPv4.
    assert diag_key(("::ffff:127.0.0.1", 40000, 0, 0),
                    ("::ffff:127.0.0.1", 6627, 0, 0)) == KEY4


@pytest.mark.parametrize("peer, local", [
    (("10.1.2.3", 40000), ("10.1.2.4", 6627)),              # another machine
    (("10.1.2.3", 40000), ("127.0.0.1", 6627)),
    (("127.0.0.1", 40000), ("10.1.2.4", 6627)),
    (("::ffff:10.1.2.3", 40000, 0, 0), ("::ffff:127.0.0.1", 6627, 0, 0)),
    (("fe80::1%lo", 40000, 0, 1), ("::1", 6627, 0, 0)),
    (("::1", 40000, 0, 0), ("127.0.0.1", 6627)),            # families that differ
    (("not an address", 1), ("127.0.0.1", 6627)),
    ("unix", ("127.0.0.1", 6627)), (("127.0.0.1",), ("127.0.0.1", 6627)),
])
def test_only_loopback_connections_are_looked_up(peer: object, local: object) -> None:
    assert diag_key(peer, local) is None


def test_no_lookup_at_all_for_a_remote_peer() -> None:
    lookup = PeerLookup()
    assert lookup.uid(("192.0.2.1", 40000), ("192.0.2.2", 6627)) is None
    assert lookup._sock is None             # not even a netlink socket was opened


# --- the request --------------------------------------------------------------------------

def test_the_request_is_one_exact_lookup_not_a_dump() -> None:
    assert build_request(KEY4, 7).hex() == (
        "48000000" "1400" "0100" "07000000" "00000000"      # nlmsghdr: 72 bytes,
        # SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST only (no NLM_F_DUMP), seq 7, pid 0
        "02" "06" "00" "00" "ffffffff"                        # AF_INET, TCP, all states
        "9c40" "19e3"                                         # sport 40000, dport 6627
        "7f000001" + "00" * 12 + "7f000001" + "00" * 12 +     # src, dst
        "00000000" "ffffffff" "ffffffff")                     # if, INET_DIAG_NOCOOKIE


def test_the_ipv6_request() -> None:
    data = build_request(KEY6, 0xFFFFFFFF)
    assert len(data) == 72
    assert data[4:16].hex() == "1400" "0100" "ffffffff" "00000000"
    assert data[16:20].hex() == "0a060000"                    # AF_INET6, TCP
    assert data[24:28].hex() == "9c4019e3"
    assert data[28:44] == LO6 and data[44:60] == LO6


# --- replies ------------------------------------------------------------------------------

def reply(*, seq: int = 7, kind: int = 20, family: int = socket.AF_INET, state: int = 1,
          sport: int = 40000, dport: int = 6627, uid: int = 1000, inode: int = 4242,
          attributes: bytes = b"\x05\x00\x08\x00\x00\x00\x00\x00") -> bytes:
    """A SOCK_DIAG_BY_FAMILY reply as the kernel writes it (inet_sk_diag_fill), with
    an attribute after the message (INET_DIAG_SHUTDOWN, as the kernel always adds)."""
    body = (struct.pack("=BBBB", family, state, 0, 0)
            + struct.pack(">HH16s16s", sport, dport, LO4.ljust(16, b"\0"),
                          LO4.ljust(16, b"\0"))
            + struct.pack("=III", 0, 0x1234, 0x5678)
            + struct.pack("=IIIII", 0, 0, 0, uid, inode) + attributes)
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 1) + body


def test_a_live_socket_gives_its_owners_uid() -> None:
    assert parse_reply(reply(), KEY4) == Reply(7, 1000)
    assert parse_reply(reply(uid=0), KEY4) == Reply(7, 0)
    assert parse_reply(reply(attributes=b""), KEY4) == Reply(7, 1000)
    assert len(reply(attributes=b"")) == REPLY_MIN_BYTES == 88
    # Still open in its process while closing (FIN_WAIT1, CLOSE_WAIT, LAST_ACK):
    # the uid is its creator's.
    for state in (4, 8, 9):
        assert parse_reply(reply(state=state), KEY4) == Reply(7, 1000)


def test_an_ipv6_client_socket_may_carry_an_ipv4_connection() -> None:
    # A dual-stack client (Java's sockets) connected to ::ffff:127.0.0.1: filed under
    # IPv4, where the request finds it, and reported as the AF_INET6 socket it is.
    assert parse_reply(reply(family=socket.AF_INET6), KEY4) == Reply(7, 1000)
    # Not the other way round: an IPv6 connection's client is an IPv6 socket.
    assert parse_reply(reply(family=socket.AF_INET), KEY6) == Reply(7, None)


def test_a_time_wait_socket_is_nobody_not_root() -> None:
    # A client that closed before the accept: a time-wait mini-socket, reported with
    # uid 0 and inode 0 (and state FIN_WAIT2 or TIME_WAIT). Taking it would make any
    # local account root by closing fast.
    assert parse_reply(reply(state=5, uid=0, inode=0), KEY4) == Reply(7, None)
    assert parse_reply(reply(state=6, uid=0, inode=0), KEY4) == Reply(7, None)
    assert parse_reply(reply(state=6, uid=1000, inode=7), KEY4) == Reply(7, None)


@pytest.mark.parametrize("changes", [
    {"state": 10},                          # a listener on the peer's address
    {"state": 12},                          # a request socket
    {"sport": 40001}, {"dport": 1},         # another socket
    {"kind": 2},                            # NLMSG_ERROR
    {"kind": 3},                            # NLMSG_DONE
])
def test_a_reply_about_anything_else_names_nobody(changes: dict[str, int]) -> None:
    assert parse_reply(reply(**changes), KEY4) == Reply(7, None)


def test_an_error_reply() -> None:
    error = struct.pack("=IHHII", 36, 2, 0, 9, 1) + struct.pack("=i", -2) + \
        build_request(KEY4, 9)[:16]
    assert parse_reply(error, KEY4) == Reply(9, None)


@pytest.mark.parametrize("cut", [0, 3, 16, 40, REPLY_MIN_BYTES - 1])
def test_a_short_reply_names_nobody(cut: int) -> None:
    assert parse_reply(reply(attributes=b"")[:cut], KEY4).uid is None


def test_a_reply_longer_than_what_was_read_names_nobody() -> None:
    data = reply()
    assert parse_reply(data[:-4], KEY4) == Reply(7, None)


def test_user_names() -> None:
    assert user_name(0) == "root"
    assert user_name(2_000_000_000) == "2000000000"       # no account: the number


# --- the lookup's socket, faked ----------------------------------------------------------

class FakeNetlink:
    """What PeerLookup's socket is asked: the requests sent, and replies queued."""

    def __init__(self, *replies: bytes | type[Exception]) -> None:
        self.replies = list(replies)
        self.sent: list[bytes] = []
        self.closed = False

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, size: int) -> bytes:
        if not self.replies:
            raise BlockingIOError
        reply = self.replies.pop(0)
        if isinstance(reply, type):
            raise reply()
        return reply

    def close(self) -> None:
        self.closed = True


def faked(monkeypatch: pytest.MonkeyPatch, fake: FakeNetlink) -> PeerLookup:
    lookup = PeerLookup(timeout=0.01)
    monkeypatch.setattr(lookup, "_socket", lambda: fake)
    monkeypatch.setattr(lookup, "close", lambda: fake.close())
    return lookup


PEER, LOCAL = ("127.0.0.1", 40000), ("127.0.0.1", 6627)


def test_one_request_per_lookup_with_a_new_sequence_number(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNetlink(reply(seq=1), reply(seq=2, uid=65534))
    lookup = faked(monkeypatch, fake)
    assert lookup.uid(PEER, LOCAL) == 1000
    assert lookup.user(PEER, LOCAL) == user_name(65534)
    assert fake.sent == [build_request(KEY4, 1), build_request(KEY4, 2)]
    assert not fake.closed


def test_a_late_reply_to_an_earlier_lookup_is_skipped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The reply to lookup 1 (which timed out) arrives during lookup 2: not its answer.
    fake = FakeNetlink(reply(seq=1, uid=0), reply(seq=2, uid=1000))
    lookup = faked(monkeypatch, fake)
    lookup._seq = 1
    assert lookup.uid(PEER, LOCAL) == 1000


def test_no_reply_in_time_is_nobody_and_a_fresh_socket_next_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNetlink()
    lookup = faked(monkeypatch, fake)
    monkeypatch.setattr("nimbus_thrift.rpc.localpeer.select.select",
                        lambda r, w, x, timeout: ([], [], []))
    assert lookup.uid(PEER, LOCAL) is None
    assert fake.closed


def test_a_failing_socket_is_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNetlink(ConnectionRefusedError)
    lookup = faked(monkeypatch, fake)
    assert lookup.uid(PEER, LOCAL) is None and fake.closed
