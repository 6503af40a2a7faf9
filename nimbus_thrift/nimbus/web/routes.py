"""The HTTP side's routing table: method and path pattern to the function that
answers, in one place; 404 for a path nothing serves, 405 (with ``Allow``) for a
method a path does not take. No sockets here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .messages import HttpError, Request, Response

#: A route's function: the request and the path's bound segments (``:id`` -> "id").
Handler = Callable[[Request, dict[str, str]], Response]


@dataclass(frozen=True)
class Route:
    method: str                 # GET (HEAD is served by it too) or POST
    pattern: str                # "/api/v1/topology/:id"; ":name" binds one segment
    handler: Handler

    @property
    def parts(self) -> list[str]:
        return self.pattern.split("/")[1:]

    def bind(self, segments: list[str]) -> dict[str, str] | None:
        """The bound segments if ``segments`` fit the pattern, else None."""
        parts = self.parts
        if len(parts) != len(segments):
            return None
        bound: dict[str, str] = {}
        for part, segment in zip(parts, segments):
            if part.startswith(":"):
                if not segment:
                    return None
                bound[part[1:]] = segment
            elif part != segment:
                return None
        return bound


class Router:
    def __init__(self, routes: list[Route]):
        self.routes = routes

    def resolve(self, request: Request) -> tuple[Route, dict[str, str]]:
        """The route serving ``request`` and its bound segments.

        Raises:
            HttpError: 404 (no route has this path), 405 (not with this method; the
                ``Allow`` header lists the methods it takes).
        """
        method = "GET" if request.method == "HEAD" else request.method
        segments = request.segments
        allowed: list[str] = []
        for route in self.routes:
            bound = route.bind(segments)
            if bound is None:
                continue
            if route.method == method:
                return route, bound
            allowed.append(route.method)
        if not allowed:
            raise HttpError(404, f"nothing is served at {request.path[:200]!r}")
        methods = sorted({m for a in allowed for m in ((a, "HEAD") if a == "GET" else (a,))})
        raise HttpError(405, f"{request.path[:200]!r} takes {', '.join(methods)}, not "
                             f"{request.method[:20]}",
                        headers=(("Allow", ", ".join(methods)),))
