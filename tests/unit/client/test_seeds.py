"""Nimbus seeds as written (host[:port] lists) and a follower's refusal read back
(nimbus_thrift.client.seeds; no sockets), and the client settings that carry seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.client.errors import ServerError
from nimbus_thrift.client.seeds import (LeaderRefusal, leader_refusal, parse_seed,
                                        parse_seeds)
from nimbus_thrift.client.settings import (ClientSettings, ClientSettingsError,
                                           load_client_settings)
from nimbus_thrift.idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE
from nimbus_thrift.rpc.errors import AppErrorCode


@pytest.mark.parametrize("text, address", [
    ("nimbus1", ("nimbus1", 6627)),
    (" nimbus1:6628 ", ("nimbus1", 6628)),
    ("10.0.0.1:80", ("10.0.0.1", 80)),
    ("[::1]", ("::1", 6627)),
    ("[2001:db8::3]:7000", ("2001:db8::3", 7000)),
    ("::1", ("::1", 6627)),                       # a bare IPv6 address names no port
])
def test_a_seed_is_host_or_host_port(text, address):
    assert parse_seed(text, 6627) == address


@pytest.mark.parametrize("text, message", [
    ("", "a nimbus seed must be host or host:port, not ''."),
    ("a:", "nimbus seed 'a:': the port must be an integer from 1 to 65535, not ''."),
    ("a:0", "the port must be an integer from 1 to 65535, not '0'."),
    ("a:70000", "not '70000'."),
    ("a:http", "not 'http'."),
    (":80", "nimbus seed ':80' has a port but no host."),
    ("[::1", "an IPv6 address is written [address] or [address]:port."),
    ("[::1]x", "an IPv6 address is written [address] or [address]:port."),
])
def test_a_bad_seed_is_a_sentence_quoting_it(text, message):
    with pytest.raises(ValueError) as info:
        parse_seed(text, 6627)
    assert message in str(info.value)


def test_lists_keep_their_order_once_each_and_take_the_default_port():
    assert parse_seeds("a,b:6628,c", 7000) == [("a", 7000), ("b", 6628), ("c", 7000)]
    assert parse_seeds(["a", ("b", 1), "a:7000", "b:1"], 7000) == [("a", 7000), ("b", 1)]
    with pytest.raises(ValueError, match="give at least one nimbus seed"):
        parse_seeds([], 6627)
    with pytest.raises(ValueError, match="not ''"):
        parse_seeds("a,,b", 6627)


def _refusal(message: str, code: int = AppErrorCode.INTERNAL_ERROR) -> ServerError:
    return ServerError("f", 6627, "killTopology", code, message)


def test_a_followers_refusal_names_the_leader_or_says_there_is_none():
    assert leader_refusal(_refusal(NOT_LEADER_MESSAGE.format(leader="n2:6628")), 6627) \
        == LeaderRefusal(("n2", 6628), NOT_LEADER_MESSAGE.format(leader="n2:6628"))
    v6 = NOT_LEADER_MESSAGE.format(leader="[2001:db8::2]:6627")
    assert leader_refusal(_refusal(v6), 1).leader == ("2001:db8::2", 6627)
    assert leader_refusal(_refusal(NO_LEADER_MESSAGE), 6627) \
        == LeaderRefusal(None, NO_LEADER_MESSAGE)


@pytest.mark.parametrize("exc", [
    _refusal("boom"),                                                  # a handler crash
    _refusal(NO_LEADER_MESSAGE, AppErrorCode.UNKNOWN_METHOD),          # another code
    _refusal(NOT_LEADER_MESSAGE.format(leader="n2:99999")),            # no such port
    ValueError(NO_LEADER_MESSAGE),
])
def test_anything_else_is_no_refusal(exc):
    assert leader_refusal(exc, 6627) is None


def test_the_client_takes_seeds_and_one_seed_is_one_host():
    one = NimbusClient(hosts="n1:7000")
    assert (one.host, one.port, one.seeds, one._router) == ("n1", 7000, ["n1:7000"], None)
    several = NimbusClient(port=7000, hosts=["n1", "n2:6628"])
    assert (several.host, several.port) == ("n1", 7000)
    assert several.seeds == ["n1:7000", "n2:6628"]
    assert repr(several) == "<NimbusClient n1:7000,n2:6628 idle>"
    with pytest.raises(ValueError, match="unix_socket and several hosts exclude"):
        NimbusClient(hosts="a,b", unix_socket="/tmp/x.sock")
    with pytest.raises(ValueError, match="nimbus seed 'b:0'"):
        NimbusClient(hosts="a,b:0")
    with pytest.raises(ValueError, match="leader_wait must be a positive number"):
        NimbusClient(hosts="a,b", leader_wait=0)


# --------------------------------------------------------------------------- settings


def _load(tmp_path: Path, flags=None, env=None, text: str | None = None) -> ClientSettings:
    file = tmp_path / "client.yaml"
    if text is not None:
        file.write_text(text)
    return load_client_settings(flags, env=env or {}, file=file)


def test_a_host_with_commas_is_a_list_of_seeds(tmp_path):
    settings = _load(tmp_path, {"host": "a, b:6628,[::1]:7"})
    assert settings == ClientSettings(nimbus_seeds=("a", "b:6628", "[::1]:7"))
    assert settings.client_args(tmp_path / "none") == {
        "hosts": ["a", "b:6628", "[::1]:7"], "port": 6627}
    # One host is a host, exactly as before.
    assert _load(tmp_path, {"host": "a"}) == ClientSettings(host="a")


def test_nimbus_seeds_from_the_file_and_the_environment(tmp_path):
    settings = _load(tmp_path, {"port": 7000}, text="nimbus_seeds: [a, 'b:6628']\n")
    assert settings.client_args(tmp_path / "none") == {"hosts": ["a", "b:6628"],
                                                       "port": 7000}
    env = {"NIMBUS_THRIFT_NIMBUS_SEEDS": "c,d"}
    assert _load(tmp_path, env=env).nimbus_seeds == ("c", "d")


def test_the_later_source_says_where_the_nimbus_is(tmp_path):
    # A flag's host replaces the file's seeds, and a flag's seeds the file's host.
    assert _load(tmp_path, {"host": "x"}, text="nimbus_seeds: [a, b]\n") \
        == ClientSettings(host="x")
    assert _load(tmp_path, {"host": "x,y"}, text="host: a\n") \
        == ClientSettings(nimbus_seeds=("x", "y"))
    assert _load(tmp_path, env={"NIMBUS_THRIFT_HOST": "e"}, text="nimbus_seeds: [a, b]\n") \
        == ClientSettings(host="e")


@pytest.mark.parametrize("text, message", [
    ("nimbus_seeds: [a, 'b:0']\n", "nimbus_seeds in {file}: nimbus seed 'b:0': the port "
                                   "must be an integer from 1 to 65535, not '0'."),
    ("nimbus_seeds: 5\n", "nimbus_seeds in {file}: nimbus seeds must be a list of host or "
                          "host:port, not 5."),
    ("nimbus_seeds: []\n", "nimbus seeds must be a list of host or host:port, not []."),
    ("host: a\nnimbus_seeds: [b, c]\n", "host in {file} and nimbus_seeds in {file} both say "
                                        "where the nimbus is: give one."),
    ("seeds: [a]\n", "Several nimbus daemons: nimbus_seeds (a list of host[:port]) "
                     "instead of host."),
])
def test_bad_seeds_are_one_sentence_naming_where(tmp_path, text, message):
    with pytest.raises(ClientSettingsError) as info:
        _load(tmp_path, text=text)
    assert message.format(file=tmp_path / "client.yaml") in str(info.value)


def test_a_bad_seed_in_a_flag_names_the_flag(tmp_path):
    with pytest.raises(ClientSettingsError, match="^--host: nimbus seed 'b:x'"):
        _load(tmp_path, {"host": "a,b:x"})
