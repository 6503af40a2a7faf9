"""Nimbus answers for the client's tests (tests/unit/client/test_client_calls.py and
tests/sockets/test_nimbus_client.py): a cluster summary, a topology info, and a REPLY
payload encoded by thriftpy2's own writer (independent of the client)."""

from __future__ import annotations

from typing import Any

from support.rawthrift import REPLY, message

from nimbus_thrift.idl import nimbus_idl

nimbus = nimbus_idl()
Nimbus = nimbus.Nimbus


def cluster_summary() -> Any:
    return nimbus.ClusterSummary(
        supervisors=[nimbus.SupervisorSummary(host="w1", uptime_secs=5, num_workers=4,
                                              num_used_workers=1, supervisor_id="s1")],
        nimbus_uptime_secs=7,
        topologies=[nimbus.TopologySummary(id="wc-1-1", name="wc", num_tasks=3,
                                           num_executors=3, num_workers=1, uptime_secs=2,
                                           status="ACTIVE")],
        nimbuses=[nimbus.NimbusSummary(host="n1", port=6627, uptime_secs=7, isLeader=True,
                                       version="0.1.0")])


def topology_info(id: str) -> Any:
    return nimbus.TopologyInfo(id=id, name="wc", uptime_secs=2, executors=[],
                               status="ACTIVE", errors={})


def reply(method: str, seqid: int, **result: Any) -> bytes:
    """A REPLY payload encoded by thriftpy2's own writer (independent of the client)."""
    return message(method, seqid, getattr(Nimbus, method + "_result")(**result), REPLY)
