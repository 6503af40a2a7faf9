"""The HTTP side's settings (ui_port, ui_host) with the other settings' sources and
validation, and the URL the daemon logs and ``nimbus-thrift ui`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus_thrift.nimbus.config import ConfigError, NimbusConfig, load_config, to_public
from nimbus_thrift.nimbus.web.address import ui_url


def test_defaults_are_storms_port_on_the_daemons_host() -> None:
    config = NimbusConfig()
    assert (config.ui_port, config.ui_host, config.ui_bind_host) == (8080, "", "127.0.0.1")
    assert NimbusConfig(host="10.0.0.5").ui_bind_host == "10.0.0.5"
    assert NimbusConfig(host="10.0.0.5", ui_host="127.0.0.1").ui_bind_host == "127.0.0.1"
    assert to_public(NimbusConfig())["ui_port"] == 8080


def test_sources_in_order_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("ui_port: 9000\nui-host: 127.0.0.3\n")
    assert load_config(file, env={}).ui_port == 9000
    assert load_config(file, env={"NIMBUS_THRIFT_UI_PORT": "9001"}).ui_port == 9001
    config = load_config(file, env={"NIMBUS_THRIFT_UI_PORT": "9001"}, flags={"ui_port": -1})
    assert (config.ui_port, config.ui_host) == (-1, "127.0.0.3")


@pytest.mark.parametrize("value, message", [
    (-2, "ui_port must be between 0 (off) and 65535, or -1 (any free port), not -2"),
    (65536, "ui_port must be between 0 (off) and 65535, or -1 (any free port), not 65536"),
    ("web", "--ui-port: ui_port must be an integer, not 'web'"),
])
def test_bad_ui_ports_are_one_sentence(value: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env={}, flags={"ui_port": value})
    assert message in str(caught.value)


def test_the_url(tmp_path: Path) -> None:
    assert ui_url(NimbusConfig()) == "http://127.0.0.1:8080/"
    assert ui_url(NimbusConfig(ui_port=0)) is None
    assert ui_url(NimbusConfig(ui_port=9000, ui_host="::1")) == "http://[::1]:9000/"
    assert ui_url(NimbusConfig(ui_port=-1), bound_host="127.0.0.1", bound_port=4321) \
        == "http://127.0.0.1:4321/"
    pem = tmp_path / "x.pem"
    pem.write_text("x")
    tls = NimbusConfig(tls_cert_file=pem, tls_key_file=pem)
    assert ui_url(tls) == "https://127.0.0.1:8080/"
    assert "0.0.0.0" not in (ui_url(NimbusConfig(ui_host="0.0.0.0")) or "")
