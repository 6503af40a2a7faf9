"""The handler's method table (nimbus/service/handler.py): every method of service
Nimbus is answered by exactly one group of calls, and the handler's attribute for it is
that group's bound method (no hop per call)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from support.nimbus import FakeClock, FakeLauncher, N
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service import handler as handler_module
from nimbus_thrift.nimbus.service.handler import (ANSWERED_BY, METHOD_TABLE, NimbusHandler,
                                                  _answered_by)
from nimbus_thrift.nimbus.state.store import Store


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[NimbusHandler]:
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "launcher": "none"})
    store = Store(tmp_path / "nimbus.sqlite3")
    h = NimbusHandler(N, config, store, FakeLauncher(), clock=FakeClock())
    yield h
    h.close()
    store.close()


def test_every_method_is_answered_by_exactly_one_group(handler: NimbusHandler) -> None:
    listed = [method for methods in METHOD_TABLE.values() for method in methods]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(ANSWERED_BY) == set(N.Nimbus.thrift_services)
    for method, group in ANSWERED_BY.items():
        answer = getattr(handler, method)
        assert answer.__self__ is getattr(handler, group), method
        assert answer.__func__ is getattr(type(getattr(handler, group)), method)


def test_no_group_has_a_method_the_table_gives_another(handler: NimbusHandler) -> None:
    for group, methods in METHOD_TABLE.items():
        calls = getattr(handler, group)
        has = {m for m in N.Nimbus.thrift_services if callable(getattr(calls, m, None))}
        assert has == set(methods), group


def test_a_method_in_two_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="method getLeader is in group queries and "
                                         "again in storm2"):
        _answered_by({"queries": ("getLeader",), "storm2": ("getLeader",)})


def test_a_method_missing_from_the_table_stops_the_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handler_module, "ANSWERED_BY",
                        {m: g for m, g in ANSWERED_BY.items() if m != "getLeader"})
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "launcher": "none"})
    store = Store(tmp_path / "nimbus.sqlite3")
    try:
        with pytest.raises(ValueError, match="missing from METHOD_TABLE .*: getLeader$"):
            NimbusHandler(N, config, store, FakeLauncher())
    finally:
        store.close()
