"""Socket tier: a connection handed from one socket's owner to another (rpc/handoff.py),
as the multi-process server's parent hands each accepted connection to a child."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest

from nimbus_thrift.rpc.multiprocess.handoff import HandoffListener, hand_over, send_end


@pytest.fixture
def channel() -> Iterator[tuple[socket.socket, HandoffListener]]:
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener = HandoffListener(child, socket.AF_INET, ("127.0.0.1", 9090))
    try:
        yield parent, listener
    finally:
        parent.close()
        listener.close()


@pytest.fixture
def tcp() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.close()


def test_a_handed_connection_is_accepted_with_its_peer_and_works(channel, tcp):
    parent, listener = channel
    client = socket.create_connection(tcp.getsockname())
    accepted, _ = tcp.accept()
    try:
        with pytest.raises(BlockingIOError):
            listener.accept()          # nothing handed yet
        hand_over(parent, accepted)
        accepted.close()               # the sender's copy: the connection lives on
        assert select.select([listener], [], [], 5)[0] == [listener]
        conn, addr = listener.accept()
        with conn:
            assert addr == client.getsockname()
            # What the selector treats it as, and the address the server reports.
            assert listener.family == socket.AF_INET
            assert listener.getsockname() == ("127.0.0.1", 9090)
            client.sendall(b"ping")
            assert conn.recv(4) == b"ping"
            conn.sendall(b"pong")
            assert client.recv(4) == b"pong"
    finally:
        client.close()


def test_end_means_every_connection_before_it_was_taken(channel, tcp):
    parent, listener = channel
    clients = [socket.create_connection(tcp.getsockname()) for _ in range(3)]
    try:
        for _ in clients:
            accepted, _ = tcp.accept()
            hand_over(parent, accepted)
            accepted.close()
        send_end(parent)
        taken = []
        while True:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            taken.append(conn)
        assert len(taken) == 3 and listener.ended.is_set()
        for conn in taken:
            conn.close()
    finally:
        for c in clients:
            c.close()


def test_a_client_gone_before_it_is_taken_is_skipped(channel, tcp):
    parent, listener = channel
    gone = socket.create_connection(tcp.getsockname())
    accepted, _ = tcp.accept()
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    gone.close()                       # reset: getpeername fails on the server side
    hand_over(parent, accepted)
    accepted.close()
    stays = socket.create_connection(tcp.getsockname())
    accepted, _ = tcp.accept()
    hand_over(parent, accepted)
    accepted.close()
    try:
        conn, addr = listener.accept()
        with conn:
            assert addr == stays.getsockname()
    finally:
        stays.close()


def test_the_parent_closing_the_channel_ends_it_without_a_busy_loop(channel):
    parent, listener = channel
    ep = select.epoll()
    try:
        ep.register(listener.fileno(), select.EPOLLIN)
        parent.close()                 # the parent died
        assert ep.poll(5)              # EOF: readable
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert listener.ended.is_set()
        # The channel is released, and with it the registration: no event repeats.
        assert ep.poll(0.05) == []
    finally:
        ep.close()
