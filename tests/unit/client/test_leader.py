"""A client of several seeds finding and following the leader (client/leader.py's
SeedRouter) over fake transports, a fake clock and a fake sleep: which daemon each call
reaches, in what order, and how long it waits. The same over real sockets is
tests/sockets/test_client_seeds.py."""

from __future__ import annotations

from typing import Any

import pytest

from nimbus_thrift.client.defaults import STATE_CHANGE_METHODS
from nimbus_thrift.client.errors import (ConnectionLost, LeaderChanged, NimbusUnavailable,
                                         NoLeader, NoNimbusAnswered, ServerError)
from nimbus_thrift.client.leader import LEADER_BACKOFF, SeedRouter
from nimbus_thrift.client.seeds import Address, seed_text
from nimbus_thrift.idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE, nimbus_idl
from nimbus_thrift.rpc.errors import AppErrorCode

idl = nimbus_idl()
A, B, C = ("a", 1), ("b", 2), ("c", 3)


class Cluster:
    """Daemons at addresses: which are up, which leads (None: an election), what each
    call reached, the fake time."""

    def __init__(self, up: set[Address], leader: Address | None) -> None:
        self.up = set(up)
        self.leader = leader
        self.calls: list[tuple[Address, str]] = []
        self.connects: list[Address] = []
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_call: Any = None          # on_call(address, method), before answering
        self.leaderless_answer = "raise"  # getLeader while no leader: raise, or a summary

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeTransport:
    def __init__(self, cluster: Cluster, address: Address) -> None:
        self.cluster = cluster
        self.address = address
        self.connected = False

    def ensure_connected(self) -> None:
        if self.connected and self.address in self.cluster.up:
            return
        self.connected = False
        self.cluster.connects.append(self.address)
        if self.address not in self.cluster.up:
            raise NimbusUnavailable(*self.address, "connection refused", 1, 0.0)
        self.connected = True

    def discard(self) -> None:
        self.connected = False

    def exchange(self, service: Any, method: str, seqid: int, frame: bytes) -> Any:
        cluster = self.cluster
        cluster.calls.append((self.address, method))
        if cluster.on_call is not None:
            cluster.on_call(self.address, method)
        if self.address not in cluster.up:
            self.connected = False
            raise ConnectionLost(*self.address, method, "reset")
        leader = cluster.leader
        if method == "getLeader":
            if leader is None:
                if cluster.leaderless_answer == "raise":
                    raise ServerError(*self.address, method, AppErrorCode.INTERNAL_ERROR,
                                      NO_LEADER_MESSAGE)
                return idl.NimbusSummary(host=self.address[0], port=self.address[1],
                                         isLeader=False)
            return idl.NimbusSummary(host=leader[0], port=leader[1], isLeader=True)
        if (method in STATE_CHANGE_METHODS or method.startswith("set")) \
                and self.address != leader:
            message = NO_LEADER_MESSAGE if leader is None else \
                NOT_LEADER_MESSAGE.format(leader=seed_text(leader))
            raise ServerError(*self.address, method, AppErrorCode.INTERNAL_ERROR, message)
        return f"{method}@{self.address[0]}"


def router(cluster: Cluster, seeds: list[Address], leader_wait: float = 5.0) -> SeedRouter:
    return SeedRouter(seeds, lambda address: FakeTransport(cluster, address),
                      service=None, encode=lambda method: (1, b""), rounds=3,
                      round_delays=[0.1, 0.2], leader_wait=leader_wait,
                      sleep=cluster.sleep, clock=lambda: cluster.now)


def call(r: SeedRouter, method: str) -> Any:
    return r.call(method, 1, b"")


# --------------------------------------------------------------------------- reads


def test_reads_go_to_the_first_seed_that_answers_and_stay_there():
    cluster = Cluster(up={B, C}, leader=C)
    r = router(cluster, [A, B, C])
    assert call(r, "getClusterInfo") == "getClusterInfo@b"
    assert call(r, "getTopologyInfo") == "getTopologyInfo@b"
    assert cluster.connects == [A, B]       # the dead seed was tried once, in one round
    assert cluster.calls == [(B, "getClusterInfo"), (B, "getTopologyInfo")]
    assert cluster.sleeps == []


def test_no_seed_answering_names_every_seed_after_the_rounds():
    cluster = Cluster(up=set(), leader=None)
    r = router(cluster, [A, B])
    with pytest.raises(NoNimbusAnswered) as info:
        call(r, "getClusterInfo")
    assert cluster.connects == [A, B] * 3
    assert cluster.sleeps == [0.1, 0.2]
    assert str(info.value) == ("no nimbus answered among the seeds a:1, b:2 (after 3 "
                               "rounds over 0.3 s): a:1: connection refused; b:2: "
                               "connection refused")
    assert isinstance(info.value, NimbusUnavailable)   # what callers caught before


