"""The standalone master's REST protocol and JSON view as bytes and dicts (no
sockets): what a cluster launch sends, and how every reply is read."""

from __future__ import annotations

import json

import pytest

from nimbus_thrift.nimbus.spark.cluster.masterview import MasterWatch, MasterView, \
    parse_master
from nimbus_thrift.nimbus.spark.cluster.rest import (SUBMIT_CLASS, RestError,
                                                     create_request, driver_status,
                                                     parse_reply, rest_url)


def test_the_rest_url_is_port_6066_on_the_masters_host_unless_set() -> None:
    assert rest_url("spark://m1.example:7077") == "http://m1.example:6066"
    assert rest_url("spark://m:7077", "http://r:1/") == "http://r:1"
    with pytest.raises(ValueError):
        rest_url("local[*]")


def test_a_create_request_runs_spark_submit_on_a_worker_with_the_master_first() -> None:
    request = create_request(master="spark://m:7077", app_name="topology-wc",
                             submit_args=["--py-files", "/s/code.zip", "/p/main.py",
                                          "--workdir", "/s/t"],
                             driver_cores=2, driver_memory="1536m", supervise=True,
                             environment={"PYSPARK_PYTHON": "/v/python"},
                             spark_version="4.3.0")
    assert request["action"] == "CreateSubmissionRequest"
    assert request["mainClass"] == SUBMIT_CLASS
    # SparkSubmit on the worker takes the master from its arguments only.
    assert request["appArgs"][:2] == ["--master", "spark://m:7077"]
    assert request["appArgs"][-3:] == ["/p/main.py", "--workdir", "/s/t"]
    props = request["sparkProperties"]
    assert props["spark.driver.supervise"] == "true"
    assert props["spark.driver.cores"] == "2" and props["spark.driver.memory"] == "1536m"
    assert props["spark.app.name"] == "topology-wc"
    assert request["environmentVariables"] == {"PYSPARK_PYTHON": "/v/python"}
    json.dumps(request)                 # it goes as JSON


def test_replies_are_checked_for_their_action_and_success() -> None:
    ok = json.dumps({"action": "CreateSubmissionResponse", "success": True,
                     "submissionId": "driver-1"}).encode()
    assert parse_reply(ok, "CreateSubmissionResponse")["submissionId"] == "driver-1"
    refused = json.dumps({"action": "CreateSubmissionResponse", "success": False,
                          "message": "Master is not alive"}).encode()
    with pytest.raises(RestError, match="Master is not alive"):
        parse_reply(refused, "CreateSubmissionResponse")
    error = json.dumps({"action": "ErrorResponse", "message": "Malformed"}).encode()
    with pytest.raises(RestError, match="refused the request: Malformed"):
        parse_reply(error, "KillSubmissionResponse")
    with pytest.raises(RestError, match="not JSON"):
        parse_reply(b"<html>", "KillSubmissionResponse")
    with pytest.raises(RestError, match="answered 'KillSubmissionResponse'"):
        parse_reply(json.dumps({"action": "KillSubmissionResponse"}).encode(),
                    "SubmissionStatusResponse")
    with pytest.raises(RestError, match="bytes long"):
        parse_reply(b" " * (2 << 20), "KillSubmissionResponse")


def test_a_driver_the_master_does_not_know_is_unknown() -> None:
    running = driver_status({"action": "SubmissionStatusResponse", "success": True,
                             "driverState": "RUNNING", "workerId": "worker-1",
                             "workerHostPort": "h:1"}, "driver-1")
    assert running.active and not running.final and running.worker_host_port == "h:1"
    gone = driver_status({"action": "SubmissionStatusResponse", "success": False,
                          "message": "not found"}, "driver-2")
    assert gone.state == "UNKNOWN" and not gone.active and not gone.final
    assert driver_status({"success": True, "driverState": "KILLED"}, "d").final


MASTER_JSON = {
    "workers": [
        {"id": "worker-20261128015403-127.0.0.1-33523", "host": "127.0.0.1",
         "port": 33523, "cores": 3, "coresused": 3, "coresfree": 0, "memory": 3072,
         "memoryused": 2048, "memoryfree": 1024, "state": "ALIVE"},
        {"id": "worker-2", "host": "h2", "port": 2, "cores": 3, "coresused": 1,
         "memory": 3072, "memoryused": 1024, "state": "DEAD"},
        {"host": "no id"}, "not a dict",
    ],
    "activedrivers": [{"id": "driver-b", "state": "RUNNING", "cores": 1,
                       "memory": 1024, "worker": "worker-20261128015403-127.0.0.1-33523"}],
    "completeddrivers": [{"id": "driver-a", "state": "FINISHED", "worker": "worker-2"},
                         {"id": "driver-b", "state": "FAILED"}],
}


def test_the_masters_json_gives_workers_room_and_where_each_driver_runs() -> None:
    view = parse_master(MASTER_JSON)
    assert [w.worker_id for w in view.alive_workers()] == [
        "worker-20261128015403-127.0.0.1-33523"]
    dead = view.worker("worker-2")
    assert dead is not None and not dead.alive
    # Free room computed from used when the master does not say it.
    assert (dead.cores_free, dead.memory_free_mb) == (2, 2048)
    # A relaunched driver listed among both: the active entry wins.
    assert view.drivers["driver-b"].state == "RUNNING"
    assert view.drivers["driver-a"].state == "FINISHED"
    assert parse_master(["not", "an object"]).error


def test_the_watch_reads_the_master_once_per_period_for_every_caller() -> None:
    now = [100.0]
    reads: list[str] = []

    def reader(url: str) -> MasterView:
        reads.append(url)
        return parse_master(MASTER_JSON, now[0])

    watch = MasterWatch("http://m:8080/json/", max_age=2.0, reader=reader,
                        clock=lambda: now[0])
    watch.view()
    watch.view()
    assert len(reads) == 1
    now[0] += 2.5
    watch.view()
    assert len(reads) == 2
    watch.view(fresh=True)
    assert len(reads) == 3
