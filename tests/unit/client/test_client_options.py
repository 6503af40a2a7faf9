"""NimbusClient's arguments (its ClientOptions): each wrong one is a ValueError with a
sentence naming it, TLS and a Unix socket exclude each other, and on a Unix socket the
host and port are its path and 0. No sockets."""

from __future__ import annotations

import pytest

from nimbus_thrift.client.client import NimbusClient


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kwargs, text", [
    ({"host": ""}, "host must be a non-empty string"),
    ({"port": 0}, "port must be an integer from 1 to 65535, not 0."),
    ({"port": 65536}, "port must be an integer from 1 to 65535"),
    ({"port": "6627"}, "port must be an integer"),
    ({"port": True}, "port must be an integer"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, not 0."),
    ({"timeout": -1.5}, "timeout must be a positive number"),
    ({"timeout": float("nan")}, "timeout must be a positive number"),
    ({"timeout": float("inf")}, "timeout must be a positive number"),
    ({"timeout": None}, "timeout must be a positive number"),
    ({"connect_timeout": 0.0}, "connect_timeout must be a positive number"),
    ({"connect_attempts": 0}, "connect_attempts must be an integer of at least 1, not 0."),
    ({"connect_attempts": 2.5}, "connect_attempts must be an integer"),
    ({"backoff_initial": -0.1}, "backoff_initial must be a number of seconds of at least 0"),
    ({"backoff_factor": 0.5}, "backoff_factor must be a number of at least 1"),
    ({"backoff_initial": 3.0, "backoff_max": 2.0}, "backoff_max must be a number of seconds "
                                                   "of at least backoff_initial (3.0)"),
    ({"max_frame_size": 0}, "max_frame_size must be an integer of at least 1"),
    ({"decoded_size_factor": 0.5}, "decoded_size_factor must be a number of at least 1"),
    ({"decoded_size_factor": float("nan")}, "decoded_size_factor must be a number of at least"),
    ({"decoded_size_factor": True}, "decoded_size_factor must be a number of at least 1"),
])
def test_invalid_arguments_are_value_errors_with_a_sentence(kwargs, text):
    with pytest.raises(ValueError) as info:
        NimbusClient(**{"host": "127.0.0.1", **kwargs})
    assert text in str(info.value)


def test_upload_chunk_size_is_validated(tmp_path):
    client = NimbusClient("127.0.0.1", 1)
    with pytest.raises(ValueError, match="chunk_size must be an integer of at least 1"):
        client.upload_file(tmp_path / "x", chunk_size=0)


# --------------------------------------------------------------------------- TLS and Unix arguments


@pytest.mark.parametrize("kwargs, text", [
    ({"unix_socket": "/tmp/n.sock", "ca_file": "/ca.pem"},
     "unix_socket and TLS settings exclude each other"),
    ({"unix_socket": "/tmp/n.sock", "ssl_context": "ctx"},
     "unix_socket and TLS settings exclude each other"),
    ({"ssl_context": "ctx"}, "ssl_context must be an ssl.SSLContext, not 'ctx'."),
    ({"unix_socket": ""}, "unix_socket must be a path, not ''."),
    ({"unix_socket": 5}, "unix_socket must be a path, not 5."),
    ({"ca_file": 5}, "ca_file must be a path, not 5."),
    ({"cert_file": ""}, "cert_file must be a path, not ''."),
    ({"ssl_context": None, "key_file": "/k.pem"},
     "key_file /k.pem was given without cert_file"),
])
def test_tls_and_unix_arguments_are_value_errors_with_a_sentence(kwargs, text):
    with pytest.raises(ValueError) as info:
        NimbusClient("127.0.0.1", **kwargs)
    assert text in str(info.value)


def test_ssl_context_excludes_certificate_files():
    import ssl
    with pytest.raises(ValueError, match="give either ssl_context or cert_file, ca_file, "
                                         "not both"):
        NimbusClient("127.0.0.1", ssl_context=ssl.create_default_context(),
                     cert_file="/c.pem", ca_file="/ca.pem")


def test_with_a_unix_socket_host_and_port_are_its_path_and_port_0():
    client = NimbusClient("ignored", 1, unix_socket="/run/nimbus.sock")
    assert (client.host, client.port, client.address) == ("/run/nimbus.sock", 0,
                                                          "unix:/run/nimbus.sock")
    assert client.tls is None
    client.close()