def test_a_read_whose_seed_dies_is_sent_once_more_to_the_next():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])
    cluster.on_call = lambda address, method: cluster.up.discard(A)
    assert call(r, "getClusterInfo") == "getClusterInfo@b"
    assert cluster.calls == [(A, "getClusterInfo"), (B, "getClusterInfo")]


# --------------------------------------------------------------------------- leader


def test_a_state_change_asks_the_seeds_for_the_leader_once_then_goes_there():
    cluster = Cluster(up={A, B, C}, leader=C)
    r = router(cluster, [A, B, C])
    assert call(r, "killTopology") == "killTopology@c"
    assert call(r, "activate") == "activate@c"
    assert cluster.calls == [(A, "getLeader"), (C, "killTopology"), (C, "activate")]


@pytest.mark.parametrize("answer", ["raise", "summary"])
def test_a_seed_that_knows_no_leader_does_not_end_the_search(answer):
    # Storm's NimbusClient gave up at the first seed without a leader.
    cluster = Cluster(up={A, B, C}, leader=None)
    cluster.leaderless_answer = answer
    r = router(cluster, [A, B, C])
    # A and B lag behind the election; C knows.
    cluster.on_call = lambda address, method: (
        setattr(cluster, "leader", C) if address == C and method == "getLeader" else None)
    assert call(r, "killTopology") == "killTopology@c"
    assert cluster.calls == [(A, "getLeader"), (B, "getLeader"), (C, "getLeader"),
                             (C, "killTopology")]


def test_a_dead_seed_and_a_dead_named_leader_are_skipped():
    cluster = Cluster(up={B, C}, leader=C)
    r = router(cluster, [A, B, C])
    assert call(r, "killTopology") == "killTopology@c"
    assert cluster.calls == [(B, "getLeader"), (C, "killTopology")]


def test_a_leader_that_moved_between_calls_is_followed_once():
    cluster = Cluster(up={A, B, C}, leader=A)
    r = router(cluster, [A, B, C])
    call(r, "killTopology")
    cluster.leader = B
    assert call(r, "deactivate") == "deactivate@b"
    # No getLeader: the refusal named the leader.
    assert cluster.calls[2:] == [(A, "deactivate"), (B, "deactivate")]
    assert r.leader == B


def test_a_second_refusal_after_following_is_an_error():
    cluster = Cluster(up={A, B}, leader=B)
    r = router(cluster, [A, B])
    call(r, "killTopology")
    # B now names A, and A names B: the client follows once and stops.
    cluster.on_call = lambda address, method: setattr(
        cluster, "leader", B if address == A else A)
    with pytest.raises(LeaderChanged) as info:
        call(r, "killTopology")
    assert str(info.value) == ("killTopology was refused twice for not reaching the leader: "
                               "after following the leader to a:1, nimbus at a:1 names "
                               "b:2 as the leader; not retried again")
    assert cluster.calls[2:] == [(B, "killTopology"), (A, "killTopology")]


def test_no_leader_waits_with_back_off_within_leader_wait_then_says_so():
    cluster = Cluster(up={A, B}, leader=None)
    r = router(cluster, [A, B], leader_wait=3.0)
    with pytest.raises(NoLeader) as info:
        call(r, "killTopology")
    assert cluster.sleeps == [LEADER_BACKOFF.delay(n) for n in range(len(cluster.sleeps))]
    assert sum(cluster.sleeps) <= 3.0 < sum(cluster.sleeps) + LEADER_BACKOFF.delay(
        len(cluster.sleeps))
    asked = len(cluster.sleeps) + 1
    assert [m for _, m in cluster.calls] == ["getLeader"] * 2 * asked   # never sent
    assert str(info.value) == (
        f"no nimbus leader to send killTopology to: asked the seeds {asked} times over "
        f"{sum(cluster.sleeps):.1f} s (leader_wait); a:1: {NO_LEADER_MESSAGE}; b:2: "
        f"{NO_LEADER_MESSAGE}")


def test_a_leader_elected_while_waiting_gets_the_call():
    cluster = Cluster(up={A, B}, leader=None)
    r = router(cluster, [A, B])
    cluster.on_call = lambda address, method: (
        setattr(cluster, "leader", B) if len(cluster.sleeps) == 2 else None)
    assert call(r, "killTopology") == "killTopology@b"
    assert cluster.sleeps == [0.1, 0.2]


def test_a_no_leader_refusal_waits_and_asks_again():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])
    call(r, "killTopology")
    cluster.leader = None        # A lost its session; B wins after one pause
    cluster.on_call = lambda address, method: setattr(cluster, "leader", B) \
        if cluster.sleeps else None
    assert call(r, "killTopology") == "killTopology@b"
    assert cluster.sleeps == [0.1]
    assert cluster.calls[2:] == [(A, "killTopology"), (A, "getLeader"), (B, "killTopology")]


def test_a_state_change_lost_in_flight_is_not_sent_again():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])
    call(r, "killTopology")
    cluster.on_call = lambda address, method: cluster.up.discard(A)
    with pytest.raises(ConnectionLost, match="not retried: killTopology changes state"):
        call(r, "killTopology")
    assert cluster.calls.count((A, "killTopology")) == 2
    assert (B, "killTopology") not in cluster.calls


