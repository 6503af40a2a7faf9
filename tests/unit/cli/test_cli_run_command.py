"""``nimbus-thrift run`` without Spark: what it says when PySpark or Java is missing,
a file that is not a topology or one the daemon's checks refuse, and how the leaf
bolts' tuples are printed (tests/spark/test_examples.py runs it on a real Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nimbus_thrift.cli import main, run_command
from nimbus_thrift.nimbus.spark import install


@pytest.fixture
def spark_and_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PySpark and Java as found: the checks before a run pass, whatever is installed."""
    monkeypatch.setattr(install, "find_spark_home", lambda: tmp_path)
    monkeypatch.setattr(install, "java_binary", lambda: tmp_path / "java")


def run(tmp_path: Path, source: str, *args: str) -> Any:
    (tmp_path / "topo.py").write_text(source)
    return CliRunner().invoke(main, ["run", str(tmp_path / "topo.py"), *args])


def test_without_pyspark_the_extra_is_named(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setattr(install, "find_spark_home", lambda: None)
    result = run(tmp_path, "")
    assert result.exit_code == 1
    assert "running a topology needs PySpark, which is not installed for " in \
        result.stderr and "pip install 'nimbus-thrift[spark]'" in result.stderr


def test_without_java_it_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(install, "find_spark_home", lambda: tmp_path)
    monkeypatch.setattr(install, "java_binary", lambda: None)
    result = run(tmp_path, "")
    assert "Spark needs Java (17 or later)" in result.stderr


@pytest.mark.usefixtures("spark_and_java")
@pytest.mark.parametrize("source, message", [
    ("x = 1\n", "defines no Topology subclass"),
    ("raise ValueError('broken')\n", "ValueError: broken"),
    ("from nimbus_thrift.topology import Bolt, Topology\n"
     "class B(Bolt):\n    outputs = ['x']\n"
     "class T(Topology):\n    b = B.spec()\n", "T.b (B): a bolt needs at least one input"),
])
def test_a_file_that_cannot_run_is_one_sentence(tmp_path: Path, source: str,
                                                message: str) -> None:
    result = run(tmp_path, source)
    assert result.exit_code == 1, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_leaf_tuples_are_printed_a_few_per_batch(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_command, "SHOWN_PER_BATCH", 2)
    run_command._print_batch(7, {"count": {"default": [("a", 1), ("b", 1), ("c", 1)]},
                                 "odd": {"errors": [("x",)]}})
    assert capsys.readouterr().out == (
        "count: ('a', 1)\ncount: ('b', 1)\ncount: ... and 1 more in batch 7\n"
        "odd errors: ('x',)\n")
