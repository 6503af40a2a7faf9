"""The IDL files the package ships (nimbus_thrift/idl_files/, read through
importlib.resources) and the repository's top-level idl/ (what other languages compile)
are one contract: the same files, byte for byte. Edit idl/ and copy, or the reverse."""

from __future__ import annotations

from pathlib import Path

import pytest

import nimbus_thrift
from nimbus_thrift import idl

PACKAGE_DIR = Path(nimbus_thrift.__file__).resolve().parent
TOP_LEVEL = PACKAGE_DIR.parent / "idl"
PACKAGED = PACKAGE_DIR / idl.IDL_FILES


def test_the_packaged_idl_files_are_the_top_level_ones() -> None:
    top = sorted(p.name for p in TOP_LEVEL.glob("*.thrift"))
    assert top == ["demo.thrift", "nimbus.thrift"]
    assert sorted(p.name for p in PACKAGED.glob("*.thrift")) == top
    for name in top:
        assert (PACKAGED / name).read_bytes() == (TOP_LEVEL / name).read_bytes(), (
            f"nimbus_thrift/idl_files/{name} differs from idl/{name}: copy the edited one")


def test_the_idl_is_read_from_the_package_not_the_checkout() -> None:
    assert idl.idl_path("nimbus.thrift") == PACKAGED / "nimbus.thrift"
    assert idl.idl_resource("demo.thrift").read_bytes() == \
        (TOP_LEVEL / "demo.thrift").read_bytes()
    assert idl.nimbus_idl().__name__ == "nimbus_idl_thrift"


def test_an_unknown_idl_file_is_one_sentence() -> None:
    with pytest.raises(FileNotFoundError, match="no IDL file 'storm.thrift'"):
        idl.idl_resource("storm.thrift")
