"""A topology's log read through the daemon's web side, for ``nimbus-thrift logs``.

The daemon serves it at ``GET /api/nimbus-thrift/topology/<id>/log?start=&length=``
(nimbus/web/logs.py: a bounded piece, with ``X-Log-Start``, the offset of its first
byte, and ``X-Log-Size``, the file's size), authorized as the topology's info is. This
module asks for pieces of it, finds the last lines, and follows it::

    last N lines:  read pieces backwards from the end until N lines (that match) are
                   found, the start of the file is reached, or TAIL_SCAN_BYTES are read
    --follow:      from where the tail ended, ask for ``start=pos`` every
                   FOLLOW_POLL_S; X-Log-Size below ``pos`` means the log was truncated
                   or replaced by a shorter file (a relaunch, a rotation): read again
                   from its start

A file replaced by one already longer than ``pos`` between two polls cannot be told
from a grown one with only the size: the follower goes on from ``pos`` in the new file.

Only the standard library (http.client): the base install has no HTTP client.
"""

from __future__ import annotations

import codecs
import http.client
import re
import ssl
import threading
from dataclasses import dataclass
from typing import Callable, Iterable
from urllib.parse import quote, urlsplit

#: The log route (nimbus/web/logs.py's LOG_PATH; the CLI does not import the daemon
#: for one string, see its test).
LOG_PATH = "/api/nimbus-thrift/topology/{id}/log"
#: Bytes asked for at a time: the route's cap is 1 MiB; 64 KiB holds hundreds of lines.
PIECE_BYTES = 64 * 1024
#: Bytes read backwards at most to find the last lines (``--component`` may match few).
TAIL_SCAN_BYTES = 8 * 1024 * 1024
#: Seconds between two asks while following: a person reads along.
FOLLOW_POLL_S = 1.0


class LogError(Exception):
    """The log cannot be read, in one sentence."""


class TopologyGone(LogError):
    """The daemon no longer knows the topology (killed and removed, or never was)."""


@dataclass(frozen=True)
class Piece:
    data: bytes
    start: int          # offset of data's first byte
    size: int           # the log's size when it was read


