"""nimbus_thrift.rpc.options.ServerOptions: validated once, frozen, errors are sentences."""

from __future__ import annotations

import dataclasses
import math

import pytest

from nimbus_thrift.rpc import options
from nimbus_thrift.rpc.options import OptionError, ServerOptions

INT_OPTIONS = ["worker_threads", "worker_queue_size", "max_frame_size",
               "max_read_buffer_bytes", "max_connections", "backlog", "max_unsent_reply_bytes"]
#: Positive integers where None turns the limit off (or, per peer, derives it).
OPTIONAL_INT_OPTIONS = ["max_connections_per_peer", "min_frame_rate", "send_buffer_size"]
TIMEOUT_OPTIONS = ["idle_timeout", "frame_read_timeout", "write_timeout",
                   "first_request_timeout", "park_timeout"]


def test_defaults_are_the_named_constants() -> None:
    o = ServerOptions()
    assert o.worker_threads == options.DEFAULT_WORKER_THREADS == 64
    assert o.worker_queue_size == options.DEFAULT_WORKER_QUEUE_SIZE
    assert o.max_frame_size == options.DEFAULT_MAX_FRAME_SIZE == 16_384_000
    assert o.max_read_buffer_bytes == options.DEFAULT_MAX_READ_BUFFER_BYTES == 256 << 20
    assert o.max_connections == options.DEFAULT_MAX_CONNECTIONS
    assert o.idle_timeout == options.DEFAULT_IDLE_TIMEOUT
    assert o.frame_read_timeout == options.DEFAULT_FRAME_READ_TIMEOUT
    assert o.write_timeout == options.DEFAULT_WRITE_TIMEOUT
    assert o.backlog == options.DEFAULT_BACKLOG
    assert o.strict_read is False
    assert o.first_request_timeout == options.DEFAULT_FIRST_REQUEST_TIMEOUT
    assert o.park_timeout == options.DEFAULT_PARK_TIMEOUT
    assert o.min_frame_rate == options.DEFAULT_MIN_FRAME_RATE
    assert o.frame_rate_grace == options.DEFAULT_FRAME_RATE_GRACE
    assert o.max_unsent_reply_bytes == options.DEFAULT_MAX_UNSENT_REPLY_BYTES
    assert o.send_buffer_size == options.DEFAULT_SEND_BUFFER_SIZE
    assert o.max_connections_per_peer is None
    assert o.per_peer_limit == 1024


def test_deadlines_fit_inside_each_other() -> None:
    """The defaults make sense together: a first request and a parked frame are
    bounded well before the long clocks (Storm's 600 s idle timeout)."""
    o = ServerOptions()
    assert o.first_request_timeout is not None and o.frame_read_timeout is not None
    assert o.park_timeout is not None and o.idle_timeout is not None
    assert o.park_timeout < o.first_request_timeout < o.frame_read_timeout < o.idle_timeout
    assert o.frame_rate_grace < o.frame_read_timeout


@pytest.mark.parametrize("max_connections, explicit, limit", [
    (4096, None, 1024),      # a quarter: four addresses to fill the server
    (2, None, 2),            # tiny servers: the floor, capped at max_connections
    (100, None, 64),         # the floor beats a quarter (25)
    (10_000, None, 2500),
    (4096, 10, 10),          # explicit
    (50, 500, 50),           # never more than max_connections
])
def test_per_peer_limit(max_connections: int, explicit: int | None, limit: int) -> None:
    o = ServerOptions(max_connections=max_connections, max_connections_per_peer=explicit)
    assert o.per_peer_limit == limit


