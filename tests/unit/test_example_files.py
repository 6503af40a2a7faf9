"""The examples the package ships (nimbus_thrift/examples/, printed by ``nimbus-thrift
example``) are the repository's examples/ files, byte for byte: edit examples/ and
copy, or the reverse."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import nimbus_thrift
from nimbus_thrift.cli import main

PACKAGE_DIR = Path(nimbus_thrift.__file__).resolve().parent
TOP_LEVEL = PACKAGE_DIR.parent / "examples"
PACKAGED = PACKAGE_DIR / "examples"


def test_the_packaged_examples_are_the_repositorys() -> None:
    shipped = sorted(p.name for p in PACKAGED.glob("*.py"))
    assert shipped == ["wordcount.py"]
    assert not (PACKAGED / "__init__.py").exists()   # data: read, never imported
    for name in shipped:
        assert (PACKAGED / name).read_bytes() == (TOP_LEVEL / name).read_bytes(), (
            f"nimbus_thrift/examples/{name} differs from examples/{name}: copy the "
            "edited one")


def test_example_prints_it_and_lists_them() -> None:
    result = CliRunner().invoke(main, ["example", "wordcount"])
    assert result.exit_code == 0
    assert result.stdout == (TOP_LEVEL / "wordcount.py").read_text()
    assert CliRunner().invoke(main, ["example"]).stdout == "wordcount\n"
    result = CliRunner().invoke(main, ["example", "wordcont"])
    assert result.exit_code == 2
    assert "no example named 'wordcont' (there is wordcount)" in result.stderr
