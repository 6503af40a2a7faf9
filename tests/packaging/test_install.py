"""The package as a new user gets it: a wheel built from the checkout, installed outside
it, run from an empty folder (issue 30).

One wheel is built per session (from a copy of the checkout, so the build's own files
never land in it) and installed twice, without the ``spark`` extra:
- into a fresh virtualenv;
- with ``pip install --user`` into a fresh HOME / PYTHONUSERBASE (where the IDL files
  were once looked for under ``sys.prefix`` and not found).
Each install starts ``nimbus-thrift nimbus --launcher none --port 0`` from an empty
folder, calls it with ``nimbus-thrift list``, reads its web page, and checks that PySpark
is not even installed; the venv's daemon with the default (spark) launcher must stop
with the one sentence naming ``pip install 'nimbus-thrift[spark]'``. The build says no
setuptools warning, and the word count the README's quick start writes out
(``nimbus-thrift example wordcount``) is in the wheel.

pip uses the index this machine is configured with and the user's pip cache (so a
second run downloads nothing); ``-m "not packaging"`` leaves these tests out, and
NIMBUS_THRIFT_SKIP_PACKAGING=1 skips them where no index is reachable.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

CHECKOUT = Path(__file__).resolve().parents[2]
#: What a build needs of the checkout; the rest (tests, virtualenvs, build output, run
#: state, compiled accelerators) stays out of the copy.
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                     "__pycache__", "*.so", ".run", ".mypy_cache",
                                     ".pytest_cache", "tests", "node_modules")
#: pip's answers when it cannot reach the index at all (not a bad requirement).
_OFFLINE = re.compile(r"NewConnectionError|Failed to establish a new connection|"
                      r"Temporary failure in name resolution|Network is unreachable")
#: Generous: pip may build nothing, but a cold cache downloads the base requirements.
PIP_TIMEOUT = 600
START_TIMEOUT = 60.0
_LISTENING = re.compile(r"nimbus listening on (\S+):(\d+)")
_UI = re.compile(r"web UI, REST API and /metrics at (\S+)")
#: What setuptools says when the configuration is amiss: its warnings
#: (``SetuptoolsDeprecationWarning: ...``, ``_Warning: Package ... is absent``), and the
#: sentence of a data folder that is not a package.
_SETUPTOOLS_WARNING = re.compile(r"\w*Warning: .*|.*would be ignored.*")


def _pip_cache_dir() -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else ""


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user: no virtualenv, no PYTHONPATH, no nimbus settings,
    a HOME of its own (so no client.yaml or data directory of this machine's user), and
    the real pip cache (so nothing is downloaded twice)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONUSERBASE",
                        "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
           and not k.startswith("NIMBUS_THRIFT_")}
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if ".venv" not in p)
    cache = _pip_cache_dir()
    if cache:
        env["PIP_CACHE_DIR"] = cache
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = PIP_TIMEOUT,
         ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0 and _OFFLINE.search(done.stdout + done.stderr):
        pytest.skip(f"pip cannot reach its package index: {' '.join(cmd[:4])} ...")
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("NIMBUS_THRIFT_SKIP_PACKAGING") == "1":
        pytest.skip("NIMBUS_THRIFT_SKIP_PACKAGING=1")
    root = tmp_path_factory.mktemp("packaging")
    source, out = root / "source", root / "wheels"
    shutil.copytree(CHECKOUT, source, ignore=_NOT_COPIED, symlinks=True)
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out),
                 str(source)], _clean_env(root), cwd=root)
    # setuptools' warnings (a data folder that is not a package "would be ignored", a
    # deprecated setting, ...) are in pip's output only with -v.
    warned = _SETUPTOOLS_WARNING.findall(done.stdout + done.stderr)
    assert warned == [], f"the build warned: {warned}"
    wheels = list(out.glob("nimbus_thrift-*.whl"))
    assert len(wheels) == 1, done.stdout
    return wheels[0]


@dataclass
class Install:
    """An installed nimbus-thrift: its command, its Python, and the env to run them in."""
    command: Path
    python: Path
    env: dict[str, str]
    site: Path


@pytest.fixture(scope="session")
def venv_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Install:
    root = tmp_path_factory.mktemp("venv")
    (root / "home").mkdir()
    env = _clean_env(root / "home")
    _run([sys.executable, "-m", "venv", str(root / "venv")], env, cwd=root)
    python = root / "venv" / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], env, cwd=root)
    site = next((root / "venv" / "lib").glob("python3.*/site-packages"))
    return Install(root / "venv" / "bin" / "nimbus-thrift", python, env, site)


@pytest.fixture(scope="session")
def user_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Install:
    root = tmp_path_factory.mktemp("user")
    (root / "home").mkdir()
    base = Path(getattr(sys, "_base_executable", sys.executable))
    env = _clean_env(root / "home", PYTHONUSERBASE=str(root / "userbase"),
                     # A distribution's Python may refuse --user installs (PEP 668):
                     # this one is a scratch user base, removed afterwards.
                     PIP_BREAK_SYSTEM_PACKAGES="1")
    _run([str(base), "-m", "pip", "install", "--user", "--quiet", str(wheel)], env,
         cwd=root)
    site = next((root / "userbase" / "lib").glob("python3.*/site-packages"))
    return Install(root / "userbase" / "bin" / "nimbus-thrift", base, env, site)


@dataclass
class Daemon:
    host: str
    port: int
    ui_url: str
    lines: list[str]


def _lines_of(process: subprocess.Popen[str]) -> tuple[queue.Queue[str | None],
                                                       threading.Thread]:
    """The process's stderr lines as they come (None at its end), read by a thread that
    closes the pipe at the end."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        with process.stderr:
            for line in process.stderr:
                lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return lines, reader


