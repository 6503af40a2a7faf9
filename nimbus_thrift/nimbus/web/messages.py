"""What the HTTP layer hands the application and takes back: a request read whole
(head and bounded body) and a response to write. No sockets here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

#: Headers every response carries: no sniffing of content types, no framing by other
#: sites (the page has buttons that kill topologies), no referrer to other origins.
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
)


@dataclass(frozen=True)
class Request:
    """One HTTP request, read whole."""

    method: str
    #: The target as sent (path and query).
    target: str
    #: Header names in lower case; a repeated header's values joined with ", ".
    headers: dict[str, str]
    body: bytes = b""
    #: The client's address, "host:port" (as the Thrift side names peers).
    peer: str = ""
    #: Who the client is: the CN of its verified TLS certificate, else None.
    principal: str | None = None
    #: "https" on a TLS connection, else "http".
    scheme: str = "http"

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def segments(self) -> list[str]:
        """The path's segments, each percent-decoded (so an id may hold a "/")."""
        return [unquote(s) for s in self.path.split("/")[1:]]

    @property
    def query(self) -> dict[str, str]:
        """The query's parameters (the last of a repeated one)."""
        return dict(parse_qsl(urlsplit(self.target).query, keep_blank_values=True))


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> "Response":
        return cls(status, json.dumps(value, sort_keys=True).encode(),
                   [("Content-Type", "application/json; charset=utf-8"),
                    ("Cache-Control", "no-store")])

    @classmethod
    def text(cls, text: str, status: int = 200,
             content_type: str = "text/plain; charset=utf-8") -> "Response":
        return cls(status, text.encode(), [("Content-Type", content_type),
                                           ("Cache-Control", "no-store")])


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


class HttpError(Exception):
    """A request answered with an error status; ``message`` is one sentence. The body
    is Storm's error JSON (``{"error": "404 Not Found", "errorMessage": ...}``)."""

    def __init__(self, status: int, message: str,
                 headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers

    def response(self) -> Response:
        response = Response.json({"error": f"{self.status} {reason(self.status)}",
                                  "errorMessage": self.message}, self.status)
        response.headers.extend(self.headers)
        return response
