"""Fakes tier: the read budget's room for small frames and its per-group share (issue 27:
five addresses' nearly complete 1 MiB frames filled the budget and a good client's 1 KB
call waited a median 9 s). Connections driven with bytes the way the selector drives
them (rpc/connection.py, rpc/memory.py, peers.read_group); no sockets."""

from __future__ import annotations

import pytest

from nimbus_thrift.rpc.connection import Connection, Event, State
from nimbus_thrift.rpc.deadlines import ParkTimeoutError
from nimbus_thrift.rpc.errors import PeerShareError
from nimbus_thrift.rpc.memory import SMALL_FRAME, SMALL_RESERVE_SHARE, MemoryBudget
from nimbus_thrift.rpc.peers import read_group

from support.connection_bytes import assert_accounted, feed_frame_body, length

MIB = 1 << 20
#: A budget of 8 MiB: 1 MiB reserved for small frames, 7 MiB of large room.
CAPACITY = 8 * MIB
BIG = MIB - 16


def conn_of(budget: MemoryBudget, host: str, port: int = 1) -> Connection:
    conn = Connection(f"{host}:{port}", budget, max_frame_size=16 * MIB)
    conn.host = host
    return conn


def nearly_complete(budget: MemoryBudget, host: str, port: int) -> Connection:
    """An attacker's frame: 1 MiB declared, all but 16 bytes sent, then nothing."""
    conn = conn_of(budget, host, port)
    assert conn.received(length(MIB)) is Event.FRAME_ADMITTED
    feed_frame_body(conn, b"a" * BIG, chunk=SMALL_FRAME)
    return conn


def good_call(conn: Connection, size: int = 1000) -> None:
    """A 1 KB call the way the selector reads it once anything is parked: the header
    read takes the length prefix only (free_now() is 0), the body goes to frame_view."""
    limit = conn.header_read_limit()
    prefix_and_body = length(size) + b"g" * size
    event = conn.received(prefix_and_body[:limit])
    if event is Event.FRAME_ADMITTED:
        assert feed_frame_body(conn, prefix_and_body[limit:], chunk=SMALL_FRAME)[-1]
    assert conn.state is State.PROCESSING


def test_a_small_call_is_read_while_large_frames_fill_their_room_and_wait() -> None:
    budget = MemoryBudget(CAPACITY, peer_share=CAPACITY)
    assert budget.small_reserve == CAPACITY // SMALL_RESERVE_SHARE
    attackers = [nearly_complete(budget, f"10.0.{i}.1", i) for i in range(7)]
    assert budget.large == budget.reserved == 7 * MIB     # each buffer grown to 1 MiB
    # The next large frame cannot grow into the reserve: it parks.
    waiting = conn_of(budget, "10.0.9.1")
    assert waiting.received(length(MIB)) is Event.FRAME_ADMITTED
    assert waiting.frame_view() is None and waiting.state is State.AWAITING_MEMORY
    assert budget.parked_large == 1 and budget.free_now() == 0
    # A good client's call does not queue behind it: it is read from the reserve.
    good = conn_of(budget, "192.0.2.7")
    good_call(good)
    assert budget.reserved - budget.large == 1000
    assert_accounted(good, waiting, *attackers)
    good.answered()
    assert budget.reserved == budget.large


def test_small_frames_keep_to_the_reserve_while_a_large_one_waits_then_it_goes_first(
) -> None:
    """No starvation of a parked large frame: while it waits, small frames take no more
    than the reserve (the next one parks, in the small queue); when the large room
    frees, the large frame is admitted, and the small one once the reserve has room."""
    budget = MemoryBudget(CAPACITY, peer_share=CAPACITY)
    attackers = [nearly_complete(budget, f"10.0.{i}.1", i) for i in range(7)]
    waiting = conn_of(budget, "10.0.9.1")
    assert waiting.received(length(MIB)) is Event.FRAME_ADMITTED
    assert waiting.frame_view() is None
    smalls = []
    for i in range(16):                      # 16 x 64 KiB fill the 1 MiB reserve
        conn = conn_of(budget, f"192.0.{i}.7")
        good_call(conn, SMALL_FRAME)
        smalls.append(conn)
    late = conn_of(budget, "198.51.100.7")
    assert late.received(length(SMALL_FRAME)) is Event.FRAME_ADMITTED
    assert late.frame_view() is None and budget.parked == 2
    attackers[0].close()                     # the large room has 1 MiB free again
    assert budget.admit() == [waiting]
    assert waiting.state is State.READING_FRAME and budget.parked == 1
    smalls[0].answered()
    assert budget.admit() == [late] and late.state is State.READING_FRAME
    assert_accounted(late, waiting, *attackers[1:], *smalls[1:])


def test_every_reserved_byte_parked_admits_the_oldest_small_frame_first() -> None:
    """The overcommit rule holds with two queues: when no reserved byte can be freed
    by anyone but a parked frame, a head goes on over the budget, the small one first
    (it is done soonest); then nothing more until something is released."""
    budget = MemoryBudget(200_000, peer_share=200_000, small_reserve=100_000)
    large = [conn_of(budget, f"10.0.{i}.1") for i in range(2)]
    for conn in large:
        assert conn.received(length(150_000) + b"x" * 50_000) is Event.FRAME_ADMITTED
    assert budget.large == 100_000 == budget.large_room
    small = [conn_of(budget, f"10.1.{i}.1") for i in range(2)]
    for conn in small:
        assert conn.received(length(60_000) + b"s" * 50_000) is Event.FRAME_ADMITTED
    for conn in (*large, *small):
        assert conn.frame_view() is None
    assert budget.parked == 4 and budget.parked_large == 2
    assert budget.reserved == budget.capacity
    assert budget.admit() == [small[0]]
    assert budget.overcommits == 1 and budget.reserved == 210_000
    assert budget.admit() == []
    feed_frame_body(small[0], b"s" * 10_000, chunk=SMALL_FRAME)
    small[0].answered()
    assert budget.admit() == [small[1]]
    assert_accounted(small[1], *large)


