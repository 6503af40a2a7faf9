"""The standalone master's REST submission protocol (``spark.master.rest.enabled``,
port 6066 by default): the requests a cluster-mode launch, kill and status send, and
the replies read back, as dicts and bytes (no sockets); :class:`RestClient` sends them.

A Python application cannot be submitted in standalone cluster mode by spark-submit,
but the REST server runs any main class in a driver on a worker: given Spark's own
``org.apache.spark.deploy.SparkSubmit`` with spark-submit's arguments, that driver is
spark-submit in client mode on the worker, which runs the Python driver there. The
``--master`` must be among those arguments: SparkSubmit does not take it from the
request's properties (measured: without it the driver ran ``local[*]``).

Driver states, as the master names them (``DriverState`` in Spark)::

    SUBMITTED    accepted, waiting for a worker with the driver's cores and memory
    RUNNING      running on a worker
    RELAUNCHING  supervised, and its worker was lost or it exited non-zero: the
                 master starts it again (same driver id)
    FINISHED     exited 0            FAILED   exited non-zero, not supervised
    KILLED       killed (our kill)   ERROR    the worker could not start it
    UNKNOWN      the master does not know the id (restarted without recovery, or
                 forgot it)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: The REST server's port when ``spark_master_rest`` is not set (Spark's default).
REST_PORT = 6066
#: One request to the REST server (it answers from the master's memory).
REST_TIMEOUT_SECS = 5.0
#: A reply is a small JSON object; anything longer is not the REST server.
MAX_REPLY_BYTES = 1 << 20
#: The main class that makes a worker's driver spark-submit itself (module docstring).
SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"

ACTIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING"})
FINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED", "ERROR"})
UNKNOWN = "UNKNOWN"


class RestError(Exception):
    """The REST server could not be reached, or refused or misunderstood a request; the
    message says which, with its own words when it gave some."""


@dataclass(frozen=True)
class DriverStatus:
    """What the master says of one driver."""

    driver_id: str
    state: str
    worker_id: str = ""
    worker_host_port: str = ""
    #: The master's message (the exception of a driver in ERROR, say).
    message: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def rest_url(master: str, override: str = "") -> str:
    """The REST server of the standalone master ``spark://host:port``: ``override``
    when set, else port :data:`REST_PORT` on the master's host."""
    if override:
        return override.rstrip("/")
    if not master.startswith("spark://"):
        raise ValueError(f"{master!r} is not a standalone master (spark://host:port)")
    host = master[len("spark://"):].split(",")[0].rsplit(":", 1)[0]
    return f"http://{host}:{REST_PORT}"


def create_request(*, master: str, app_name: str, submit_args: Sequence[str],
                   driver_cores: int, driver_memory: str, supervise: bool,
                   environment: Mapping[str, str], spark_version: str) -> dict[str, Any]:
    """The ``CreateSubmissionRequest`` of one driver that runs spark-submit with
    ``submit_args`` (its options and the Python file with its arguments; ``--master``
    is put first). The properties here are what the master needs to place and
    supervise the driver; the application's own settings are in its properties file
    (named in ``submit_args``)."""
    return {
        "action": "CreateSubmissionRequest",
        "appResource": "",
        "mainClass": SUBMIT_CLASS,
        "appArgs": ["--master", master, *submit_args],
        "clientSparkVersion": spark_version,
        "environmentVariables": dict(environment),
        "sparkProperties": {
            "spark.master": master,
            "spark.app.name": app_name,
            "spark.driver.cores": str(driver_cores),
            "spark.driver.memory": driver_memory,
            "spark.driver.supervise": "true" if supervise else "false",
            "spark.submit.deployMode": "cluster",
        },
    }


