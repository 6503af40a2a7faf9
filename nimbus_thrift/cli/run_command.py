"""``nimbus-thrift run FILE``: a topology run in this process on a local Spark, for a
while, without a daemon (Storm's ``storm local``, streamparse's ``sparse run``).

The file is loaded and checked as ``submit`` loads and checks it
(topology/package.py); the run is the daemon's (the same query, streaming) in a
``local[*]`` session of this process (runner/local.py: ``local_session``, ``run_for``),
its work directory and checkpoint in a temporary folder removed at the end. What the
leaf bolts emit is printed as each micro-batch ends (at most SHOWN_PER_BATCH tuples
each), the topology's log lines (its code's logging, Spark's warnings) go to stderr as
they are written, and the components' figures are printed at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .param_types import ConfItem
from .stop_signals import stopping_on_signals

#: Seconds a run lasts without --for: Storm's ``storm local`` default (--local-ttl 20).
DEFAULT_SECONDS = 20.0
#: Tuples printed per leaf component and stream per micro-batch (the rest counted).
SHOWN_PER_BATCH = 10


@click.command(short_help="Run a topology file on a local Spark for a while.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--for", "seconds", type=click.FloatRange(0), default=DEFAULT_SECONDS,
              show_default=True, metavar="SECONDS",
              help="Stop this many seconds after the topology starts (Spark takes a few "
                   "more to start first); 0 runs until Ctrl-C.")
@click.option("--topology", "class_name", metavar="CLASS",
              help="The Topology class to run, when the file defines several.")
@click.option("--conf", "conf_items", multiple=True, type=ConfItem(),
              help="Topology configuration over the class's `config`; VALUE is JSON if "
                   "it parses (2, true, null, {...}), else a string. Repeatable.")
def run(path: Path, seconds: float, class_name: str | None,
        conf_items: tuple[tuple[str, Any], ...]) -> None:
    """Run the topology in PATH on a local Spark in this process, without a daemon,
    printing what its leaf bolts emit, then its components' figures.

    Needs the spark extra (pip install 'nimbus-thrift[spark]') and Java 17. Ctrl-C
    stops it early; the run starts afresh each time (no state is kept).
    """
    import tempfile

    from ..nimbus.spark.install import find_spark_home, java_binary
    from ..runner.local import spec_of
    from ..topology.package import PackageError, load_topology, locate, topology_conf
    from ..topology.validate import InvalidTopology

    if find_spark_home() is None:
        raise click.ClickException(
            f"running a topology needs PySpark, which is not installed for "
            f"{sys.executable}: pip install 'nimbus-thrift[spark]'")
    if java_binary() is None:
        raise click.ClickException("Spark needs Java (17 or later): there is no java on "
                                   "PATH and JAVA_HOME is not set")
    try:
        topology = load_topology(path, class_name)
        conf = topology_conf(topology, dict(conf_items))
        root = locate(path).root
        spec = spec_of(topology, conf, topology_id=f"{topology.__name__}-local")
    except PackageError as exc:
        raise click.ClickException(str(exc)) from None
    except InvalidTopology as exc:      # the daemon's checks at submit
        raise click.ClickException(f"{path}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="nimbus-run-") as tmp:
        _run(spec, Path(tmp), root, seconds or None)


def _run(spec: Any, tmp: Path, root: Path, seconds: float | None) -> None:
    from ..runner.local import RunFailed, local_session, run_for

    # The topology's modules, as the daemon's driver and workers import them.
    sys.path.insert(0, str(root))
    click.echo(f"run: starting a local Spark for {spec.name} (a few seconds)", err=True)
    spark = local_session(tmp / "spark", code_dirs=[root])
    try:
        what = f"for {seconds:g} s" if seconds else "until Ctrl-C"
        click.echo(f"run: {spec.name} runs {what}", err=True)
        with stopping_on_signals() as stop:
            result = run_for(spec, spark, tmp / "run", seconds, on_batch=_print_batch,
                             stop=stop)
    except RunFailed as exc:
        raise click.ClickException(f"{spec.name} failed: {exc}") from None
    finally:
        spark.stop()
    click.echo(f"run: stopped after {result.batches} batches with data", err=True)
    for component in spec.order():
        figures = result.figures.get(component)
        if figures is not None:
            click.echo(f"{component}: emitted {figures.emitted}, processed "
                       f"{figures.processed}")


def _print_batch(batch_id: int, outputs: dict[str, dict[str, list[tuple]]]) -> None:
    for component, streams in sorted(outputs.items()):
        for stream, tuples in sorted(streams.items()):
            shown = "" if stream == "default" else f" {stream}"
            for values in tuples[:SHOWN_PER_BATCH]:
                click.echo(f"{component}{shown}: {values!r}")
            if len(tuples) > SHOWN_PER_BATCH:
                click.echo(f"{component}{shown}: ... and {len(tuples) - SHOWN_PER_BATCH} "
                           f"more in batch {batch_id}")
