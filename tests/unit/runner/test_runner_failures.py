"""Failure texts of a run (runner/failures.py): the one-line message, the component it
names, and the traceback frames that are in the topology's own code.

The Spark texts below are real: what ``StreamingQuery.exception()`` said (PySpark 4.3,
local[2]) when ``tests/topologies/numbers.py``'s FailingBolt raised, trimmed after the
query's header. Other tracebacks are made by Python itself from code written to a
temporary code directory, then wrapped as Spark wraps a worker's.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest

from nimbus_thrift.runner.failures import (FRAMES_HEADER, MAX_ERROR_LENGTH, MAX_ERROR_TEXT,
                                           MAX_USER_FRAMES, Frame, describe_failure,
                                           is_user_file, parse_frames, user_frames,
                                           with_frames)
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.usercode import UserCodeError
from topologies import numbers

#: With spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled=false: the worker's
#: exception keeps its cause, whose traceback has the user's frame.
SPARK_TEXT_FULL = """An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 166, in call
    raise e
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
  File "/work/main/nimbus_thrift/runner/dataflow.py", line 393, in __call__
    self.collected.batches[batch_id] = decode_exports(plan, batch.toArrow())
                                                            ^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/classic/dataframe.py", line 1980, in toArrow
    return PandasConversionMixin.toArrow(self)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/pandas/conversion.py", line 494, in toArrow
    batches = self._collect_as_arrow(
              ^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/pandas/conversion.py", line 559, in _collect_as_arrow
    with unwrap_spark_exception():
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py", line 158, in __exit__
    self.gen.throw(typ, value, traceback)
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/errors/exceptions/captured.py", line 285, in unwrap_spark_exception
    raise converted from None
  File "/work/main/nimbus_thrift/runner/tasks.py", line 103, in _run
    for result in map(process, tuples):
    ^^^^^^^^^^^^^^^^^
  File "/work/main/tests/topologies/numbers.py", line 139, in process
    raise ValueError("no answers here")
    ^^^^^^^^^^^^^^^^^
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/nimbus_thrift/runner/tasks.py", line 103, in _run
    for result in map(process, tuples):
  File "/work/main/tests/topologies/numbers.py", line 139, in process
    raise ValueError("no answers here")
ValueError: no answers here

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 4327, in invoke_udf
    run_process()
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 4222, in process
    serializer.dump_stream(out_iter, outfile)
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/sql/pandas/serializers.py", line 70, in dump_stream
    for batch in iterator:
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/sql/pandas/serializers.py", line 96, in _write_stream_start
    first = next(batch_iterator, None)
            ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 1955, in func
    yield from map(ArrowBatchTransformer.wrap_struct, verified_iter)
  File "/work/main/nimbus_thrift/runner/tasks.py", line 165, in run_bolt
    yield from task.feed(batch)
               ^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 114, in feed
    return self._feed(batch)
           ^^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 121, in _feed
    self._run(self.decoders[0].from_arrow(batch))
  File "/work/main/nimbus_thrift/runner/tasks.py", line 109, in _run
    raise user_error(self.node, exc, "process()") from exc
nimbus_thrift.runner.usercode.UserCodeError: bolt 'fails' (topologies.numbers.FailingBolt) raised ValueError in process(): no answers here

=== Streaming Query ===
Identifier: Failing [id = 73c89e48-496a-4415-90d4-f4dc23293fe0]
"""

#: With Spark's default (simplified tracebacks): the cause, and the user's frames, are gone.
SPARK_TEXT_SIMPLIFIED = """An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/work/main/.venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 166, in call
    raise e
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/utils.py", line 163, in call
    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)
  File "/work/main/nimbus_thrift/runner/dataflow.py", line 393, in __call__
    self.collected.batches[batch_id] = decode_exports(plan, batch.toArrow())
                                                            ^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/classic/dataframe.py", line 1980, in toArrow
    return PandasConversionMixin.toArrow(self)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/pandas/conversion.py", line 494, in toArrow
    batches = self._collect_as_arrow(
              ^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/sql/pandas/conversion.py", line 559, in _collect_as_arrow
    with unwrap_spark_exception():
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py", line 158, in __exit__
    self.gen.throw(typ, value, traceback)
  File "/work/main/.venv/lib/python3.11/site-packages/pyspark/errors/exceptions/captured.py", line 285, in unwrap_spark_exception
    raise converted from None
  File "/work/main/nimbus_thrift/runner/tasks.py", line 165, in run_bolt
    yield from task.feed(batch)
    ^^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 116, in feed
    self.busy_s += perf_counter() - start
    ^^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 121, in _feed
    self._run(self.decoders[0].from_arrow(batch))
    ^^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 109, in _run
    raise user_error(self.node, exc, "process()") from exc
    ^^^^^^^^^^^^^^^^^
pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/nimbus_thrift/runner/tasks.py", line 165, in run_bolt
    yield from task.feed(batch)
               ^^^^^^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 116, in feed
    self.busy_s += perf_counter() - start
    ^^^^^^^^^^^
  File "/work/main/nimbus_thrift/runner/tasks.py", line 121, in _feed
    self._run(self.decoders[0].from_arrow(batch))
  File "/work/main/nimbus_thrift/runner/tasks.py", line 109, in _run
    raise user_error(self.node, exc, "process()") from exc
nimbus_thrift.runner.usercode.UserCodeError: bolt 'fails' (topologies.numbers.FailingBolt) raised ValueError in process(): no answers here

=== Streaming Query ===
"""

FAILING_MESSAGE = ("bolt 'fails' (topologies.numbers.FailingBolt) raised ValueError in "
                   "process(): no answers here")


@pytest.fixture(scope="module")
def failing_nodes():
    return build_plan(spec_of(numbers.Failing)).nodes


def test_spark_text_gives_the_message_then_the_users_frame_relative_to_its_code(failing_nodes):
    component, error = describe_failure(SPARK_TEXT_FULL, failing_nodes)
    assert component == "fails"
    assert error == (f"{FAILING_MESSAGE}\n{FRAMES_HEADER}\n"
                     '  File "topologies/numbers.py", line 139, in process\n'
                     '    raise ValueError("no answers here")')
    # The first line is what it was before frames were added: a one-line summary.
    assert error.splitlines()[0] == FAILING_MESSAGE


def test_the_driver_repeating_the_workers_frames_does_not_double_them(failing_nodes):
    # The driver's traceback quotes numbers.py:139 too (with carets, no source of its own).
    assert SPARK_TEXT_FULL.count('numbers.py", line 139') == 2
    _, error = describe_failure(SPARK_TEXT_FULL, failing_nodes)
    assert error.count("line 139") == 1 and "^" not in error


def test_library_frames_are_left_out(failing_nodes):
    _, error = describe_failure(SPARK_TEXT_FULL, failing_nodes)
    for library in ("pyspark", "py4j", "nimbus_thrift", "contextlib", "site-packages"):
        assert library not in error


def test_simplified_spark_text_has_no_user_frames_and_gives_the_message_alone(failing_nodes):
    assert describe_failure(SPARK_TEXT_SIMPLIFIED, failing_nodes) == ("fails", FAILING_MESSAGE)


def test_component_ids_alone_still_give_the_frames_with_their_full_paths():
    component, error = describe_failure(SPARK_TEXT_FULL, ["fails", "numbers"])
    assert component == "fails"
    assert error.endswith('numbers.py", line 139, in process\n'
                          '    raise ValueError("no answers here")')
    assert '  File "/' in error          # no code directory known: the path as Spark gave it


# -- tracebacks made by Python, wrapped as Spark wraps a worker's ----------------------------

def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _spark_wrapped(exc: BaseException) -> str:
    """``exc``'s traceback (with its cause) inside Spark's words around a worker's error."""
    worker = "".join(traceback.format_exception(exc))
    return ("An exception was raised by the Python Proxy. Return Message: Traceback (most "
            "recent call last):\n  File \"/opt/spark/python/lib/pyspark.zip/pyspark/sql/utils.py\", "
            "line 163, in call\n    self.func(DataFrame(jdf, wrapped_session_jdf), batch_id)\n"
            "pyspark.errors.exceptions.captured.PythonException: An exception was thrown "
            f"from the Python worker:\n{worker}\n=== Streaming Query ===\nIdentifier: x\n"
            "\tat org.apache.spark.sql.execution.streaming.StreamExecution.run"
            "(StreamExecution.scala:1)\n")


@pytest.fixture
def code_dir(tmp_path):
    """A topology's code directory: wc/bolts.py calls wc/helpers/text.py, which raises."""
    code = tmp_path / "topologies" / "wc-1-1700000000" / "code"
    (code / "wc" / "helpers").mkdir(parents=True)
    (code / "wc" / "__init__.py").write_text("")
    (code / "wc" / "helpers" / "__init__.py").write_text("")
    (code / "wc" / "helpers" / "text.py").write_text(
        "def words(sentence):\n"
        "    if not sentence:\n"
        "        raise ValueError('an empty sentence')\n"
        "    return sentence.split()\n")
    (code / "wc" / "bolts.py").write_text(
        "from wc.helpers.text import words\n\n\n"
        "class SplitBolt:\n"
        "    def process(self, tup):\n"
        "        return [(w,) for w in words(tup)]\n")
    sys.path.insert(0, str(code))
    try:
        yield code
    finally:
        sys.path.remove(str(code))
        for name in [n for n in sys.modules if n == "wc" or n.startswith("wc.")]:
            del sys.modules[name]


def _user_failure(code: Path) -> UserCodeError:
    bolts = _load(code / "wc" / "bolts.py", "wc.bolts")
    try:
        try:
            bolts.SplitBolt().process("")
        except Exception as exc:
            raise UserCodeError("split", "bolt 'split' (wc.bolts.SplitBolt) raised "
                                         f"ValueError in process(): {exc}") from exc
    except UserCodeError as err:
        return err
    raise AssertionError("the bolt did not raise")


def test_a_real_traceback_gives_the_users_frames_innermost_last(code_dir):
    text = _spark_wrapped(_user_failure(code_dir))
    nodes = {"split": SimpleNamespace(script="wc.bolts.SplitBolt")}
    component, error = describe_failure(text, nodes)
    assert component == "split"
    lines = error.splitlines()
    assert lines[0] == ("bolt 'split' (wc.bolts.SplitBolt) raised ValueError in process(): "
                        "an empty sentence")
    assert lines[1:] == [
        FRAMES_HEADER,
        '  File "wc/bolts.py", line 6, in process',
        "    return [(w,) for w in words(tup)]",
        '  File "wc/helpers/text.py", line 3, in words',
        "    raise ValueError('an empty sentence')"]


def test_a_known_code_directory_makes_paths_relative_without_the_plan(code_dir):
    text = _spark_wrapped(_user_failure(code_dir))
    frames = user_frames(text, code_dirs=[str(code_dir)])
    assert [(f.file, f.line, f.function) for f in frames] == [
        ("wc/bolts.py", 6, "process"), ("wc/helpers/text.py", 3, "words")]


def test_code_in_the_workers_zip_is_relative_to_the_zip():
    text = ("Traceback (most recent call last):\n"
            '  File "/tmp/spark-1/userFiles-2/code.zip/wc/bolts.py", line 6, in process\n'
            "    return [(w,) for w in words(tup)]\n"
            '  File "/usr/lib/python3.11/re/__init__.py", line 9, in split\n'
            "    return x\n"
            "ValueError: an empty sentence\n")
    assert user_frames(text) == [Frame("wc/bolts.py", 6, "process",
                                       "return [(w,) for w in words(tup)]")]


@pytest.mark.parametrize("path, mine", [
    ("/srv/nimbus/topologies/wc-1/code/wc/bolts.py", True),
    ("/tmp/spark-1/userFiles-2/code.zip/wc/bolts.py", True),
    ("/home/ann/venv/lib/python3.11/site-packages/requests/api.py", False),
    ("/usr/lib/python3/dist-packages/yaml/__init__.py", False),
    ("/usr/lib/python3.11/json/decoder.py", False),
    ("/opt/spark/python/lib/pyspark.zip/pyspark/worker.py", False),
    ("/opt/spark/python/lib/py4j-0.10.9.9-src.zip/py4j/clientserver.py", False),
    ("/srv/venv/src/nimbus_thrift/runner/tasks.py", False),
    ("/elsewhere/nimbus_thrift/topology/components.py", False),
    ("<frozen importlib._bootstrap>", False),
    ("<string>", False),
])
def test_which_files_are_the_users(path, mine):
    assert is_user_file(path) is mine


def test_this_packages_own_directory_is_never_the_users():
    import nimbus_thrift.lazy
    assert not is_user_file(str(Path(nimbus_thrift.lazy.__file__).resolve()))
    # ... unless the caller says it holds the topology's code.
    assert is_user_file(str(Path(nimbus_thrift.lazy.__file__).resolve()),
                        [str(Path(nimbus_thrift.lazy.__file__).resolve().parent) + "/"])


# -- bounds ---------------------------------------------------------------------------------

def test_a_deep_recursion_keeps_the_innermost_frames_and_says_how_many_are_left_out(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    # Two functions taking turns: Python folds only a line repeated in a row.
    (code / "deep.py").write_text(
        "def ping(n):\n"
        "    if n == 0:\n"
        "        raise RuntimeError('the bottom')\n"
        "    return [pong(n - 1)]\n"
        "def pong(n):\n"
        "    return [ping(n)]\n")
    deep = _load(code / "deep.py", "deep_w2")
    try:
        deep.ping(40)
    except RuntimeError as exc:
        text = "".join(traceback.format_exception(exc))
    finally:
        sys.modules.pop("deep_w2", None)
    error = with_frames("RuntimeError: the bottom", user_frames(text, code_dirs=[str(code)]))
    lines = error.splitlines()
    assert lines[2].startswith("  ... ") and lines[2].endswith("outer frames left out")
    assert sum(1 for line in lines if line.startswith('  File "deep.py"')) == MAX_USER_FRAMES
    assert lines[-2] == '  File "deep.py", line 3, in ping'     # innermost, where it raised
    assert text.count('File "') > 80                             # 81 frames in all
    assert len(error) <= MAX_ERROR_TEXT


def test_huge_source_lines_and_messages_are_cut_to_the_limits():
    source = "x = " + "1 + " * 5000 + "1"
    frames = [Frame(f"m{i}.py", i, "f", source[:200]) for i in range(MAX_USER_FRAMES)]
    text = ("Traceback (most recent call last):\n"
            + "".join(f'  File "/code/m{i}.py", line {i}, in f\n    {source}\n'
                      for i in range(MAX_USER_FRAMES))
            + "ValueError: " + "v" * 5000 + "\n")
    parsed = user_frames(text, code_dirs=["/code"])
    assert parsed == frames
    _, error = describe_failure(text, [])
    assert len(error) <= MAX_ERROR_TEXT
    assert len(error.splitlines()[0]) == MAX_ERROR_LENGTH
    assert error.splitlines()[1] == FRAMES_HEADER
    assert error.endswith('in f\n    ' + source[:200])     # the innermost frame kept


def test_frames_outside_a_traceback_are_not_taken():
    # A frame-like line before any "Traceback" header (a log line quoting one) is not a frame.
    assert parse_frames('  File "/code/a.py", line 1, in f\nValueError: x\n') == []
    assert describe_failure('  File "/code/a.py", line 1, in f\nValueError: x', []) == (
        "", "ValueError: x")


def test_no_frames_leave_the_message_as_it_was():
    assert with_frames("ValueError: x", []) == "ValueError: x"
    assert describe_failure("", []) == ("", "the query failed without a message")
