"""The daemon's configuration (nimbus_thrift.nimbus.config): file < environment < flags,
every value checked once with a sentence naming the key and where it came from; and the
TLS context made from it (nimbus_thrift.nimbus.security.tlsconf), with certificates made by the
openssl command and handshakes in memory."""

from __future__ import annotations

import dataclasses
import json
import ssl
import typing
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import make_test_pki
from nimbus_thrift.idl import NIMBUS_PORT as DEFAULT_PORT
from nimbus_thrift.nimbus.config import (ENV_PREFIX, ConfigError, NimbusConfig,
                                         load_config, to_public)
from nimbus_thrift.nimbus.security.tlsconf import server_ssl_context

FIELDS = [f.name for f in dataclasses.fields(NimbusConfig)]


def yaml_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nimbus.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def config(file: Path | None = None, env: dict[str, str] | None = None,
           **flags: Any) -> NimbusConfig:
    return load_config(file, env or {}, flags)


# --- sources and precedence -------------------------------------------------------------

def test_defaults() -> None:
    cfg = load_config(None, {}, {})
    assert cfg == NimbusConfig()
    assert cfg.port == DEFAULT_PORT and cfg.host == "127.0.0.1"


def test_default_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert NimbusConfig().data_dir == tmp_path / "nimbus-thrift"


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "port: 1001\nhost: file.example\nworker_threads: 3\n"
                               "log_level: debug\n")
    env = {"NIMBUS_THRIFT_PORT": "1002", "NIMBUS_THRIFT_HOST": "env.example"}
    cfg = config(path, env, port=1003)
    assert cfg.port == 1003                     # flag over env over file
    assert cfg.host == "env.example"            # env over file
    assert cfg.worker_threads == 3              # file over default
    assert cfg.log_level == "debug"
    assert cfg.max_frame_size == NimbusConfig().max_frame_size   # default
    assert config(path, env).port == 1002
    assert config(path).port == 1001


def test_none_flags_mean_not_given(tmp_path: Path) -> None:
    cfg = config(yaml_file(tmp_path, "port: 1001\n"), {"NIMBUS_THRIFT_HOST": "h"},
                 port=None, host=None)
    assert (cfg.port, cfg.host) == (1001, "h")


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIMBUS_THRIFT_WORKER_THREADS", "9")
    assert load_config(None, None, None).worker_threads == 9


def test_every_field_has_an_env_variable(tmp_path: Path) -> None:
    env = {ENV_PREFIX + "HOST": "0.0.0.0", ENV_PREFIX + "PORT": "0",
           ENV_PREFIX + "DATA_DIR": str(tmp_path / "d"), ENV_PREFIX + "IDLE_TIMEOUT": "1.5",
           ENV_PREFIX + "LAUNCHER": "spark", ENV_PREFIX + "LOG_FORMAT": "json",
           ENV_PREFIX + "SWEEP_SECS": "2", ENV_PREFIX + "MAX_UPLOAD_BYTES": "1000"}
    cfg = config(env=env)
    assert (cfg.host, cfg.port, cfg.data_dir, cfg.idle_timeout, cfg.launcher,
            cfg.log_format, cfg.sweep_secs, cfg.max_upload_bytes) == \
        ("0.0.0.0", 0, tmp_path / "d", 1.5, "spark", "json", 2.0, 1000)
    assert isinstance(cfg.sweep_secs, float)


def test_unrelated_env_ignored() -> None:
    assert config(env={"NIMBUS_THRIFT_NOPE": "x", "PORT": "1"}) == NimbusConfig()


def test_yaml_keys_with_dashes_or_underscores(tmp_path: Path) -> None:
    cfg = config(yaml_file(tmp_path, "data-dir: /srv/nimbus\nmax_frame_size: 4096\n"
                                     "file-copy-expiration-secs: 60\nspark-master: "
                                     "spark://m:7077\n"))
    assert cfg.data_dir == Path("/srv/nimbus") and cfg.max_frame_size == 4096
    assert cfg.file_copy_expiration_secs == 60.0 and cfg.spark_master == "spark://m:7077"


