"""The daemon's settings registry (nimbus_thrift/nimbus/settings.py) and what is made
from it agree: NimbusConfig's fields and defaults, the flags of ``nimbus-thrift
nimbus`` with their defaults in their help, and docs/configuration.md as committed."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

import click
import pytest

from nimbus_thrift import logs
from nimbus_thrift.cli import main
from nimbus_thrift.nimbus.config import NimbusConfig, load_config
from nimbus_thrift.nimbus.settings import SECTIONS, SETTINGS
from nimbus_thrift.nimbus.settings_doc import DOC_PATH, render

ROOT = Path(__file__).resolve().parents[2]
FLAGGED = [s for s in SETTINGS.values() if s.flag]


def _options(name: str) -> dict[str, click.Option]:
    command = main.commands[name]
    with click.Context(command) as ctx:
        return {p.name: p for p in command.get_params(ctx)
                if isinstance(p, click.Option) and p.name and "--help" not in p.opts}


def test_the_committed_doc_is_what_the_registry_renders() -> None:
    committed = (ROOT / DOC_PATH).read_text(encoding="utf-8")
    assert committed == render(), ("docs/configuration.md is stale: run `python -m "
                                   "nimbus_thrift.nimbus.settings_doc` and commit it")


def test_the_doc_has_a_row_per_setting() -> None:
    text = render()
    for setting in SETTINGS.values():
        assert f"| `{setting.name}` |" in text and setting.env in text


def test_nimbus_config_is_the_registry() -> None:
    fields = dataclasses.fields(NimbusConfig)
    assert [f.name for f in fields] == list(SETTINGS)
    hints = typing.get_type_hints(NimbusConfig)
    assert {name: s.kind for name, s in SETTINGS.items()} == hints
    defaults = NimbusConfig()
    for name, setting in SETTINGS.items():
        assert getattr(defaults, name) == setting.default_value(), name
    assert load_config(None, {}, {}) == defaults


@pytest.mark.parametrize("setting", FLAGGED, ids=lambda s: s.name)
def test_every_flagged_setting_is_a_daemon_flag_with_its_default(setting) -> None:
    option = _options("nimbus")[setting.name]
    assert setting.flag in option.opts
    assert f"[default: {setting.shown_default}]" in (option.help or "")


def test_the_daemon_has_no_other_setting_flags() -> None:
    assert set(_options("nimbus")) - {"config_file"} == \
        {s.name for s in FLAGGED}


def test_warm_up_takes_spark_master_with_the_registrys_default() -> None:
    option = _options("warm-up")["spark_master"]
    assert f"[default: {SETTINGS['spark_master'].shown_default}]" in (option.help or "")


def test_flag_values_reach_load_config_under_setting_names(monkeypatch, tmp_path) -> None:
    import nimbus_thrift.nimbus as daemon_package
    from click.testing import CliRunner

    seen: dict[str, object] = {}

    def record(file: object, env: object, flags: dict[str, object]) -> object:
        seen.update(flags)
        raise daemon_package.ConfigError("recorded")

    monkeypatch.setattr(daemon_package, "load_config", record)
    result = CliRunner().invoke(main, ["nimbus", "--workers", "3", "--port", "70000",
                                       "--data-dir", str(tmp_path), "--log-level", "debug",
                                       "--run-as-user"])
    assert result.exit_code == 2 and "recorded" in result.output
    assert (seen["worker_threads"], seen["port"], seen["data_dir"], seen["log_level"],
            seen["run_as_user"]) == (3, 70000, tmp_path, "debug", True)
    # Flags not given are None: the file and the environment decide.
    given = {"worker_threads", "port", "data_dir", "log_level", "run_as_user"}
    assert {name: seen[name] for name in seen if name not in given} == \
        {s.name: None for s in FLAGGED if s.name not in given}


def test_registry_facts() -> None:
    assert {s.section for s in SETTINGS.values()} == set(SECTIONS)
    flags = [s.flag for s in FLAGGED]
    assert len(flags) == len(set(flags))
    assert SETTINGS["log_level"].choices == logs.LEVELS
    assert SETTINGS["log_format"].choices == typing.get_args(logs.LogFormat)
    for setting in SETTINGS.values():
        assert setting.doc.endswith(".") and "\n" not in setting.doc, setting.name
        # A default that is no value, or a sentinel, is said in words.
        if setting.default in ("", 0, -1) and setting.kind is not bool or \
                setting.default_factory is not None:
            assert setting.default_text, setting.name


def test_importing_the_cli_does_not_import_the_daemon() -> None:
    """The daemon's flags are made when `nimbus` parses or prints help, not at import:
    the client commands start without the daemon package (cli/options.py)."""
    code = ("import sys, nimbus_thrift.cli; "
            "assert 'nimbus_thrift.nimbus' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
