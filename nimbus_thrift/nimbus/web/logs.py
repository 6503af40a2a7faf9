"""``GET /api/nimbus-thrift/topology/:id/log``: a topology's log, the driver's stderr
(``<data_dir>/topologies/<id>/logs/stderr``, where the launcher sends it; user code's
logging and, with a local master, its Python workers' lines end up there), read in a
bounded piece: Storm's logviewer, for the one log a topology has here. The Storm API's
``workerLogLink`` and ``errorWorkerLogLink`` point at it (:func:`log_link`).

Authorized as the other per-topology paths are: through an IDL method of the topology
(``getTopologyConf``), so its readers (``topology.readonly.users``, its owner,
``topology.users``, admins) may read it, an unknown topology is a 404 and the call is
audited as ``http:getTopologyConf``.

Parameters (Storm's logviewer's names): ``length`` bytes (default
:data:`DEFAULT_LOG_BYTES`, at most :data:`MAX_LOG_BYTES`) from byte ``start``; without
``start``, the last ``length`` bytes. The answer is ``text/plain`` with
``X-Log-Start`` (the offset of its first byte) and ``X-Log-Size`` (the file's size), so
a reader that follows the log asks next from ``start + len(body)``. A topology without
a log yet (not launched) answers an empty body of size 0.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ...runner.rundir import UntrustedFile, open_untrusted, pread_up_to, report_malformed
from .calls import call_as
from .messages import HttpError, Request, Response

#: Bytes sent when ``length`` is not given: Storm's logviewer's default page.
DEFAULT_LOG_BYTES = 51200
#: Bytes one answer holds at most: the log may be gigabytes, and an answer is built in
#: memory (a reader pages through a longer piece with ``start``).
MAX_LOG_BYTES = 1 << 20
#: The path of a topology's log, ``{id}`` percent-encoded.
LOG_PATH = "/api/nimbus-thrift/topology/{id}/log"


def log_link(request: Request, topology_id: str) -> str:
    """The URL of ``topology_id``'s log on this daemon, as ``request`` reached it (its
    Host header, already checked against the daemon's names by csrf.check_host), or
    the path alone when the request named no host."""
    path = LOG_PATH.format(id=quote(topology_id, safe=""))
    host = request.headers.get("host", "")
    return f"{request.scheme}://{host}{path}" if host else path


def web_port(request: Request) -> int | None:
    """The port ``request`` reached this daemon's web side at (from its Host header;
    the scheme's default when it names none), or None when it named no host."""
    host = request.headers.get("host", "")
    if not host:
        return None
    _, colon, port = host.rpartition(":")
    if colon and port.isdigit() and not host.endswith("]"):
        return int(port)
    return 443 if request.scheme == "https" else 80


def _whole(query: dict[str, str], name: str, low: int, high: int | None) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not text.isdigit() or int(text) < low or (high is not None and int(text) > high):
        bound = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise HttpError(400, f"{name} {text[:40]!r} is not a whole number {bound}")
    return int(text)


def read_piece(path: Path, below: Path, start: int | None, length: int
               ) -> tuple[bytes, int, int]:
    """``length`` bytes of the log ``path`` from ``start`` (None: its last ``length``
    bytes), read as untrusted input (a symbolic link on the way below ``below``, a FIFO
    or a device is no log); returns ``(data, offset of data, size of the file)``.
    Never reads more than ``length`` bytes, whatever the file's size."""
    try:
        fd, st = open_untrusted(path, below=below)
    except FileNotFoundError:
        return b"", 0, 0
    except (UntrustedFile, OSError) as exc:
        report_malformed(path, exc)
        return b"", 0, 0
    try:
        size = st.st_size
        offset = max(0, size - length) if start is None else min(start, size)
        return pread_up_to(fd, offset, length), offset, size
    finally:
        os.close(fd)


class TopologyLogs:
    """The log route; ``handler`` is the daemon's NimbusHandler (its IDL methods
    authorize, its ``topologies_dir`` holds the work directories)."""

    def __init__(self, handler: Any):
        self.handler = handler
        self.idl = handler.idl

    def log(self, request: Request, params: dict[str, str]) -> Response:
        length = _whole(request.query, "length", 1, MAX_LOG_BYTES) or DEFAULT_LOG_BYTES
        start = _whole(request.query, "start", 0, None)
        topology_id = params["id"]
        # The topology's readers only, as every per-topology path: the IDL method's
        # rule and audit; NotAliveException is the 404.
        call_as(request, self.idl, "getTopologyConf", self.handler.getTopologyConf,
                topology_id)
        # An id the store knows is one the daemon made, one path component; checked
        # anyway, as it becomes a path.
        if topology_id in (".", "..") or "/" in topology_id or "\0" in topology_id:
            raise HttpError(404, f"no topology with id {topology_id[:200]!r}")
        root: Path = self.handler.topologies_dir
        data, offset, size = read_piece(root / topology_id / "logs" / "stderr", root,
                                        start, length)
        return Response(200, data, [("Content-Type", "text/plain; charset=utf-8"),
                                    ("Cache-Control", "no-store"),
                                    ("X-Log-Start", str(offset)),
                                    ("X-Log-Size", str(size))])
