"""Fixtures of the spark launcher's tests (the helpers are in launcher_parts.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from launcher_parts import Launchers

from nimbus_thrift.nimbus.spark.archive import JAVA_OPTION_VARIABLES


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[Launchers]:
    made = Launchers(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def no_java_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM options of the environment would change the launcher's."""
    for name in JAVA_OPTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)
