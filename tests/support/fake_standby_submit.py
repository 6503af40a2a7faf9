"""A stand-in for ``spark-submit ... spark_main.py --workdir W [--standby PID:TICKS]``
in the standby driver tests: no JVM, the files of the real driver.

Run as ``python fake_standby_submit.py <spark-submit arguments>`` (the launcher's
``spark_submit`` setting). With ``--standby`` it writes ``W/status.json`` ``warming``,
then ``ready`` (once the file ``W/../go-ready`` exists, if ``W/../gate`` does), then
waits for ``W/handoff`` and, handed a work directory, is that topology's driver; or it
exits when the daemon PID is gone, or with exit code 3 once ``W/../die`` exists (a
standby that crashes). As a topology's driver (either way) it writes ``running``
status, batch after batch, into its work directory until ``control`` says ``stop``
or SIGTERM comes. Each start appends its arguments and work directory environment
variable to ``W/../invocations.jsonl`` (W's parent: the standby directory's), each
hand-off to ``handoffs.jsonl`` beside it. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

POLL = 0.02


def arg(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def write_status(work: Path, **fields: object) -> None:
    now = time.time()
    raw = {"pid": os.getpid(), "updated_at": now, "started_at": fields.pop("started_at",
                                                                           now), **fields}
    tmp = work / ".status.fake.tmp"
    tmp.write_text(json.dumps(raw))
    os.replace(tmp, work / "status.json")


def alive(pid: int, ticks: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[0] not in ("Z", "X") and int(fields[19]) == ticks


def log(path: Path, record: dict[str, object]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def drive(work: Path, stopped: list[bool]) -> int:
    started = time.time()
    batch = 0
    while not stopped and (work / "control").read_text().strip() != "stop":
        write_status(work, state="running", batch_id=batch, started_at=started)
        batch += 1
        time.sleep(POLL)
    write_status(work, state="stopped", batch_id=batch, started_at=started)
    return 0


def main(argv: list[str]) -> int:
    stopped: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    work = Path(arg(argv, "--workdir") or ".")
    parent = arg(argv, "--standby")
    base = work.parent
    log(base / "invocations.jsonl", {"argv": argv, "standby": parent,
                                     "env_work_dir": os.environ.get(
                                         "NIMBUS_THRIFT_WORK_DIR", "")})
    if parent is None:
        return drive(work, stopped)
    pid, ticks = (int(x) for x in parent.split(":"))
    write_status(work, state="warming")
    print("standby warming", flush=True)
    while (base / "gate").exists() and not (base / "go-ready").exists():
        time.sleep(POLL)
    write_status(work, state="ready")
    while True:
        if (base / "die").exists():
            return 3
        if stopped or not alive(pid, ticks):
            return 0
        handoff = work / "handoff"
        if handoff.exists():
            target = Path(json.loads(handoff.read_text())["work_dir"])
            log(base / "handoffs.jsonl", {"standby": work.name, "work_dir": str(target),
                                          "link": os.path.realpath(work / "current")})
            print("handed", target, flush=True)
            return drive(target, stopped)
        time.sleep(POLL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
