"""Storm 2.x's methods on a real daemon over real sockets, byte-level clients: the
lookups, the calls Spark has no meaning for (a TApplicationException, the connection
carrying on), and refusals of methods that declare no AuthorizationException."""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest
from thriftpy2.thrift import TApplicationException

from support.nimbus import (FakeLauncher, N, audit_events, make_zip, tcp, unix,
                           wordcount)
from support.rawthrift import frame, message, roundtrip
from nimbus_thrift.nimbus import NimbusDaemon, load_config

ME = pwd.getpwuid(os.geteuid()).pw_name
REPLY, EXCEPTION = 2, 3


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    started: list[NimbusDaemon] = []

    def make(**flags: Any) -> NimbusDaemon:
        config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / f"d{len(started)}"),
                                            "port": 0, **flags})
        daemon = NimbusDaemon(config, launcher=FakeLauncher())
        daemon.start()
        started.append(daemon)
        return daemon
    yield make
    for daemon in started:
        daemon.stop(grace=5.0)


def send(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    args = getattr(N.Nimbus, method + "_args")(**kwargs)
    return roundtrip(sock, frame(message(method, 1, args)), N.Nimbus)


def rpc(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    reply = send(sock, method, **kwargs)
    assert reply.type == REPLY, reply
    return reply.body


def application_error(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    reply = send(sock, method, **kwargs)
    assert reply.type == EXCEPTION, reply
    assert isinstance(reply.body, TApplicationException)
    return reply.body


def submit(sock: socket.socket, name: str) -> str:
    location = rpc(sock, "beginFileUpload").success
    rpc(sock, "uploadChunk", location=location, chunk=make_zip())
    rpc(sock, "finishFileUpload", location=location)
    assert rpc(sock, "submitTopology", name=name, uploadedJarLocation=location,
               jsonConf="{}", topology=wordcount()).aze is None
    return rpc(sock, "getTopologySummaryByName", name=name).success.id


def test_lookups_over_tcp(daemons: Any) -> None:
    daemon = daemons()
    with tcp(daemon) as sock:
        tid = submit(sock, "wc")
        (listed,) = rpc(sock, "getTopologySummaries").success
        assert (listed.id, listed.name, listed.owner) == (tid, "wc", ME)
        assert rpc(sock, "getTopologySummary", id=tid).success == listed
        missing = rpc(sock, "getTopologySummaryByName", name="nope")
        assert missing.success is None and missing.e.msg == "no topology named 'nope'"
        info = rpc(sock, "getTopologyInfoByNameWithOpts", name="wc", options=N.GetInfoOptions(
            num_err_choice=N.NumErrorsChoice.NONE)).success
        assert (info.id, info.errors, info.replication_count) == (tid, {}, 1)
        assert rpc(sock, "getLeader").success.version.startswith("2.8.0+nimbus.thrift.")


def test_unsupported_calls_answer_and_the_connection_carries_on(daemons: Any) -> None:
    daemon = daemons(admins=[ME])
    with unix(daemon) as sock:
        tid = submit(sock, "wc")
        for method, kwargs in [
                ("getSupervisorAssignments", {"node": "n"}),
                ("processWorkerMetrics", {"metrics": N.WorkerMetrics(
                    topologyId=tid, port=1, hostname="h",
                    metricList=N.WorkerMetricList(metrics=[]))}),
                ("setWorkerProfiler", {"id": tid, "profileRequest": N.ProfileRequest(
                    nodeInfo=N.NodeInfo(node="h", port={1}),
                    action=N.ProfileAction.JVM_RESTART)}),
                ("uploadNewCredentials", {"name": "wc", "creds": N.Credentials(creds={})})]:
            error = application_error(sock, method, **kwargs)
            assert error.type == TApplicationException.UNKNOWN, method
            assert error.message.startswith(f"{method} is not supported on Spark: "), \
                error.message
            assert "Traceback" not in error.message
        assert rpc(sock, "getComponentPendingProfileActions", id=tid, component_id="count",
                   action=N.ProfileAction.JMAP_DUMP).success == []
        rpc(sock, "createStateInZookeeper", key="k")          # a void REPLY
        assert [t.id for t in rpc(sock, "getTopologySummaries").success] == [tid]


def test_a_refusal_of_a_method_without_authorization_exception(daemons: Any) -> None:
    # Storm declares no AuthorizationException for processWorkerMetrics: the refusal
    # is a TApplicationException with the same sentence, and an audit event.
    daemon = daemons(admins=["somebody-else"])
    with audit_events() as audit, unix(daemon) as sock:
        error = application_error(sock, "processWorkerMetrics", metrics=N.WorkerMetrics(
            topologyId="t", port=1, hostname="h", metricList=N.WorkerMetricList(metrics=[])))
        assert error.message == (f"{ME!r} may not call processWorkerMetrics: only admins "
                                 "may make the calls of Storm's supervisors")
        # One that declares it answers with it.
        refused = rpc(sock, "getSupervisorAssignments", node="n")
        assert refused.aze.msg.startswith(f"{ME!r} may not call getSupervisorAssignments")
        assert rpc(sock, "getTopologySummaries").success == []
    assert [(e["operation"], e["principal"], e["outcome"]) for e in audit()] == [
        ("processWorkerMetrics", ME, "refused"), ("getSupervisorAssignments", ME, "refused")]
