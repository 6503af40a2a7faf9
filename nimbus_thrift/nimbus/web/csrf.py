"""Cross-site request protection for the actions (kill, rebalance, ...), which a page
on another site could otherwise make a logged-in browser (one holding a client
certificate) send.

Two checks, both needed for a POST to run:

* the ``x-csrf-token`` header equals this daemon's token, which ``GET
  /api/v1/topology/:id`` returns as ``antiForgeryToken`` (Storm 0.9.3's scheme,
  STORM-460): another site's page cannot read it (no CORS headers are ever sent), and a
  plain HTML form cannot set a header;
* ``Origin`` and ``Sec-Fetch-Site``, when the browser sends them, say the request comes
  from this origin.

And every request, read or action, must name the daemon in its ``Host`` header (an IP
address, ``localhost``, or one of the daemon's own names): a page on a site whose DNS
name an attacker points at 127.0.0.1 (DNS rebinding) is then same-origin with nothing
here, and cannot read the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable

from .messages import HttpError, Request

#: The header actions carry the token in (Storm 0.9.3's name).
TOKEN_HEADER = "x-csrf-token"


def new_token() -> str:
    """A per-daemon secret: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def host_names(*names: str) -> frozenset[str]:
    """The names (lower case) a Host header may give besides IP addresses."""
    return frozenset(n.lower() for n in ("localhost", *names) if n)


def check_host(request: Request, names: Iterable[str]) -> None:
    """Refuse a request whose Host header names neither an IP address nor one of
    ``names`` (a missing Host is h11's 400 already).

    Raises:
        HttpError: 403, naming the host.
    """
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    try:
        ipaddress.ip_address(name)
        return
    except ValueError:
        pass
    if name not in names:
        raise HttpError(403, f"Host {host[:100]!r} is not a name of this daemon; use its "
                             "address or one of its names (a guard against DNS rebinding)")


def check(request: Request, token: str) -> None:
    """Refuse a cross-site or token-less action.

    Raises:
        HttpError: 403, the sentence saying which check failed.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        raise HttpError(403, f"refused a cross-site request (Sec-Fetch-Site: {site[:40]})")
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        if origin != f"{request.scheme}://{host}":
            raise HttpError(403, f"refused a request from origin {origin[:100]!r}; "
                                 f"actions are taken from this daemon's own page only")
    sent = request.headers.get(TOKEN_HEADER)
    if sent is None:
        raise HttpError(403, f"an action needs the {TOKEN_HEADER} header: the "
                             "antiForgeryToken GET /api/v1/topology/:id returns")
    if not hmac.compare_digest(sent.encode(), token.encode()):
        raise HttpError(403, f"the {TOKEN_HEADER} header is not this daemon's "
                             "antiForgeryToken (it changes when the daemon restarts)")