def test_large_bytes_come_back_on_every_way_a_frame_ends() -> None:
    """What the budget counts as large returns with the frame: answered, done, closed
    mid-frame, closed while parked, refused after waiting (a test per path)."""
    budget = MemoryBudget(CAPACITY, peer_share=CAPACITY)

    def large_frame(port: int) -> Connection:
        conn = conn_of(budget, "10.0.0.1", port)
        assert conn.received(length(2 * SMALL_FRAME) + b"x" * 100) is Event.FRAME_ADMITTED
        return conn

    done = large_frame(1)
    feed_frame_body(done, b"y" * (2 * SMALL_FRAME - 100), chunk=SMALL_FRAME)
    assert done.state is State.PROCESSING and done.large_held == 2 * SMALL_FRAME
    assert budget.large == 2 * SMALL_FRAME
    done.answered()
    assert budget.large == 0 and budget.reserved == 0
    handled = large_frame(2)
    feed_frame_body(handled, b"y" * (2 * SMALL_FRAME - 100), chunk=SMALL_FRAME)
    handled.request_done()
    assert budget.large == 0 and handled.large_held == 0
    closed = large_frame(3)
    assert budget.large == 100
    closed.close()
    assert budget.large == 0 and budget.reserved == 0
    # Parked (its growth refused), then closed; and parked, then refused.
    tight = MemoryBudget(4 * SMALL_FRAME, peer_share=4 * SMALL_FRAME, small_reserve=0)
    filled = 3 * SMALL_FRAME + 10_000
    filler = conn_of(tight, "10.0.1.1")
    assert filler.received(length(filled)) is Event.FRAME_ADMITTED
    feed_frame_body(filler, b"f" * (filled - 1), chunk=SMALL_FRAME)
    assert tight.large == filled
    for ending in ("close", "refuse"):
        parked = conn_of(tight, "10.0.2.1")
        assert parked.received(length(2 * SMALL_FRAME) + b"p" * 10) is Event.FRAME_ADMITTED
        assert parked.frame_view() is None and tight.parked_large == 1
        assert tight.large == filled + 10
        if ending == "close":
            parked.close()
        else:
            parked.refuse_parked(ParkTimeoutError(2 * SMALL_FRAME, 10, 1.0, tight.capacity))
        assert tight.large == filled and tight.parked == 0
    filler.close()
    assert tight.large == 0 and tight.reserved == 0


def test_a_parked_large_frame_admitted_counts_as_large_until_done() -> None:
    budget = MemoryBudget(4 * SMALL_FRAME, peer_share=8 * SMALL_FRAME, small_reserve=0)
    first, second = conn_of(budget, "10.0.0.1"), conn_of(budget, "10.0.1.1")
    for conn in (first, second):
        assert conn.received(length(3 * SMALL_FRAME)) is Event.FRAME_ADMITTED
        feed_frame_body(conn, b"f" * 2 * SMALL_FRAME, chunk=SMALL_FRAME)
    assert budget.large == budget.capacity
    assert second.frame_view() is None and first.frame_view() is None
    # Both wait on each other: the oldest goes on over the budget.
    assert budget.admit() == [second]
    assert second.large_held == 3 * SMALL_FRAME
    assert budget.large == 5 * SMALL_FRAME and budget.overcommits == 1
    second.close()
    first.close()
    assert budget.large == 0 and budget.reserved == 0


@pytest.mark.parametrize("host, group", [
    ("127.0.0.2", "127.0.0.0/24"),
    ("127.0.0.6", "127.0.0.0/24"),
    ("192.0.2.200", "192.0.2.0/24"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2::9", "2001:db8:1:2::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("::ffff:198.51.100.9", "198.51.100.0/24"),
    ("unix:alice", "unix:alice"),
    ("local:alice", "local:alice"),
    ("not an address", "not an address"),
])
def test_read_groups_are_what_one_party_can_hold(host: str, group: str) -> None:
    assert read_group(host) == group


def test_addresses_of_one_group_share_one_peer_share_and_the_group_is_forgotten() -> None:
    """Large frames count per read group: five loopback addresses get one share, not
    five; small frames per address."""
    budget = MemoryBudget(CAPACITY, peer_share=2 * MIB)
    a = conn_of(budget, "127.0.0.2")
    b = conn_of(budget, "127.0.0.6")
    elsewhere = conn_of(budget, "127.0.1.2")
    assert a.received(length(MIB) + b"a") is Event.FRAME_ADMITTED
    assert b.received(length(MIB) + b"b") is Event.FRAME_ADMITTED
    assert a.group is b.group and a.group.declared == 2 * MIB
    third = conn_of(budget, "127.0.0.5")
    assert third.received(length(MIB) + b"c") is Event.REFUSED
    assert isinstance(third.refusal, PeerShareError) and third.refusal.in_use == 2 * MIB
    # A small call from the same /24 is counted in its own address's share, not the
    # group's: a neighbour's large frames never refuse it.
    good = conn_of(budget, "127.0.0.1")
    good_call(good)
    assert good.share.declared == 1000 and a.group.declared == 2 * MIB
    good.answered()
    good.close()
    # Another /24 has a share of its own.
    assert elsewhere.received(length(MIB) + b"e") is Event.FRAME_ADMITTED
    for conn in (a, b, third):
        conn.close()
    assert "127.0.0.0/24" not in budget._groups and "127.0.1.0/24" in budget._groups
    elsewhere.close()
    assert budget._groups == {} and budget.reserved == 0 and budget.large == 0
