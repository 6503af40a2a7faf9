"""A fake of the daemon's log route (nimbus/web/logs.py) on port 0, for
``nimbus-thrift logs``'s tests: the same parameters and headers (start, length,
X-Log-Start, X-Log-Size; without start the last ``length`` bytes), a log the test
writes, truncates and replaces, and the answers a gone topology or a refusal gives."""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

from nimbus_thrift.nimbus.web.logs import LOG_PATH

#: The topology id the fake serves.
TID = "wc-1-1700000000"


class FakeLogRoute:
    """The log of one topology as the daemon's route serves it."""

    def __init__(self) -> None:
        self.log = b""
        self.lock = threading.Lock()
        self.status = 200
        self.headers = True
        self.asked: list[tuple[int | None, int]] = []
        #: Answer 404 (the topology killed and removed) from this many asks on.
        self.gone_after: int | None = None
        #: Called with the number of asks so far before each answer (a test's script).
        self.on_ask: Any = None

    def write(self, text: str) -> None:
        with self.lock:
            self.log += text.encode()

    def replace(self, text: str) -> None:
        with self.lock:
            self.log = text.encode()

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(path)
        if parts.path != LOG_PATH.format(id=TID) or self.status == 404:
            return 404, {}, b'{"error": "404 Not Found", "errorMessage": "no topology"}'
        if self.status != 200:
            return self.status, {}, b'{"errorMessage": "not yours"}'
        if self.on_ask is not None:
            self.on_ask(len(self.asked))
        if self.gone_after is not None and len(self.asked) >= self.gone_after:
            return 404, {}, b'{"errorMessage": "no topology"}'
        query = {k: int(v[0]) for k, v in parse_qs(parts.query).items()}
        start, length = query.get("start"), query.get("length", 51200)
        self.asked.append((start, length))
        with self.lock:
            size = len(self.log)
            offset = max(0, size - length) if start is None else min(start, size)
            data = self.log[offset:offset + length]
        headers = {"X-Log-Start": str(offset), "X-Log-Size": str(size)} \
            if self.headers else {}
        return 200, headers, data


@contextmanager
def serving(fake: FakeLogRoute) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1:<free port>; yields the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True        # headers and body are two writes

        def do_GET(self) -> None:
            status, headers, body = fake.answer(self.path)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