@pytest.mark.parametrize("name", OPTIONAL_INT_OPTIONS)
@pytest.mark.parametrize("value", [0, -1, True, 1.5, "4"])
def test_bad_optional_integer_options(name: str, value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(**{name: value})
    _assert_sentence(info.value, name, value)
    assert "positive integer or None" in str(info.value)
    assert getattr(ServerOptions(**{name: None}), name) is None


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, True, "5", None])
def test_bad_frame_rate_grace(value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(frame_rate_grace=value)  # type: ignore[arg-type]
    _assert_sentence(info.value, "frame_rate_grace", value)
    assert ServerOptions(frame_rate_grace=0).frame_rate_grace == 0


def test_frozen() -> None:
    o = ServerOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.worker_threads = 1  # type: ignore[misc]


def test_good_values_are_kept() -> None:
    o = ServerOptions(worker_threads=1, worker_queue_size=1, max_frame_size=1,
                      max_read_buffer_bytes=1, max_connections=1, backlog=1,
                      idle_timeout=None, frame_read_timeout=0.001, write_timeout=5,
                      strict_read=True)
    assert (o.worker_threads, o.idle_timeout, o.frame_read_timeout, o.write_timeout,
            o.strict_read) == (1, None, 0.001, 5, True)


def _assert_sentence(exc: OptionError, name: str, value: object) -> None:
    message = str(exc)
    assert message.startswith(name + " ")
    assert repr(value) in message
    assert message.endswith(".")


@pytest.mark.parametrize("name", INT_OPTIONS)
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 4.0, "4", None])
def test_bad_integer_options(name: str, value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(**{name: value})
    _assert_sentence(info.value, name, value)
    assert "positive integer" in str(info.value)


@pytest.mark.parametrize("name", TIMEOUT_OPTIONS)
@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5, True, "30", [30]])
def test_bad_timeouts(name: str, value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(**{name: value})
    _assert_sentence(info.value, name, value)
    assert "seconds" in str(info.value)


@pytest.mark.parametrize("name", TIMEOUT_OPTIONS)
def test_nan_timeout_is_refused(name: str) -> None:
    # NaN is not a positive number: every `elapsed > timeout` comparison is False, so a
    # NaN frame_read_timeout would silently turn slowloris protection off.
    with pytest.raises(OptionError) as info:
        ServerOptions(**{name: math.nan})
    assert name in str(info.value)


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_bad_strict_read(value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(strict_read=value)  # type: ignore[arg-type]
    _assert_sentence(info.value, "strict_read", value)


def test_option_error_is_a_value_error() -> None:
    assert issubclass(OptionError, ValueError)


def test_from_kwargs_builds_the_same_options() -> None:
    assert ServerOptions.from_kwargs(worker_threads=3, strict_read=True) == \
        ServerOptions(worker_threads=3, strict_read=True)
    assert ServerOptions.from_kwargs() == ServerOptions()


def test_from_kwargs_names_an_unknown_option() -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions.from_kwargs(worker_thread=4)
    message = str(info.value)
    assert "worker_thread" in message.split(";")[0]
    assert "worker_threads" in message   # the known options are listed after it
    assert message.endswith(".")


def test_from_kwargs_names_every_unknown_option_sorted() -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions.from_kwargs(zeta=1, alpha=2, backlog=5)
    first = str(info.value).split(";")[0]
    assert "alpha, zeta" in first
    assert "backlog" not in first


def test_from_kwargs_still_validates_values() -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions.from_kwargs(backlog=0)
    _assert_sentence(info.value, "backlog", 0)


# --------------------------------------------------------------------------- forms


def test_every_transport_and_protocol_accepted_by_default() -> None:
    opts = ServerOptions()
    assert opts.transports == ("framed", "unframed", "header")
    assert opts.protocols == ("binary", "compact")


def test_forms_are_kept_in_canonical_order_as_a_tuple() -> None:
    opts = ServerOptions(transports=["header", "framed"], protocols={"compact"})
    assert opts.transports == ("framed", "header")
    assert opts.protocols == ("compact",)


@pytest.mark.parametrize("name, value", [
    ("transports", ()), ("transports", "framed"), ("transports", ("http",)),
    ("transports", ("framed", 1)), ("protocols", ("json",)), ("protocols", None),
    ("protocols", []),
])
def test_bad_forms_are_refused_with_a_sentence(name: str, value: object) -> None:
    with pytest.raises(OptionError) as info:
        ServerOptions(**{name: value})     # type: ignore[arg-type]
    _assert_sentence(info.value, name, value)