def test_data_dir_expands_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config(data_dir="~/nimbus").data_dir == tmp_path / "nimbus"


def test_frozen() -> None:
    cfg = config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1                                        # type: ignore[misc]


#: What getNimbusConf and the REST API's configuration never show: paths (where the
#: state, the keys and the socket are; what is run) and lists of principals.
PRIVATE = {"data_dir", "tls_cert_file", "tls_key_file", "tls_client_ca_file",
           "unix_socket", "spark_cache_dir", "spark_submit", "admins", "users",
           "principal_users", "shared_dir", "zookeeper_servers"}


def test_to_public() -> None:
    public = to_public(config(data_dir="/srv/n"))
    assert public["port"] == DEFAULT_PORT and public["allow_anonymous"] is False
    assert set(public) == set(FIELDS) - PRIVATE


def test_to_public_shows_no_path_and_no_principal(tmp_path: Path) -> None:
    secret = tmp_path / "very-secret-dir"
    secret.mkdir()
    cert, key = secret / "server.pem", secret / "server.key"
    for path in (cert, key):
        path.write_text("x")
    cfg = config(data_dir=str(secret / "data"), tls_cert_file=str(cert),
                 tls_key_file=str(key), unix_socket=str(secret / "n.sock"),
                 spark_cache_dir=str(secret / "cache"),
                 spark_submit=f"{secret}/bin/spark-submit", admins="ops-person",
                 users="alice-person", principal_users="ci-cert=ci-person")
    shown = json.dumps(to_public(cfg))
    for word in ("very-secret-dir", "ops-person", "alice-person", "ci-person", "ci-cert"):
        assert word not in shown
    # Any setting typed as a path is private, whatever its name (a new one too).
    assert {name for name, kind in typing.get_type_hints(NimbusConfig).items()
            if kind in (Path, Path | None)} <= PRIVATE


# --- files --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n", "~\n"])
def test_empty_yaml_file_is_fine(tmp_path: Path, text: str) -> None:
    assert config(yaml_file(tmp_path, text)) == NimbusConfig()


@pytest.mark.parametrize("text,kind", [("- port\n- 1\n", "list"), ("6627\n", "int"),
                                       ("just words\n", "str")])
def test_yaml_that_is_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = yaml_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        config(path)
    assert str(info.value) == (f"config file {path} must be a mapping of settings, "
                               f"not {kind}")


def test_unknown_key_in_file_lists_known_keys(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "port: 1\nthrift-port: 6627\n")
    with pytest.raises(ConfigError) as info:
        config(path)
    message = str(info.value)
    assert message.startswith(f"config file {path}: unknown setting 'thrift-port'; known: ")
    assert message.endswith(", ".join(sorted(FIELDS)))