class LogSource:
    """The log of ``topology_id`` on the web side at ``base_url``.

    Args:
        base_url: ``http://host:port/`` or ``https://...`` (the daemon's web UI).
        topology_id: the topology's id (not its name).
        ssl_context: for https: the CLI's client TLS context (its CA, its certificate).
        timeout: seconds for connecting and for each answer.
    """

    def __init__(self, base_url: str, topology_id: str,
                 ssl_context: ssl.SSLContext | None = None, timeout: float = 30.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LogError(f"{base_url!r} is not an http:// or https:// URL of the "
                           "daemon's web UI")
        self.base_url = base_url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.path = parts.path.rstrip("/") + LOG_PATH.format(id=quote(topology_id, safe=""))
        self.topology_id = topology_id
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.https:
                context = self.ssl_context or ssl.create_default_context()
                self._conn = http.client.HTTPSConnection(self.host, self.port,
                                                         timeout=self.timeout,
                                                         context=context)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port,
                                                        timeout=self.timeout)
        return self._conn

    def __enter__(self) -> "LogSource":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the kept-alive connection (the next piece opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def piece(self, start: int | None, length: int = PIECE_BYTES) -> Piece:
        """``length`` bytes from ``start`` (None: the last ``length`` bytes).

        Raises:
            TopologyGone: 404.
            LogError: refused (403), unreachable, or an answer that is not the route's.
        """
        query = f"?length={length}" + ("" if start is None else f"&start={start}")
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request("GET", self.path + query, headers={"Accept": "text/plain"})
                response = conn.getresponse()
                body = response.read()
                break
            except ssl.SSLError as exc:
                self.close()
                raise LogError(f"the TLS handshake with the web UI at {self.base_url} "
                               f"failed ({exc.reason or exc}): check --tls-ca/--tls-cert "
                               "or give --ui with the right scheme") from None
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as exc:
                # A kept-alive connection the server closed meanwhile: ask once more.
                self.close()
                if attempt == 2:
                    raise LogError(f"the web UI at {self.base_url} closed the "
                                   f"connection ({exc})") from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise LogError(f"cannot reach the daemon's web UI at {self.base_url} "
                               f"({reason}): is it the right address (--ui)?") from None
        if response.status == 404:
            raise TopologyGone(f"the daemon has no topology with id {self.topology_id}")
        if response.status in (401, 403):
            raise LogError(f"the web UI at {self.base_url} refused to show the log "
                           f"({response.status}: {_error_text(body)})")
        if response.status != 200:
            raise LogError(f"the web UI at {self.base_url} answered {response.status} "
                           f"({_error_text(body)})")
        try:
            first = int(response.getheader("X-Log-Start", ""))
            size = int(response.getheader("X-Log-Size", ""))
        except ValueError:
            raise LogError(f"{self.base_url} answered without X-Log-Start and X-Log-Size: "
                           "is it nimbus-thrift's web UI (--ui)?") from None
        return Piece(body, first, size)


def _error_text(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    match = re.search(r'"errorMessage"\s*:\s*"([^"]*)"', text)
    return (match.group(1) if match else text)[:200] or "no reason given"


#: A line Spark's JVM writes (log4j's default layout, ``26/11/28 02:20:22 INFO Class:
#: ...``): Spark's own, which never names a topology's component, though it says
#: "sink", "count" or "split" often enough.
_JVM_LINE = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d [A-Z]+ ")


def component_filter(component: str) -> Callable[[str], bool]:
    """Whether a line names ``component`` as a word (its tuple samples, its errors,
    lines user code writes with it): not inside a longer name (``split-2``,
    ``spark.split``), not as a JSON key or a ``key=`` (Spark's progress reports), and
    never in Spark's own lines."""
    pattern = re.compile(r'(?<![\w."-])' + re.escape(component) + r'(?![\w"=-])')
    return lambda line: not _JVM_LINE.match(line) and pattern.search(line) is not None


def _continues(line: str) -> bool:
    """An indented line belongs to the line before it (a traceback's frames); it is
    kept with that line, and never kept on its own."""
    return line[:1] in (" ", "\t")


def select_lines(lines: Iterable[str], match: Callable[[str], bool] | None) -> list[str]:
    """The lines ``match`` keeps, each with the indented lines after it (a
    traceback's frames go with the line that names the component)."""
    if match is None:
        return list(lines)
    kept: list[str] = []
    keeping = False
    for line in lines:
        if not _continues(line):
            keeping = match(line)
        if keeping:
            kept.append(line)
    return kept


@dataclass(frozen=True)
class Tail:
    lines: list[str]      # the last lines (of those kept), each ending in a newline
    partial: str          # the last line when its newline is not written yet
    end: int              # where the log ended when read: a follower goes on from here
    size: int             # the log's size then (0: nothing written yet)


def tail(source: LogSource, lines: int, match: Callable[[str], bool] | None = None,
         scan_bytes: int = TAIL_SCAN_BYTES) -> Tail:
    """The last ``lines`` lines of the log (of those ``match`` keeps).

    Reads pieces backwards from the end until enough lines are found, the start of
    the file is reached or ``scan_bytes`` are read."""
    first = source.piece(None, PIECE_BYTES)
    data, start = first.data, first.start
    end = start + len(data)
    while start > 0 and end - start < scan_bytes:
        whole = _lines(data[:data.rfind(b"\n") + 1])[1:]     # the first may be cut
        if len(select_lines(whole, match)) >= lines:
            break
        size = min(PIECE_BYTES, start)
        earlier = source.piece(start - size, size)
        data, start = earlier.data + data, earlier.start
    cut = data.rfind(b"\n") + 1
    found = _lines(data[:cut])
    if start > 0 and found:
        found = found[1:]                   # cut by the piece's first byte
    chosen = select_lines(found, match)
    partial = data[cut:].decode("utf-8", "replace")
    return Tail(chosen[-lines:] if lines else [], partial, end, first.size)


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def follow(source: LogSource, position: int, write: Callable[[str], None],
           stop: threading.Event, notice: Callable[[str], None],
           match: Callable[[str], bool] | None = None,
           poll_s: float | None = None, pending: str = "") -> None:
    """Write what is added to the log from ``position`` on until ``stop`` is set.

    ``pending`` is the start of a line read before ``position`` (no newline yet): with
    ``match``, lines are judged whole, so it is judged once its newline arrives;
    without, it is taken as written already. ``notice`` gets the one-line notes for
    people (the log truncated).

    Raises:
        TopologyGone: the topology is gone (killed and removed).
        LogError: the web side stopped answering.
    """
    poll = FOLLOW_POLL_S if poll_s is None else poll_s
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    partial = pending if match is not None else ""
    keeping = False
    while not stop.is_set():
        piece = source.piece(position, PIECE_BYTES)
        if piece.size < position:
            notice(f"the log was truncated or replaced (now {piece.size} bytes, "
                   f"was {position} or more): reading it from its start")
            position, partial, keeping = 0, "", False
            decoder.reset()
            continue
        position = piece.start + len(piece.data)
        text = decoder.decode(piece.data)
        if match is None:
            if text:
                write(text)
        else:
            partial += text
            *complete, partial = partial.split("\n")
            for line in complete:
                if not _continues(line):
                    keeping = match(line)
                if keeping:
                    write(line + "\n")
        if len(piece.data) < PIECE_BYTES:
            stop.wait(poll)                  # else more is there: no wait