@contextmanager
def running_daemon(install: Install, where: Path) -> Iterator[Daemon]:
    """``nimbus-thrift nimbus --launcher none --port 0`` started in ``where`` (an empty
    folder), once it says where it listens; stopped with SIGTERM afterwards."""
    data = where / "data"
    process = subprocess.Popen(
        [str(install.command), "nimbus", "--launcher", "none", "--port", "0",
         "--ui-port", "-1", "--data-dir", str(data), "--unix-socket", "",
         "--log-format", "json"],
        cwd=where, env=install.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    lines, reader = _lines_of(process)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT
        listening = ui = None
        while listening is None or ui is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail("the daemon did not say where it listens within "
                            f"{START_TIMEOUT} s:\n" + "".join(seen))
            if line is None:
                pytest.fail(f"the daemon exited ({process.wait()}):\n" + "".join(seen))
            seen.append(line)
            listening = listening or _LISTENING.search(line)
            ui = ui or _UI.search(line)
        yield Daemon(listening.group(1), int(listening.group(2)), ui.group(1), seen)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=30)


def _check_install(install: Install, empty: Path) -> None:
    assert not list(empty.iterdir())
    spark = subprocess.run(
        [str(install.python), "-c", "import importlib.util as u; "
         "print(sorted(m for m in ('pyspark', 'pandas', 'pyarrow') if u.find_spec(m)))"],
        cwd=empty, env=install.env, capture_output=True, text=True, timeout=60, check=True)
    assert spark.stdout.strip() == "[]", "the base install brought the spark extra"
    # The IDL is read from the installed package, wherever pip put it.
    where = subprocess.run(
        [str(install.python), "-c", "from nimbus_thrift import idl; "
         "print(idl.idl_path('nimbus.thrift'))"],
        cwd=empty, env=install.env, capture_output=True, text=True, timeout=60, check=True)
    assert Path(where.stdout.strip()).is_relative_to(install.site)
    with running_daemon(install, empty) as daemon:
        listed = subprocess.run(
            [str(install.command), "list", "--host", daemon.host, "--port",
             str(daemon.port)],
            cwd=empty, env=install.env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == "no topologies"
        with urllib.request.urlopen(daemon.ui_url, timeout=30) as page:
            assert b"<html" in page.read().lower()   # the assets are in the wheel
    assert not any("Traceback" in line for line in daemon.lines)


def test_a_venv_install_runs_the_daemon_and_a_client(venv_install: Install,
                                                     tmp_path: Path) -> None:
    _check_install(venv_install, tmp_path)


def test_a_user_install_runs_the_daemon_and_a_client(user_install: Install,
                                                     tmp_path: Path) -> None:
    assert user_install.command.is_file()
    _check_install(user_install, tmp_path)


def test_the_spark_launcher_without_the_extra_names_it(venv_install: Install,
                                                       tmp_path: Path) -> None:
    done = subprocess.run(
        [str(venv_install.command), "nimbus", "--port", "0", "--ui-port", "0",
         "--data-dir", str(tmp_path / "data"), "--unix-socket", ""],
        cwd=tmp_path, env=venv_install.env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "pip install 'nimbus-thrift[spark]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_word_count_is_written_out_from_an_empty_folder(venv_install: Install,
                                                            tmp_path: Path) -> None:
    # The README's quick start starts here: the example ships in the wheel.
    done = subprocess.run([str(venv_install.command), "example", "wordcount"], cwd=tmp_path,
                          env=venv_install.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (CHECKOUT / "examples" / "wordcount.py").read_text()
    (tmp_path / "wordcount.py").write_text(done.stdout)
    # Without the spark extra, running it names the extra.
    run = subprocess.run([str(venv_install.command), "run", "wordcount.py"], cwd=tmp_path,
                         env=venv_install.env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "pip install 'nimbus-thrift[spark]'" in run.stderr
    assert "Traceback" not in run.stderr
