"""The client the commands that talk to a running nimbus use, with every failure turned
into one sentence and exit status 1; and a topology's id looked up by its name."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import click
import structlog

from .. import logs


@contextmanager
def connected_client(target: Any, timeout: float) -> Iterator[Any]:
    """A connected client of ``target`` (ClientSettings); every failure becomes one
    sentence and exit status 1."""
    from thriftpy2.thrift import TApplicationException

    from ..client.client import NimbusClient
    from ..client.errors import NimbusClientError

    if not structlog.is_configured():
        logs.configure("warning")  # the client's retries are debug lines: not for people
    try:
        client = NimbusClient(**target.client_args(), timeout=timeout)
    except ValueError as exc:      # a certificate file that cannot be used
        raise click.ClickException(str(exc)) from None
    try:
        with client:
            yield client
    except NimbusClientError as exc:
        raise click.ClickException(str(exc)) from None
    except TApplicationException as exc:
        raise click.ClickException(f"nimbus at {client.address} refused: {exc.message}") \
            from None
    except Exception as exc:
        # The IDL's exceptions (NotAliveException, ...) all carry one field: msg.
        msg = getattr(exc, "msg", None)
        if msg is None:
            raise
        raise click.ClickException(msg) from None


def topology_id(client: Any, name: str) -> str:
    for summary in client.getClusterInfo().topologies:
        if summary.name == name:
            return str(summary.id)
    raise click.ClickException(f"no topology named {name!r} (see 'nimbus-thrift list')")
