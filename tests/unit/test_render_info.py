"""Bytes tier: ``nimbus-thrift info``'s text for a topology whose error carries the
traceback's frames in the user's code (runner/failures.py puts them on the lines after
the message): the message on the component's line, each frame indented under it."""

from __future__ import annotations

from nimbus_thrift import render
from nimbus_thrift.idl import nimbus_idl


def test_an_errors_frames_are_indented_under_its_message() -> None:
    idl = nimbus_idl()
    error = ("ValueError: no words in ''\n"
             "Traceback (user code):\n"
             '  File "splitter.py", line 12, in process\n'
             "    raise ValueError(f\"no words in {line!r}\")")
    info = idl.TopologyInfo(id="wc-1", name="wc", uptime_secs=5, executors=[],
                            status="ACTIVE", sched_status="running: batch 3",
                            errors={"split": [idl.ErrorInfo(error=error, error_time_secs=1)],
                                    "count": [idl.ErrorInfo(error="boom", error_time_secs=2)]})
    lines = render.info_text(info).splitlines()
    at = lines.index("errors:")
    assert lines[at + 1:] == [
        "  [count] boom",
        "  [split] ValueError: no words in ''",
        "      Traceback (user code):",
        '        File "splitter.py", line 12, in process',
        "          raise ValueError(f\"no words in {line!r}\")",
    ]


def test_the_spark_ui_line_only_for_a_ui_the_launcher_reports() -> None:
    idl = nimbus_idl()

    def text(sched_status: str) -> str:
        return render.info_text(idl.TopologyInfo(
            id="wc-1", name="wc", uptime_secs=5, executors=[], status="ACTIVE",
            sched_status=sched_status, errors={}))

    on = "running: batch 3, 2.0k tuples/s, Spark UI http://127.0.0.1:4051"
    assert "\nspark ui:   http://127.0.0.1:4051\n" in text(on)
    assert render.spark_ui(on + "; started warm from a standby driver") == \
        "http://127.0.0.1:4051"
    # Off (the default): no line. An address in a quoted error is the topology's
    # words, not the launcher's: never taken for its UI.
    assert "spark ui:" not in text("running: batch 3, 2.0k tuples/s")
    quoted = ("running: batch 3, 2.0k tuples/s; relaunched from the checkpoint after: "
              "ValueError: x, Spark UI http://evil.example/")
    assert render.spark_ui(quoted) == "" and "spark ui:" not in text(quoted)
