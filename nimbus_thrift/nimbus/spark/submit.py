"""What starting one application takes: the topology's code extracted into its work
directory, its log files, a free port for its UI when it has one, its Spark settings
(written to a file by :mod:`.properties`), and the spark-submit command line and
environment it runs with.
"""

from __future__ import annotations

import math
import os
import secrets
import shlex
import shutil
import socket
import stat
import sys
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Any, Mapping, Sequence

from ...runner.rundir import RunDir
from ...runner.spec import RunSpec
from ...topology.blobs import WORK_DIR_ENV
from ..config import NimbusConfig
from ..launcher import LauncherError
from .archive import DEFAULT_JAVA_OPTIONS, driver_java_options, java_tokens

#: The driver program spark-submit runs (written by the runner; imports PySpark).
SPARK_MAIN = Path(__file__).resolve().parents[2] / "runner" / "spark_main.py"
#: The directory holding the ``nimbus_thrift`` package: on the driver's PYTHONPATH, so
#: the runner imports the same code as the daemon even from a source checkout.
PACKAGE_ROOT = Path(__file__).resolve().parents[3]
#: Loopback only: the driver, its UI and (in local mode) the executors.
LOCAL_HOST = "127.0.0.1"
#: stdout and stderr are renamed to ``*.1`` at a launch once they grow past this.
LOG_ROTATE_BYTES = 50 << 20
#: The Python worker daemon of standby drivers: PySpark's, with the imports of every
#: worker done before it forks them (``runner/worker_daemon.py``).
WORKER_DAEMON = "nimbus_thrift.runner.worker_daemon"
DAEMON_MODULE = "spark.python.daemon.module"
#: Confs the launcher must own: it reads the UI port back to report it, and a UI
#: never stops jobs (:func:`forced_confs`).
RESERVED_CONFS = frozenset({"spark.ui.port", "spark.ui.killEnabled"})
#: The Spark UI: off unless the topology turns it on.
UI_ENABLED = "spark.ui.enabled"
#: Spark's own authentication of its RPC and block-transfer connections.
AUTHENTICATE = "spark.authenticate"
AUTHENTICATE_SECRET = "spark.authenticate.secret"
#: What a topology's Spark application takes from the daemon's environment: what the
#: JVM, Python, Spark and Hadoop need to run and find their own configuration. Nothing
#: else passes: not the daemon's settings (NIMBUS_THRIFT_*, among them the paths of
#: its TLS key), not whatever else its environment holds (cloud credentials, tokens).
#: Submitted code runs with the daemon's user; it gets no more than it must.
INHERITED_VARIABLES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "JAVA_HOME", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS",
    "HADOOP_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
    "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV",
})
#: Prefixes of inherited variables: locale categories, Spark's and PySpark's own.
INHERITED_PREFIXES = ("LC_", "SPARK_", "PYSPARK_")


