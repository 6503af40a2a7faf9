"""Nimbus seeds (Storm's ``nimbus.seeds``): the daemons of an HA cluster a client may
ask, written ``host[:port]``; and what a follower's refusal of a state change says.

Socket-free: :mod:`.leader` does the asking and following with these.

A seed is ``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; an IPv6 address without
brackets (more than one colon) is a host with no port. A list is a sequence of seeds
or one string of them separated by commas (``a,b:6628,c``); seeds without a port take
the client's port.

A follower refuses a state change with a ``TApplicationException`` INTERNAL_ERROR
whose message is :data:`~nimbus_thrift.idl.NOT_LEADER_MESSAGE` (naming the leader) or
:data:`~nimbus_thrift.idl.NO_LEADER_MESSAGE` (none is elected); the client sees it as
a :class:`~.errors.ServerError`, which :func:`leader_refusal` reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..idl import NO_LEADER_MESSAGE, NOT_LEADER_PATTERN
from ..rpc.errors import AppErrorCode
from .errors import ServerError, format_address

#: A nimbus's TCP address.
Address = tuple[str, int]


def parse_seed(text: str, default_port: int) -> Address:
    """``(host, port)`` of one seed, ``default_port`` when it names none.

    Raises:
        ValueError: an empty seed, an unclosed bracket, a port that is not an integer
            from 1 to 65535, in a sentence quoting the seed.
    """
    seed = text.strip() if isinstance(text, str) else text
    if not isinstance(seed, str) or not seed:
        raise ValueError(f"a nimbus seed must be host or host:port, not {text!r}.")
    if seed.startswith("["):
        host, bracket, rest = seed[1:].partition("]")
        if not bracket or not host or (rest and not rest.startswith(":")):
            raise ValueError(f"nimbus seed {seed!r}: an IPv6 address is written [address] "
                             f"or [address]:port.")
        port_text = rest[1:] if rest else None
    elif seed.count(":") == 1:
        host, _, port_text = seed.partition(":")
        if not host:
            raise ValueError(f"nimbus seed {seed!r} has a port but no host.")
    else:
        host, port_text = seed, None     # a name, an IPv4 address, or a bare IPv6 one
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"nimbus seed {seed!r}: the port must be an integer from 1 to "
                         f"65535, not {port_text!r}.")
    return host, int(port_text)


def parse_seeds(seeds: str | Iterable[str | Address], default_port: int) -> list[Address]:
    """The addresses of a list of seeds (see the module docstring), in order, each
    once (a repeated seed would only be asked twice).

    Raises:
        ValueError: an empty list, or a seed :func:`parse_seed` refuses.
    """
    items: Iterable[str | Address] = seeds.split(",") if isinstance(seeds, str) else seeds
    out: list[Address] = []
    for item in items:
        if isinstance(item, tuple):
            address = parse_seed(format_address(*item), default_port)
        else:
            address = parse_seed(item, default_port)
        if address not in out:
            out.append(address)
    if not out:
        raise ValueError(f"give at least one nimbus seed, not {seeds!r}.")
    return out


def seed_text(address: Address) -> str:
    """``host:port`` (``[v6]:port``), as seeds are written and errors name them."""
    return format_address(*address)


def seeds_text(addresses: Sequence[Address]) -> str:
    return ", ".join(seed_text(a) for a in addresses)


@dataclass(frozen=True)
class LeaderRefusal:
    """A follower refused a state change: ``leader`` is where to send it, None while
    no leader is elected. Nothing of the call took effect (the daemon refuses before
    acting), so it may be sent again."""

    leader: Address | None
    message: str


def leader_refusal(exc: BaseException, default_port: int) -> LeaderRefusal | None:
    """What ``exc`` says of the leader, if it is a follower's refusal; None otherwise
    (any other error, or a leader's address that cannot be read)."""
    if not isinstance(exc, ServerError) or exc.code != AppErrorCode.INTERNAL_ERROR:
        return None
    message = exc.server_message or ""
    if NO_LEADER_MESSAGE in message:
        return LeaderRefusal(None, message)
    found = NOT_LEADER_PATTERN.search(message)
    if found is None:
        return None
    try:
        return LeaderRefusal(parse_seed(found.group(1), default_port), message)
    except ValueError:
        return None
