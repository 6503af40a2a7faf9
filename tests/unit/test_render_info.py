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


def test_the_spark_ui_line_comes_from_the_executors_port_not_sched_status() -> None:
    idl = nimbus_idl()

    def text(port: int, sched_status: str = "running") -> str:
        executors = [idl.ExecutorSummary(
            executor_info=idl.ExecutorInfo(task_start=t, task_end=t), component_id="c",
            host="127.0.0.1", port=port, uptime_secs=5) for t in (1, 2)]
        return render.info_text(idl.TopologyInfo(
            id="wc-1", name="wc", uptime_secs=5, executors=executors, status="ACTIVE",
            sched_status=sched_status, errors={}))

    assert "\nscheduled:  running\nspark ui:   http://127.0.0.1:4051\n" in text(4051)
    # Off (the default): port 0, no line. An address in sched_status is never taken
    # for the UI (it was read from there once; it is a word or two now).
    assert "spark ui:" not in text(0)
    assert "spark ui:" not in text(0, "running, Spark UI http://evil.example/")
