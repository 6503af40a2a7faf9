"""What the spark launcher's tests share (test_spark_command.py, test_spark_lifecycle.py,
test_spark_archive.py): the fake spark-submit (tests/support/fake_spark_submit.py), a
configuration that uses it, launch specs as the handler makes them, what the fake
recorded, and a maker of launchers that stops what they run. Their fixtures are in
conftest.py beside them."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from support.nimbus import make_zip, wordcount
from support.polling import wait_for_value

from nimbus_thrift.nimbus.config import NimbusConfig, load_config
from nimbus_thrift.nimbus.launcher import LaunchSpec
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.proctree import proc_info
from nimbus_thrift.nimbus.spark.properties import parse_properties
from nimbus_thrift.topology.validate import check_topology


FAKE = Path(__file__).parents[3] / "support" / "fake_spark_submit.py"
FAKE_SUBMIT = shlex.join([sys.executable, str(FAKE)])
DEADLINE = 30.0
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
    return wait_for_value(predicate, what, timeout)


def config(tmp_path: Path, **settings: Any) -> NimbusConfig:
    return load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                      "spark_submit": FAKE_SUBMIT, "restart_failed": False,
                                      "spark_master": "local[2]", **settings})


def launch_spec(cfg: NimbusConfig, topology_id: str = "wc-1-1", *, topology: Any = None,
                conf: dict[str, Any] | None = None, executors: dict[str, int] | None = None,
                active: bool = True, code: bytes | None = None,
                behaviour: dict[str, Any] | None = None) -> LaunchSpec:
    """A LaunchSpec as the handler makes it: work dir ``data/topologies/<id>``, and the
    fake's behaviour written there first."""
    topology = topology if topology is not None else wordcount()
    conf = {"topology.name": "wc", **(conf or {})}
    plan = check_topology(topology, conf, None)
    work = cfg.data_dir / "topologies" / topology_id
    work.mkdir(parents=True, exist_ok=True)
    (work / "fake.json").write_text(json.dumps(behaviour or {}))
    code_path = cfg.data_dir / "inbox" / f"{topology_id}.zip"
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.write_bytes(code if code is not None else make_zip())
    return LaunchSpec(topology_id=topology_id, name="wc", topology=topology, conf=conf,
                      code_path=code_path, work_dir=work, num_workers=plan.num_workers,
                      executors={**plan.executors, **(executors or {})}, tasks=plan.tasks,
                      active=active, plan=plan)


def invocations(where: LaunchSpec | Path) -> list[dict[str, Any]]:
    """What the fake recorded of each of its starts in a work directory."""
    work = where.work_dir if isinstance(where, LaunchSpec) else where
    path = work / "fake_invocations.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def launched_pid(spec: LaunchSpec) -> int:
    """The pid the launcher last started, from its record."""
    return int(json.loads((spec.work_dir / "launch.json").read_text())["pid"])


def children(spec: LaunchSpec) -> list[int]:
    return json.loads((spec.work_dir / "fake_children.json").read_text())


def live(pid: int) -> bool:
    info = proc_info(pid)
    return info is not None and info.live


def state_is(launcher: SparkLauncher, spec: LaunchSpec, state: str) -> Callable[[], Any]:
    def check() -> Any:
        status = launcher.status(spec.topology_id)
        return status if status.state == state else None
    return check


class Launchers:
    """Makes launchers; at teardown stops what they run and closes them."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.made: list[SparkLauncher] = []

    def __call__(self, cfg: NimbusConfig | None = None, **kw: Any) -> SparkLauncher:
        kw = {"term_grace": 1.0, "monitor_secs": 0.05, "restart_backoff": 0.0, **kw}
        launcher = SparkLauncher(cfg or config(self.tmp_path), **kw)
        self.made.append(launcher)
        return launcher

    def close(self) -> None:
        for launcher in self.made:
            launcher.close()
            for topology_id in list(launcher._runs):
                launcher.stop(topology_id, 0)      # also reaps children of this one


def confs_of(command: list[str]) -> dict[str, str]:
    """The Spark settings a command passes: those of its properties file as it is now
    (a later launch in the same directory rewrites it), and any ``--conf``."""
    confs = {}
    if "--properties-file" in command:
        path = Path(command[command.index("--properties-file") + 1])
        confs.update(parse_properties(path.read_text(encoding="ascii")))
    confs.update(command[i + 1].split("=", 1) for i, a in enumerate(command)
                 if a == "--conf")
    return confs


def fake_spark_home(root: Path) -> Path:
    home = root / "pyspark"
    for directory in ("bin", "jars", "python/lib", "python/pyspark"):
        (home / directory).mkdir(parents=True)
    for name in ("bin/spark-submit", "jars/spark-core.jar", "python/lib/pyspark.zip",
                 "python/lib/py4j-0.10.9.9-src.zip", "python/lib/README", "version.py"):
        (home / name).write_text(name)
    return home