def free_port() -> int:
    """A TCP port free on loopback now (Spark tries the next ones if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_HOST, 0))
        return int(s.getsockname()[1])


def extract_code(zip_file: Path | IO[bytes], dest: Path) -> None:
    """Extract ``zip_file`` (a path, or the zip opened by the daemon while it writes
    as the work directory's owner) into ``dest`` (replaced whole), refusing escaping
    members.

    The zip was checked at submit; this checks again, since it is cheap and the work
    directory is where a mistake would write.

    Raises:
        LauncherError: an unreadable zip or a member that would land outside ``dest``.
    """
    zip_path = zip_file if isinstance(zip_file, Path) else Path(str(zip_file.name))
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    root = tmp.resolve()
    try:
        with zipfile.ZipFile(zip_file) as zf:
            for info in zf.infolist():
                name = info.filename
                parts = PurePosixPath(name).parts
                target = (root / name).resolve()
                if (not name or name.startswith("/") or "\\" in name or "\x00" in name
                        or ".." in parts or bool(parts and ":" in parts[0])
                        or (target != root and root not in target.parents)
                        or stat.S_ISLNK(info.external_attr >> 16)):
                    raise LauncherError(f"zip member {name!r} of {zip_path} would be "
                                        "extracted outside the code directory")
            zf.extractall(root)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise LauncherError(f"cannot extract the topology code {zip_path}: {exc}") from None
    except LauncherError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def log_file(path: Path) -> IO[bytes]:
    """``path`` (a topology's stdout or stderr) opened to append to, renamed to ``*.1``
    first once it grew past :data:`LOG_ROTATE_BYTES`."""
    try:
        if path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    return open(path, "ab")


def spark_confs(master: str, run_spec: RunSpec, work_dir: Path, ui_port: int,
                num_workers: int, *, archive: Sequence[str] = (), standby: str = "",
                defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings of one application on ``master``, for its properties file
    (:func:`.properties.write_properties`; never a command line, which every local
    account reads).

    In order, each overriding the one before: ``defaults`` (the spark-defaults.conf
    spark-submit no longer reads once given a properties file:
    :func:`.properties.spark_defaults`), the launcher's, the topology configuration's
    keys starting with ``spark.``, and :func:`forced_confs` (which it cannot change).
    On a ``spark://`` master the application takes as many cores as its most parallel
    component (``spark.cores.max``), in ``topology.workers`` executors, unless the
    topology sets those confs itself. The driver JVM's options
    (:func:`driver_java_options`, with the class archive's ``archive``) are
    ``spark.driver.defaultJavaOptions``. The Spark UI is off unless the topology sets
    ``spark.ui.enabled`` (:func:`ui_enabled`); ``ui_port`` is then its port.

    With ``standby`` (``PID:TICKS`` of the daemon), the settings of a standby driver
    whose directory is ``work_dir`` (:mod:`.standby_app`): its executors' work
    directory the ``current`` link the hand-off points at the topology's, and its
    Python workers forked from :data:`WORKER_DAEMON`.
    """
    confs: dict[str, str] = dict(defaults or {})
    confs.update({
        UI_ENABLED: "false",
        "spark.driver.host": LOCAL_HOST,
        "spark.driver.bindAddress": LOCAL_HOST,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.metricsEnabled": "true",
        # Spark's simplified traceback drops the worker exception's cause, which is
        # where the frames in the user's code are (runner/failures.py reads them).
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    })
    user = user_confs(run_spec)
    java_options = driver_java_options(java_tokens(user), archive)
    if java_options:
        confs[DEFAULT_JAVA_OPTIONS] = shlex.join(java_options)
    if master.startswith("spark://"):
        # Executors of a cluster start in a directory of their worker's, with its
        # environment: the DSL's blob helpers find the work directory by this variable.
        seen = RunDir(work_dir).current if standby else work_dir
        confs[f"spark.executorEnv.{WORK_DIR_ENV}"] = str(seen)
    if standby:
        confs[DAEMON_MODULE] = WORKER_DAEMON
    confs.update(cluster_confs(master, run_spec, num_workers))
    confs.update(user)
    if ui_port and ui_enabled(run_spec):
        confs["spark.ui.port"] = str(ui_port)
    confs.update(forced_confs(master))
    return confs


def forced_confs(master: str) -> dict[str, str]:
    """What the launcher sets whatever a topology says: the UI cannot stop jobs
    (``spark.ui.killEnabled``: a UI a topology turns on is readable by every local
    account); and on a local master (``local``, ``local[N]``, ``local-cluster[...]``),
    ``spark.authenticate`` with a new secret at each start, so that the driver's RPC
    and block-manager ports refuse any process that is not the application's (Spark
    itself makes a fresh secret for ``local`` and ``local[N]`` when authentication is
    on; ``local-cluster`` takes this one). A ``spark://`` master's applications need
    the cluster's own secret: that is the cluster's configuration (spark-defaults.conf)
    or the topology's ``spark.authenticate`` and ``spark.authenticate.secret``."""
    confs = {"spark.ui.killEnabled": "false"}
    if master.startswith("local"):
        confs[AUTHENTICATE] = "true"
        confs[AUTHENTICATE_SECRET] = secrets.token_hex(32)
    return confs


def ui_enabled(run_spec: RunSpec | Mapping[str, Any]) -> bool:
    """Whether the topology turned its Spark UI on (``spark.ui.enabled: true``); it is
    off otherwise."""
    return user_confs(run_spec).get(UI_ENABLED, "").strip().lower() == "true"


def ui_port_for(run_spec: RunSpec) -> int:
    """The port of the topology's Spark UI: a free one when it turned it on
    (:func:`ui_enabled`), else 0 (no UI)."""
    return free_port() if ui_enabled(run_spec) else 0


def fenced(config: NimbusConfig) -> bool:
    """Whether drivers take the fence of :mod:`nimbus_thrift.runner.claim`
    (``--fence``): in HA mode (``zookeeper_servers``, or a ``shared_dir`` other
    daemons may launch in), where a new leader on another host starts a topology's
    driver while the old leader's may still run there."""
    return bool(config.zookeeper_servers) or config.shared_dir is not None


def submit_command(submit: Sequence[str], master: str, run_spec: RunSpec, work_dir: Path,
                   properties: Path, *, standby: str = "", fence: bool = False
                   ) -> list[str]:
    """The spark-submit command line of one topology: ``submit`` (the spark-submit to
    run) on ``master``, its settings in the file ``properties`` (:func:`spark_confs`).
    Nothing of the topology's configuration is on it: a command line is world-readable
    (``/proc/<pid>/cmdline``).

    With ``standby`` (``PID:TICKS`` of the daemon), the command of a standby driver
    whose directory is ``work_dir`` (:mod:`.standby_app`): no code of its own (its
    warm-up topology is in the package; a topology's ``code.zip`` is added at the
    hand-off, and two files of one name cannot be). With ``fence`` (:func:`fenced`),
    the driver takes ``driver.claim`` and stops once another driver took it.
    """
    args = [*submit, "--master", master, "--name", f"topology-{run_spec.name}",
            "--properties-file", str(properties)]
    if standby:
        return [*args, str(SPARK_MAIN), "--workdir", str(work_dir), "--standby", standby]
    return [*args, "--py-files", str(work_dir / "code.zip"), str(SPARK_MAIN),
            "--workdir", str(work_dir), *(["--fence"] if fence else [])]


def cluster_confs(master: str, run_spec: RunSpec, num_workers: int) -> dict[str, str]:
    """The cores a ``spark://`` application takes when the topology does not say
    (see :func:`submit_command`); none on other masters."""
    if not master.startswith("spark://"):
        return {}
    parallelism = max([c.parallelism for c in run_spec.components.values()] or [1])
    return cluster_cores(user_confs(run_spec), parallelism, num_workers)


def cluster_cores(user: Mapping[str, str], parallelism: int,
                  num_workers: int) -> dict[str, str]:
    """``spark.cores.max`` (the most parallel component's parallelism) and
    ``spark.executor.cores`` (those cores over ``topology.workers`` executors) of a
    cluster application whose topology sets neither in ``user``."""
    confs: dict[str, str] = {}
    cores_max = user.get("spark.cores.max") or str(max(1, parallelism))
    confs["spark.cores.max"] = cores_max
    if "spark.executor.cores" not in user and cores_max.isdigit():
        workers = max(1, num_workers)
        confs["spark.executor.cores"] = str(max(1, math.ceil(int(cores_max) / workers)))
    return confs


def standby_key(master: str, run_spec: RunSpec, num_workers: int
                ) -> tuple[tuple[str, str], ...]:
    """What an application's Spark settings are, for matching a submit with a standby
    driver: the master and the settings that outlive the start (the topology's
    ``spark.*`` settings, a cluster's cores); not what differs per application anyway
    (UI port, authentication secret, name, code, work directory) or is the launcher's
    choice (the class archive's JVM options, which only change how fast it starts)."""
    confs = {**cluster_confs(master, run_spec, num_workers), **user_confs(run_spec)}
    return (("master", master), *sorted(confs.items()))


def user_confs(run_spec: RunSpec | Mapping[str, Any]) -> dict[str, str]:
    """The topology's ``spark.*`` settings the launcher passes on (from its spec or
    its configuration)."""
    conf = run_spec.conf if isinstance(run_spec, RunSpec) else run_spec
    return {k: v for k, v in ((k, _conf_value(v)) for k, v in conf.items()
                              if isinstance(k, str) and k.startswith("spark."))
            if v is not None and k not in RESERVED_CONFS}


def _conf_value(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def environment(work_dir: Path, home: Path | None,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The application's environment, built explicitly: the variables of ``base``
    (the daemon's, ``os.environ``) named by :data:`INHERITED_VARIABLES` and
    :data:`INHERITED_PREFIXES`, this Python for the driver and workers, ``home`` as
    SPARK_HOME (the mirror of PySpark's), loopback, the topology's code on
    PYTHONPATH (the driver-side Python data source runner does not see ``--py-files``)
    and its work directory as ``$NIMBUS_THRIFT_WORK_DIR``, where the DSL's blob
    helpers look for its blobs (the topology's own path, not a daemon setting)."""
    base = os.environ if base is None else base
    env = {name: value for name, value in base.items()
           if name in INHERITED_VARIABLES or name.startswith(INHERITED_PREFIXES)}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = LOCAL_HOST
    env[WORK_DIR_ENV] = str(work_dir)
    if home is not None:
        env["SPARK_HOME"] = str(home)
    path = [str(work_dir / "code"), str(PACKAGE_ROOT)]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env
