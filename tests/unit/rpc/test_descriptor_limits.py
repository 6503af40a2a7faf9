"""Connections fitted to the open-files limit (options.ServerOptions.within_open_files),
the choice of the idle connection closed to make room (peers.eviction_choice), and the
CLI's raising of the soft limit (tuning.raise_open_files_limit)."""

from __future__ import annotations

import resource
from typing import Any

import pytest

from nimbus_thrift import tuning
from nimbus_thrift.rpc.connection import Connection
from nimbus_thrift.rpc.memory import MemoryBudget
from nimbus_thrift.rpc.options import DEFAULT_RESERVED_DESCRIPTORS, OptionError, ServerOptions
from nimbus_thrift.rpc.peers import PeerShare, eviction_choice, idle, oldest_idle
from nimbus_thrift.rpc.states import State

# ------------------------------------------------------------------ clamping arithmetic


def test_the_usual_soft_limit_clamps_the_default_connections_and_their_share() -> None:
    o = ServerOptions().within_open_files(1024)
    assert o.max_connections == 1024 - DEFAULT_RESERVED_DESCRIPTORS == 960
    # The default share follows the clamped total: a quarter, not the 1,024 of 4,096.
    assert o.per_peer_limit == 240


def test_a_limit_with_room_for_every_connection_changes_nothing() -> None:
    base = ServerOptions(max_connections=100, reserved_descriptors=10)
    assert base.within_open_files(110) is base
    assert base.within_open_files(None) is base       # unlimited
    assert base.within_open_files(109).max_connections == 99


def test_an_explicit_share_shrinks_in_proportion() -> None:
    base = ServerOptions(max_connections=4096, max_connections_per_peer=1024,
                         reserved_descriptors=512)
    o = base.within_open_files(1024)
    assert o.max_connections == 512
    assert o.max_connections_per_peer == 128 == o.per_peer_limit
    # Never to nothing: one connection per address is still a share.
    tiny = ServerOptions(max_connections=4096, max_connections_per_peer=2,
                         reserved_descriptors=0).within_open_files(100)
    assert tiny.max_connections_per_peer == 1


def test_the_reserve_is_validated_and_may_be_zero() -> None:
    assert ServerOptions(reserved_descriptors=0).within_open_files(50).max_connections == 50
    for bad in (-1, 1.5, True, "64"):
        with pytest.raises(OptionError, match="reserved_descriptors must be"):
            ServerOptions(reserved_descriptors=bad)  # type: ignore[arg-type]


def test_a_limit_below_the_reserve_is_a_sentence_not_a_zero() -> None:
    with pytest.raises(OptionError, match=r"open-files limit of 64 leaves no descriptor.*"
                                          r"ulimit -n"):
        ServerOptions().within_open_files(64)


# ------------------------------------------------------------------ the eviction choice


class Ch:
    """What peers.py reads of a channel: its connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __repr__(self) -> str:
        return f"<Ch {self.conn.peer} {self.conn.state.name} {self.conn.last_activity}>"


def channel(peer: str, last: float, state: State = State.READING_HEADER,
            hdr: bytes = b"", called: bool = False) -> Ch:
    conn = Connection(peer, MemoryBudget(1 << 20), 1 << 16, now=last)
    conn.state = state
    conn.hdr = hdr
    conn.fresh = not called
    return Ch(conn)


def share_of(*channels: Ch) -> PeerShare:
    share = PeerShare()
    for fd, ch in enumerate(channels):
        share.channels[fd] = ch
    share.connections = len(channels)
    return share


def test_idle_means_nothing_of_a_call_would_be_lost() -> None:
    assert idle(channel("a", 0).conn)
    assert idle(channel("a", 0, State.HANDSHAKING).conn)
    assert idle(channel("a", 0, State.LINGERING).conn)
    assert not idle(channel("a", 0, hdr=b"\0\0").conn)        # a length half read
    for busy in (State.READING_FRAME, State.AWAITING_MEMORY, State.PROCESSING,
                 State.WRITING):
        assert not idle(channel("a", 0, busy).conn)


def test_the_oldest_idle_connection_goes_not_the_oldest_opened() -> None:
    calling = channel("a", 1.0, State.PROCESSING)
    quiet = channel("a", 5.0)
    active = channel("a", 9.0)       # opened first, but called a moment ago
    assert oldest_idle([active, calling, quiet]) is quiet
    assert oldest_idle([calling]) is None
    assert oldest_idle([]) is None


def test_a_connection_that_never_called_goes_before_one_that_has() -> None:
    client = channel("a", 1.0, called=True)          # quiet longest, but it has called
    flood = [channel("a", 5.0 + i) for i in range(3)]
    assert oldest_idle([client] + flood) is flood[0]
    # With none fresh left, the one quiet longest.
    later = channel("a", 9.0, called=True)
    assert oldest_idle([later, client]) is client


def test_room_is_taken_from_the_address_holding_the_most() -> None:
    light = channel("good", 0.0)             # the oldest idle connection overall
    heavy = [channel("attacker", 3.0 + i) for i in range(5)]
    per_peer = {"good": share_of(light), "attacker": share_of(*heavy)}
    assert eviction_choice(per_peer) is heavy[0]


def test_with_the_busiest_address_all_in_calls_the_oldest_idle_anywhere_goes() -> None:
    heavy = [channel("busy", 1.0, State.PROCESSING) for _ in range(3)]
    a, b = channel("a", 7.0), channel("b", 4.0)
    per_peer = {"busy": share_of(*heavy), "a": share_of(a), "b": share_of(b)}
    assert eviction_choice(per_peer) is b
    assert eviction_choice({"busy": share_of(*heavy)}) is None
    assert eviction_choice({}) is None


# ------------------------------------------------------------------ the CLI's tuning


@pytest.fixture
def restore_nofile() -> Any:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_soft_limit_is_raised_to_the_hard_limit(restore_nofile: Any) -> None:
    soft, hard = restore_nofile
    if hard == resource.RLIM_INFINITY or hard < 2:
        pytest.skip("needs a finite hard limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard // 2, hard))
    assert tuning.raise_open_files_limit() == (hard // 2, hard)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    # Already there: nothing to do.
    assert tuning.raise_open_files_limit() == (hard, hard)