def test_invalid_yaml(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "port: [1\n")
    with pytest.raises(ConfigError, match=f"config file {path} is not valid YAML"):
        config(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as info:
        config(path)
    assert str(info.value) == f"cannot read config file {path}: No such file or directory"


def test_directory_as_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"cannot read config file {tmp_path}: "
                                          "Is a directory"):
        config(tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod 0 does not stop root, which these tests may run as: fail the read instead.
    path = yaml_file(tmp_path, "port: 1\n")

    def denied(self: Path, *args: Any, **kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(ConfigError) as info:
        config(path)
    assert str(info.value) == f"cannot read config file {path}: Permission denied"


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "nimbus.yaml"
    path.write_bytes(b"host: \xff\xfe\x00binary\n")
    with pytest.raises(ConfigError, match=f"cannot read config file {path}: .*UTF-8"):
        config(path)


# --- types ------------------------------------------------------------------------------

def test_env_wrong_type_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        config(env={"NIMBUS_THRIFT_PORT": "abc"})
    assert str(info.value) == ("environment variable NIMBUS_THRIFT_PORT: port must be an "
                               "integer, not 'abc'")


@pytest.mark.parametrize("value", ["1.5", "", "0x10", "true", "6627 tcp"])
def test_env_int_refusals(value: str) -> None:
    with pytest.raises(ConfigError, match="NIMBUS_THRIFT_WORKER_THREADS: worker_threads "
                                          "must be an integer"):
        config(env={"NIMBUS_THRIFT_WORKER_THREADS": value})


@pytest.mark.parametrize("value", ["soon", "", "1s"])
def test_env_float_refusals(value: str) -> None:
    with pytest.raises(ConfigError, match="NIMBUS_THRIFT_IDLE_TIMEOUT: idle_timeout must "
                                          "be a number"):
        config(env={"NIMBUS_THRIFT_IDLE_TIMEOUT": value})


@pytest.mark.parametrize("key", ["port", "worker_threads", "max_frame_size"])
@pytest.mark.parametrize("value", ["true", "false", "yes"])
def test_bool_is_not_an_int_in_yaml(tmp_path: Path, key: str, value: str) -> None:
    path = yaml_file(tmp_path, f"{key}: {value}\n")
    with pytest.raises(ConfigError, match=f"config file {path}: {key} must be an integer, "
                                          "not (True|False)"):
        config(path)


@pytest.mark.parametrize("value", [True, False])
def test_bool_is_not_an_int_or_a_number_in_flags(value: bool) -> None:
    with pytest.raises(ConfigError, match=f"--port: port must be an integer, not {value}"):
        config(port=value)
    with pytest.raises(ConfigError, match=f"--idle-timeout: idle_timeout must be a number, "
                                          f"not {value}"):
        config(idle_timeout=value)


@pytest.mark.parametrize("text,message", [
    ("port: 1.5\n", "port must be an integer, not 1.5"),
    ("port: [1]\n", "port must be an integer, not \\[1\\]"),
    ("port:\n", "port must be an integer, not None"),
    ("idle_timeout: {a: 1}\n", "idle_timeout must be a number"),
    ("host: 5\n", "host must be a string, not 5"),
    ("host: [a]\n", "host must be a string"),
    ("data_dir: 5\n", "data_dir must be a path, not 5"),
    ("data_dir: ''\n", "data_dir must be a path, not ''"),
    ("log_level: null\n", "log_level must be a string, not None"),
])
def test_yaml_wrong_types(tmp_path: Path, text: str, message: str) -> None:
    path = yaml_file(tmp_path, text)
    with pytest.raises(ConfigError, match=f"^config file {path}: {message}"):
        config(path)


def test_integral_float_is_an_int(tmp_path: Path) -> None:
    assert config(yaml_file(tmp_path, "port: 80.0\n")).port == 80


def test_unknown_flag() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'nope'"):
        config(nope=1)


# --- ranges -----------------------------------------------------------------------------

@pytest.mark.parametrize("port", [-1, 65536, 10 ** 6])
def test_port_out_of_range(port: int) -> None:
    with pytest.raises(ConfigError) as info:
        config(port=port)
    assert str(info.value) == (f"invalid configuration: port must be between 0 and 65535, "
                               f"not {port}")


@pytest.mark.parametrize("port", [0, 1, 65535])
def test_port_in_range(port: int) -> None:
    assert config(port=port).port == port


SECONDS = ["idle_timeout", "file_copy_expiration_secs", "upload_retention_secs",
           "sweep_secs"]


@pytest.mark.parametrize("key", SECONDS)
@pytest.mark.parametrize("value", ["0", "-1", "-0.5", "nan", "NaN", "inf", "-inf",
                                   "Infinity"])
def test_seconds_must_be_positive_and_finite(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid configuration: {key} must be a positive "
                                          "number of seconds"):
        config(env={ENV_PREFIX + key.upper(): value})


@pytest.mark.parametrize("key", SECONDS)
def test_seconds_accepted(key: str) -> None:
    assert getattr(config(env={ENV_PREFIX + key.upper(): "0.25"}), key) == 0.25


@pytest.mark.parametrize("key", SECONDS)
@pytest.mark.parametrize("value", [0, -5])
def test_seconds_checked_when_built_directly(key: str, value: Any) -> None:
    # NimbusConfig is public; an int where seconds are due must not skip the check.
    with pytest.raises(ConfigError, match=f"{key} must be a positive number of seconds"):
        NimbusConfig(**{key: value})


@pytest.mark.parametrize("key,lowest", [("worker_threads", 1), ("max_frame_size", 64),
                                        ("max_read_buffer_bytes", 64),
                                        ("max_connections", 1), ("max_upload_bytes", 1),
                                        ("download_chunk_bytes", 1),
                                        ("max_uploads_per_peer", 1),
                                        ("max_downloads_per_peer", 1),
                                        ("max_inbox_bytes", 1), ("min_free_disk_bytes", 0)])
def test_int_lower_limits(key: str, lowest: Any) -> None:
    assert getattr(config(**{key: lowest}), key) == lowest
    with pytest.raises(ConfigError, match=f"{key} must be at least {lowest}, not "
                                          f"{lowest - 1}"):
        config(**{key: lowest - 1})


@pytest.mark.parametrize("key,value", [("log_level", "INFO"), ("log_level", "trace"),
                                       ("log_format", "xml"), ("host", ""),
                                       ("launcher", ""), ("spark_master", ""),
                                       ("spark_cache_dir", "cache"),
                                       ("spark_cache_dir", "Off")])
def test_enumerations_and_empty_strings(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid configuration: {key} must"):
        config(env={ENV_PREFIX + key.upper(): value})


@pytest.mark.parametrize("value", ["", "off", "/var/cache/nimbus", "~/cache"])
def test_spark_cache_dir_values(value: str) -> None:
    assert config(env={ENV_PREFIX + "SPARK_CACHE_DIR": value}).spark_cache_dir == value


def test_transfer_limits_from_environment_and_defaults() -> None:
    from nimbus_thrift.nimbus.settings import (DEFAULT_MAX_DOWNLOADS_PER_PEER,
                                               DEFAULT_MAX_INBOX_BYTES,
                                               DEFAULT_MAX_UPLOADS_PER_PEER,
                                               DEFAULT_MIN_FREE_DISK_BYTES)
    defaults = load_config(env={})
    assert (defaults.max_uploads_per_peer, defaults.max_downloads_per_peer,
            defaults.max_inbox_bytes, defaults.min_free_disk_bytes) == (
        DEFAULT_MAX_UPLOADS_PER_PEER, DEFAULT_MAX_DOWNLOADS_PER_PEER,
        DEFAULT_MAX_INBOX_BYTES, DEFAULT_MIN_FREE_DISK_BYTES)
    # A default a normal client never hits: room for many largest-size uploads.
    assert defaults.max_inbox_bytes >= 8 * defaults.max_upload_bytes
    loaded = load_config(env={"NIMBUS_THRIFT_MAX_UPLOADS_PER_PEER": "3",
                              "NIMBUS_THRIFT_MIN_FREE_DISK_BYTES": "0"},
                         flags={"max_inbox_bytes": 1 << 20})
    assert (loaded.max_uploads_per_peer, loaded.min_free_disk_bytes,
            loaded.max_inbox_bytes) == (3, 0, 1 << 20)
    with pytest.raises(ConfigError, match="max_uploads_per_peer must be at least 1, not 0"):
        load_config(env={"NIMBUS_THRIFT_MAX_UPLOADS_PER_PEER": "0"})


# --- principals (admins, users) ---------------------------------------------------------

def test_principals_from_yaml_lists_environment_and_flags(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "admins: [ops, 'Alice Smith']\nusers:\n  - alice\n  - 1001\n")
    cfg = config(path)
    assert cfg.admins == ("ops", "Alice Smith") and cfg.users == ("alice", "1001")
    assert config(env={ENV_PREFIX + "ADMINS": " ops , root,,"}).admins == ("ops", "root")
    assert config(env={ENV_PREFIX + "USERS": ""}).users == ()
    assert config(path, users="bob,carol").users == ("bob", "carol")        # flag: a string
    assert config(path, users=["bob"]).users == ("bob",)                     # or a list
    assert NimbusConfig().admins == () and NimbusConfig().users == ()
    assert "admins" not in to_public(cfg)


@pytest.mark.parametrize("text,shown", [("admins: {ops: 1}\n", "{'ops': 1}"),
                                        ("admins: [true]\n", "[True]"),
                                        ("admins: [[a]]\n", "[['a']]"),
                                        ("admins: 5\n", "5"), ("admins:\n", "None")])
def test_principals_of_the_wrong_type(tmp_path: Path, text: str, shown: str) -> None:
    path = yaml_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        config(path)
    assert str(info.value) == (f"config file {path}: admins must be a list of principal "
                               f"names (comma-separated in the environment and flags), "
                               f"not {shown}")


@pytest.mark.parametrize("name", [" ops", "ops\n", "", "o\x00ps", "ops\u200b"])
def test_principal_names_are_checked(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(users=[name])
    assert str(info.value) == (
        f"invalid configuration: users must list principal names (non-empty, without "
        f"surrounding spaces or control characters), not {name!r}")


def test_principals_built_directly_must_be_a_tuple() -> None:
    with pytest.raises(ConfigError, match=r"admins must be a list of principals, "
                                          r"not \['ops'\]"):
        NimbusConfig(admins=["ops"])            # type: ignore[arg-type]


# --- transport: TLS files, insecure, the Unix socket ------------------------------------

def test_transport_defaults(tmp_path: Path) -> None:
    cfg = config(data_dir=str(tmp_path / "d"))
    assert (cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_ca_file, cfg.insecure) == \
        (None, None, None, False)
    assert not cfg.mutual_tls
    assert cfg.unix_socket is None
    assert cfg.unix_socket_path() == tmp_path / "d" / "nimbus.sock"
    assert "unix_socket" not in to_public(cfg) and "tls_cert_file" not in to_public(cfg)


def test_the_default_socket_follows_the_data_dir(tmp_path: Path) -> None:
    cfg = dataclasses.replace(config(), data_dir=tmp_path / "elsewhere")
    assert cfg.unix_socket_path() == tmp_path / "elsewhere" / "nimbus.sock"


def test_unix_socket_set_or_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = config(unix_socket="run/n.sock")
    assert cfg.unix_socket_path() == tmp_path / "run" / "n.sock"       # made absolute
    off = config(env={ENV_PREFIX + "UNIX_SOCKET": ""})
    assert off.unix_socket == "" and off.unix_socket_path() is None
    assert config(yaml_file(tmp_path, "unix-socket: ''\n")).unix_socket_path() is None


def test_unix_socket_refusals(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "unix_socket:\n")
    with pytest.raises(ConfigError) as info:
        config(path)
    assert str(info.value) == (f"config file {path}: unix_socket must be a path, or empty "
                               "to turn it off, not None")
    long = "/" + "s" * 107
    with pytest.raises(ConfigError) as info:
        config(unix_socket=long)
    assert str(info.value) == (f"invalid configuration: unix_socket {long!r} is 108 bytes "
                               "long; a Unix socket path may have at most 107")


@pytest.mark.parametrize("value,expected", [("yes", True), ("false", False), ("1", True)])
def test_insecure_is_a_boolean(value: str, expected: bool) -> None:
    assert config(env={ENV_PREFIX + "INSECURE": value}).insecure is expected
    with pytest.raises(ConfigError, match="insecure must be true or false, not 'maybe'"):
        config(env={ENV_PREFIX + "INSECURE": "maybe"})


def test_tls_files_together(pki: Path) -> None:
    cert, key, ca = pki / "server.pem", pki / "server.key", pki / "ca.pem"
    both = config(tls_cert_file=str(cert), tls_key_file=str(key))
    assert (both.tls_cert_file, both.tls_key_file, both.mutual_tls) == (cert, key, False)
    mutual = config(env={ENV_PREFIX + "TLS_CERT_FILE": str(cert),
                         ENV_PREFIX + "TLS_KEY_FILE": str(key),
                         ENV_PREFIX + "TLS_CLIENT_CA_FILE": str(ca)})
    assert mutual.mutual_tls and mutual.tls_client_ca_file == ca
    assert config(env={ENV_PREFIX + "TLS_CERT_FILE": ""}).tls_cert_file is None
    with pytest.raises(ConfigError) as info:
        config(tls_cert_file=str(cert))
    assert str(info.value) == ("invalid configuration: tls_cert_file is set but tls_key_file "
                               "is not: the daemon's certificate and its private key go "
                               "together")
    with pytest.raises(ConfigError, match="tls_key_file is set but tls_cert_file is not"):
        config(tls_key_file=str(key))
    with pytest.raises(ConfigError) as info:
        config(tls_client_ca_file=str(ca))
    assert str(info.value) == ("invalid configuration: tls_client_ca_file needs "
                               "tls_cert_file and tls_key_file as well: clients check the "
                               "daemon's certificate before they show theirs")


def test_tls_files_must_be_readable(pki: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    key = pki / "server.key"
    missing = tmp_path / "absent.pem"
    with pytest.raises(ConfigError) as info:
        config(tls_cert_file=str(missing), tls_key_file=str(key))
    assert str(info.value) == (f"invalid configuration: tls_cert_file {str(missing)!r} "
                               "cannot be read: No such file or directory")
    with pytest.raises(ConfigError, match=f"tls_cert_file '{tmp_path}' cannot be read: "
                                          "Is a directory"):
        config(tls_cert_file=str(tmp_path), tls_key_file=str(key))
    # chmod 0 does not stop root, which these tests may run as: fail the open instead
    # (in the module of the registry's checks, which reads the files).
    from nimbus_thrift.nimbus import setting_checks as settings_module
    real_open = open

    def denied(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path) == key:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(settings_module, "open", denied, raising=False)
    with pytest.raises(ConfigError, match=f"tls_key_file '{key}' cannot be read: "
                                          "Permission denied"):
        config(tls_cert_file=str(pki / "server.pem"), tls_key_file=str(key))


# --- the server's TLS context (nimbus/tlsconf.py) ----------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext
               ) -> ssl.SSLObject:
    """A TLS handshake between the two contexts in memory; the server's end, or the
    server's SSLError."""
    bios = [ssl.MemoryBIO() for _ in range(4)]
    server = server_context.wrap_bio(bios[0], bios[1], server_side=True)
    client = client_context.wrap_bio(bios[2], bios[3], server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(20):
        for side, end, out, into in (("client", client, bios[3], bios[0]),
                                     ("server", server, bios[1], bios[2])):
            if not done[side]:
                try:
                    end.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            data = out.read()
            if data:
                into.write(data)
        if all(done.values()):
            # TLS 1.3: the server checks the client's certificate after the client is
            # done; a refusal shows on the server's first read.
            try:
                server.read(1)
            except ssl.SSLWantReadError:
                pass
            return server
    raise AssertionError("the handshake did not finish")


def _client(pki: Path, cert: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert is not None:
        context.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return context


def test_no_tls_without_a_certificate() -> None:
    assert server_ssl_context(config()) is None


def test_server_context_without_client_certificates(pki: Path) -> None:
    context = server_ssl_context(config(tls_cert_file=str(pki / "server.pem"),
                                        tls_key_file=str(pki / "server.key")))
    assert context is not None
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.options & ssl.OP_NO_COMPRESSION
    assert context.verify_mode == ssl.CERT_NONE
    server = _handshake(context, _client(pki, None))      # the chain was loaded: verified
    assert server.version() in ("TLSv1.2", "TLSv1.3")
    assert server.getpeercert() is None


def test_server_context_with_a_client_ca(pki: Path) -> None:
    context = server_ssl_context(config(tls_cert_file=str(pki / "server.pem"),
                                        tls_key_file=str(pki / "server.key"),
                                        tls_client_ca_file=str(pki / "ca.pem")))
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert [dict(x[0] for x in ca["subject"])["commonName"]
            for ca in context.get_ca_certs()] == ["nimbus-thrift test CA"]
    server = _handshake(context, _client(pki, "alice"))
    subject = dict(x[0] for x in server.getpeercert()["subject"])
    assert subject["commonName"] == "alice"
    for refused in (None, "stranger"):       # none presented; another CA's
        with pytest.raises(ssl.SSLError):
            _handshake(context, _client(pki, refused))


def test_server_context_refusals_are_sentences(pki: Path, tmp_path: Path) -> None:
    cert, key = str(pki / "server.pem"), str(pki / "server.key")
    with pytest.raises(ConfigError) as info:
        server_ssl_context(config(tls_cert_file=cert, tls_key_file=str(pki / "alice.key")))
    assert str(info.value) == (f"tls_key_file {str(pki / 'alice.key')!r} is not the private "
                               f"key of tls_cert_file {cert!r}")
    encrypted = str(pki / "encrypted.key")
    with pytest.raises(ConfigError) as info:
        server_ssl_context(config(tls_cert_file=cert, tls_key_file=encrypted))
    assert str(info.value) == (f"tls_key_file {encrypted!r} is encrypted; the daemon needs "
                               "it without a passphrase (readable by its user only)")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=f"^cannot load tls_cert_file '{garbage}' with "
                                          f"tls_key_file '{key}': "):
        server_ssl_context(config(tls_cert_file=str(garbage), tls_key_file=key))
    with pytest.raises(ConfigError, match=f"^cannot load tls_client_ca_file '{garbage}': "):
        server_ssl_context(config(tls_cert_file=cert, tls_key_file=key,
                                  tls_client_ca_file=str(garbage)))


# --- HA mode ------------------------------------------------------------------------------

def test_ha_settings_from_a_yaml_list_and_the_environment(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    from_file = config(yaml_file(tmp_path, f"zookeeper_servers: [a:2181, 'b:2182']\n"
                                           f"shared_dir: {shared}\n"))
    assert from_file.zookeeper_servers == ("a:2181", "b:2182")
    assert from_file.files_dir == shared and from_file.zookeeper_root == "/nimbus-thrift"
    from_env = load_config(None, {"NIMBUS_THRIFT_ZOOKEEPER_SERVERS": "a:2181, [::1]:2181",
                                  "NIMBUS_THRIFT_SHARED_DIR": str(shared)}, {})
    assert from_env.zookeeper_servers == ("a:2181", "[::1]:2181")
    assert NimbusConfig().zookeeper_servers is None
    assert NimbusConfig().files_dir == NimbusConfig().data_dir


@pytest.mark.parametrize("env, says", [
    ({"NIMBUS_THRIFT_ZOOKEEPER_SERVERS": "a:2181"}, "shared_dir is not"),
    ({"NIMBUS_THRIFT_ZOOKEEPER_SERVERS": "zk-without-port"}, "host:port"),
    ({"NIMBUS_THRIFT_ZOOKEEPER_SERVERS": "a:99999"}, "host:port"),
    ({"NIMBUS_THRIFT_ZOOKEEPER_ROOT": "nimbus"}, "absolute ZooKeeper path"),
    ({"NIMBUS_THRIFT_ZOOKEEPER_ROOT": "/a//b"}, "absolute ZooKeeper path"),
])
def test_ha_settings_refused_with_a_sentence(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config(None, env, {})


def test_shared_dir_is_not_the_data_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shared_dir must not be data_dir"):
        load_config(None, {"NIMBUS_THRIFT_DATA_DIR": str(tmp_path),
                           "NIMBUS_THRIFT_SHARED_DIR": str(tmp_path)}, {})