def parse_reply(body: bytes, action: str) -> dict[str, Any]:
    """The REST server's reply ``body`` to a request, which must be a ``action`` (e.g.
    ``CreateSubmissionResponse``) that says ``success``.

    Raises:
        RestError: not JSON, another action, or a refusal (with the server's message).
    """
    if len(body) > MAX_REPLY_BYTES:
        raise RestError(f"the REST server's reply is {len(body)} bytes long: not a "
                        "submission reply")
    try:
        reply = json.loads(body)
    except ValueError:
        raise RestError("the REST server's reply is not JSON: "
                        f"{body[:200].decode('utf-8', 'replace')!r}") from None
    if not isinstance(reply, dict):
        raise RestError(f"the REST server's reply is not a JSON object: {reply!r:.200}")
    got = reply.get("action")
    message = str(reply.get("message") or "").strip()
    if got == "ErrorResponse":
        raise RestError(f"the REST server refused the request: {message or reply}")
    if got != action:
        raise RestError(f"the REST server answered {got!r}, not {action!r}")
    if action != "SubmissionStatusResponse" and reply.get("success") is not True:
        raise RestError(f"the REST server refused the request: {message or reply}")
    return reply


def driver_status(reply: Mapping[str, Any], driver_id: str) -> DriverStatus:
    """A ``SubmissionStatusResponse`` as a :class:`DriverStatus` (an id the master
    does not know is ``UNKNOWN``: it answers success false for it)."""
    state = str(reply.get("driverState") or UNKNOWN) if reply.get("success") else UNKNOWN
    return DriverStatus(driver_id=driver_id, state=state,
                        worker_id=str(reply.get("workerId") or ""),
                        worker_host_port=str(reply.get("workerHostPort") or ""),
                        message=str(reply.get("message") or "").strip())


class RestClient:
    """Sends requests to the REST server at ``url`` (``http://host:6066``)."""

    def __init__(self, url: str, timeout: float = REST_TIMEOUT_SECS):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def create(self, request: Mapping[str, Any]) -> str:
        """Submit a driver; its id (``driver-<time>-<n>``).

        Raises:
            RestError: as :func:`parse_reply`, or the server cannot be reached.
        """
        reply = parse_reply(self._send("POST", "/v1/submissions/create",
                                       json.dumps(request).encode()),
                            "CreateSubmissionResponse")
        driver_id = str(reply.get("submissionId") or "")
        if not driver_id:
            raise RestError(f"the REST server accepted the driver without naming it: "
                            f"{reply}")
        return driver_id

    def status(self, driver_id: str) -> DriverStatus:
        """What the master says of ``driver_id``.

        Raises:
            RestError: the server cannot be reached or answered something else.
        """
        reply = parse_reply(self._send("GET", f"/v1/submissions/status/{driver_id}"),
                            "SubmissionStatusResponse")
        return driver_status(reply, driver_id)

    def kill(self, driver_id: str) -> None:
        """Ask the master to kill ``driver_id`` (a driver already gone is not an error:
        the master's own reply then says it is not running).

        Raises:
            RestError: the server cannot be reached or answered something else.
        """
        try:
            parse_reply(self._send("POST", f"/v1/submissions/kill/{driver_id}"),
                        "KillSubmissionResponse")
        except RestError as exc:
            if "not found" in str(exc).lower() or "already" in str(exc).lower():
                return
            raise

    def _send(self, method: str, path: str, body: bytes | None = None) -> bytes:
        request = urllib.request.Request(
            self.url + path, data=body, method=method,
            headers={"Content-Type": "application/json;charset=UTF-8"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                return bytes(reply.read(MAX_REPLY_BYTES + 1))
        except urllib.error.HTTPError as exc:
            # The server says why in a JSON ErrorResponse with its 4xx/5xx.
            data = exc.read(MAX_REPLY_BYTES + 1)
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("action"):
                return bytes(data)
            raise RestError(f"the REST server at {self.url} answered HTTP {exc.code} "
                            f"to {method} {path}") from None
        except (OSError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RestError(f"cannot reach the master's REST server at {self.url} "
                            f"({reason}); is spark.master.rest.enabled true on the "
                            "master?") from None