def test_a_dead_leader_is_found_again_before_anything_is_sent():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])
    call(r, "killTopology")
    cluster.up.discard(A)
    cluster.leader = B
    r.transport(A).discard()        # the kernel saw it close
    assert call(r, "killTopology") == "killTopology@b"
    assert cluster.calls[2:] == [(B, "getLeader"), (B, "killTopology")]


def test_a_read_refused_as_a_state_change_goes_to_the_leader():
    cluster = Cluster(up={A, B}, leader=B)
    r = router(cluster, [A, B])
    assert call(r, "setWorkerProfiler") == "setWorkerProfiler@b"
    assert cluster.calls == [(A, "getLeader"), (B, "setWorkerProfiler")]
    assert call(r, "setFoo") == "setFoo@b"    # not a known state change: refused, followed
    assert cluster.calls[2:] == [(A, "setFoo"), (B, "setFoo")]


# --------------------------------------------------------------------------- operations


def upload_and_submit(r: SeedRouter) -> list[str]:
    return [call(r, m) for m in ("isTopologyNameAllowed", "beginFileUpload", "uploadChunk",
                                 "uploadChunk", "finishFileUpload", "submitTopology",
                                 "getClusterInfo")]


def test_an_operation_runs_on_one_leader_reads_included():
    cluster = Cluster(up={A, B}, leader=B)
    r = router(cluster, [A, B])
    r.call("getClusterInfo", 1, b"")            # reads go to A
    assert r.on_leader(lambda: upload_and_submit(r), what="the submit")[-1] \
        == "getClusterInfo@b"
    assert {address for address, _ in cluster.calls[2:]} == {B}


def test_a_leader_change_mid_upload_restarts_the_operation_on_the_new_leader_once():
    cluster = Cluster(up={A, B, C}, leader=A)
    r = router(cluster, [A, B, C])

    def change(address: Address, method: str) -> None:
        if address == A and method == "uploadChunk":
            cluster.leader = B
    cluster.on_call = change
    r.on_leader(lambda: upload_and_submit(r), what="the submit")
    assert cluster.calls == [
        (A, "getLeader"), (A, "isTopologyNameAllowed"), (A, "beginFileUpload"),
        (A, "uploadChunk"), (B, "isTopologyNameAllowed"), (B, "beginFileUpload"),
        (B, "uploadChunk"), (B, "uploadChunk"), (B, "finishFileUpload"),
        (B, "submitTopology"), (B, "getClusterInfo")]
    # Once: a change during the second run is an error naming the operation.
    cluster.calls.clear()
    cluster.on_call = lambda address, method: setattr(
        cluster, "leader", C if address == B else A) if method == "uploadChunk" else None
    with pytest.raises(LeaderChanged, match="^the submit was refused twice"):
        r.on_leader(lambda: upload_and_submit(r), what="the submit")


def test_a_leader_dying_before_the_submit_restarts_after_it_does_not():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])

    def die(address: Address, method: str) -> None:
        if address == A and method == die.at:  # type: ignore[attr-defined]
            cluster.up.discard(A)
            cluster.leader = B
    die.at = "uploadChunk"  # type: ignore[attr-defined]
    cluster.on_call = die
    assert r.on_leader(lambda: upload_and_submit(r), what="the submit")[-2] \
        == "submitTopology@b"
    cluster.up.add(A)
    cluster.leader = A
    die.at = "getClusterInfo"  # type: ignore[attr-defined]  # after the submit: kept
    with pytest.raises((ConnectionLost, NimbusUnavailable)):
        r.on_leader(lambda: upload_and_submit(r), what="the submit")
    assert cluster.calls.count((B, "submitTopology")) == 1


def test_an_operation_that_cannot_run_twice_stops_after_its_first_call():
    cluster = Cluster(up={A, B}, leader=A)
    r = router(cluster, [A, B])

    def upload() -> list[str]:     # from a stream read once, after beginFileUpload
        return [call(r, m) for m in ("beginFileUpload", "uploadChunk", "finishFileUpload")]
    call(r, "killTopology")
    cluster.leader = B                  # refused at its first call: run again on B
    assert r.on_leader(upload, what="up", restart=False) == [
        "beginFileUpload@b", "uploadChunk@b", "finishFileUpload@b"]
    cluster.on_call = lambda address, method: setattr(cluster, "leader", A) \
        if method == "uploadChunk" else None
    with pytest.raises(LeaderChanged) as info:
        r.on_leader(upload, what="up", restart=False)
    assert str(info.value) == ("up was refused midway for not reaching the leader: nimbus "
                               "at b:2 names a:1 as the leader; not run again (what it "
                               "sends is read only once)")
    assert cluster.calls[-2:] == [(B, "beginFileUpload"), (B, "uploadChunk")]
