"""The web page's files: ``/`` is ``assets/index.html``, ``/assets/<name>`` a file of
the ``assets`` directory next to this module (shipped as package data). Only plain
names listed in that directory are served: no subdirectories, no dot files, so no
path can leave it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .messages import HttpError, Request, Response

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
INDEX = "index.html"

#: Content types by suffix; a file with another suffix is not served.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
#: The page may load only what the daemon serves: no CDN, no inline script (what an
#: injected error message could smuggle in), no framing.
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' data:; "
                           "style-src 'self'; script-src 'self'; "
                           "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


class StaticFiles:
    """Reads an asset when asked (so an edited file shows at the next reload); answers
    ``If-None-Match`` with 304; browsers revalidate every time (``no-cache``), which
    costs a 304 per file."""

    def __init__(self, directory: Path = ASSETS_DIR):
        self.directory = directory

    def index(self, request: Request, params: dict[str, str]) -> Response:
        return self._serve(request, INDEX)

    def asset(self, request: Request, params: dict[str, str]) -> Response:
        return self._serve(request, params["name"])

    def _serve(self, request: Request, name: str) -> Response:
        asset = self._load(name)
        headers = [("Content-Type", asset.content_type), ("ETag", asset.etag),
                   ("Cache-Control", "no-cache")]
        if asset.content_type.startswith("text/html"):
            headers.append(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
        if request.headers.get("if-none-match") == asset.etag:
            return Response(304, b"", headers)
        return Response(200, asset.body, headers)

    def _load(self, name: str) -> Asset:
        suffix = Path(name).suffix
        if "/" in name or "\\" in name or name.startswith(".") or "\0" in name \
                or suffix not in CONTENT_TYPES:
            raise HttpError(404, f"no asset named {name[:100]!r}")
        path = self.directory / name
        try:
            body = path.read_bytes() if path.is_file() else None
        except OSError:
            body = None
        if body is None:
            raise HttpError(404, f"no asset named {name[:100]!r}")
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        return Asset(body, CONTENT_TYPES[suffix], etag)
