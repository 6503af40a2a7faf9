"""Shell completion of what only the daemon knows: topology names and blob keys.

click completes commands, flags and file paths itself (``_NIMBUS_THRIFT_COMPLETE``, see
docs/cli.md); these ask the daemon the flags typed so far point at (--host, --port,
--unix-socket, TLS, else the environment, client.yaml and the local socket, as the
command would), once, with a short timeout, and complete nothing when it does not
answer: a prompt must not hang on a stopped daemon.
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem

#: Seconds a completion waits to connect and for the reply: a person is at the prompt.
COMPLETION_TIMEOUT = 1.0
_CONNECTION_FLAGS = ("host", "port", "tls_cert", "tls_key", "tls_ca", "unix_socket")


def _ask(ctx: click.Context, call: Any) -> list[str]:
    """``call(client)``'s names from the daemon the context's flags point at, or []."""
    from ..client.client import NimbusClient
    from ..client.settings import load_client_settings

    try:
        target = load_client_settings({name: ctx.params.get(name)
                                       for name in _CONNECTION_FLAGS})
        client = NimbusClient(**target.client_args(), timeout=COMPLETION_TIMEOUT,
                              connect_timeout=COMPLETION_TIMEOUT, connect_attempts=1)
        with client:
            return [str(name) for name in call(client)]
    except Exception:   # no daemon, refused, bad settings: nothing to offer
        return []


def topology_names(ctx: click.Context, param: click.Parameter,
                   incomplete: str) -> list[CompletionItem]:
    """The running daemon's topology names starting with ``incomplete``."""
    names = _ask(ctx, lambda client: [s.name for s in client.getClusterInfo().topologies])
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def blob_keys(ctx: click.Context, param: click.Parameter,
              incomplete: str) -> list[CompletionItem]:
    """The daemon's blob keys starting with ``incomplete``."""
    from ..client.blobs import list_blobs

    keys = _ask(ctx, list_blobs)
    return [CompletionItem(key) for key in sorted(keys) if key.startswith(incomplete)]
