"""``nimbus-thrift submit``: package a topology file's project, upload it, submit it and
optionally follow it until it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..client.defaults import DEFAULT_TIMEOUT, DEFAULT_WAIT_TIMEOUT
from .connection import connected_client
from .options import connection_options, echo_json
from .param_types import ConfItem, Wait, WaitSeconds
from .progress import UploadProgress, echo_status


@click.command(short_help="Package, upload and submit a topology file.")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Topology name.  [default: the class's `name` attribute, "
                             "else the file's name without .py]")
@click.option("--topology", "class_name", metavar="CLASS",
              help="The Topology class to submit, when the file defines several.")
@click.option("--conf", "conf_items", multiple=True, type=ConfItem(),
              help="Topology configuration over the class's `config`; VALUE is JSON if "
                   "it parses (2, true, null, {...}), else a string. Repeatable.")
@click.option("--inactive", is_flag=True, help="Submit with its spouts paused.")
@click.option("--wait", "wait", type=WaitSeconds(DEFAULT_WAIT_TIMEOUT), is_flag=False,
              flag_value=WaitSeconds.BARE, default=None, metavar="[SECONDS]",
              help="Follow its status until it runs, for at most SECONDS "
                   f"(--wait alone: {DEFAULT_WAIT_TIMEOUT:g}); exit 1 if it fails or "
                   "does not run in time.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=None,
              help=f"Seconds to wait for each reply.  [default: {DEFAULT_TIMEOUT:g}]")
@click.option("--call-timeout", type=click.FloatRange(0, min_open=True), default=None,
              hidden=True, help="Deprecated spelling of --timeout.")
@connection_options
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (id, name, sha256, bytes, status) and no "
                   "progress.")
def submit(path: Path, name: str | None, class_name: str | None,
           conf_items: tuple[tuple[str, Any], ...], inactive: bool, wait: Wait | None,
           timeout: float | None, call_timeout: float | None, target: Any,
           as_json: bool) -> None:
    """Package a topology file's project, upload it and submit it.

    PATH is a .py file defining a Topology subclass. Its project root (the file's
    directory, or the one above its top package) is zipped: *.py files and package
    data, without virtualenvs, hidden, build and cache directories. Everything is
    checked before anything is uploaded. Prints the topology id.
    """
    import tempfile

    reply_timeout, wait_secs = _timeouts(wait, timeout, call_timeout)

    from ..client.submit import submit_prepared, wait_for_topology
    from ..topology.package import PackageError, prepare

    err = not as_json
    with tempfile.TemporaryDirectory(prefix="nimbus-submit-") as tmp:
        try:
            prepared = prepare(path, Path(tmp) / "code.zip", name=name,
                               conf=dict(conf_items), class_name=class_name)
        except PackageError as exc:
            raise click.ClickException(str(exc)) from None
        code = prepared.code
        for note in code.skipped:
            click.echo(f"warning: {note}", err=True)
        if err:
            files = f"{len(code.files)} file" + ("" if len(code.files) == 1 else "s")
            click.echo(f"packaged {files} from {code.root} "
                       f"({code.size:,} bytes, sha256 {code.sha256[:16]})", err=True)
        progress = UploadProgress()
        with connected_client(target, reply_timeout) as client:
            try:
                # The upload and its submit on one leader (again on the next, once).
                topology_id = client.on_leader(submit_prepared, client, prepared,
                                               inactive=inactive,
                                               progress=progress if err else None,
                                               what="the submit")
            finally:
                progress.close()
            if err:
                click.echo(topology_id)
            info = None
            if wait_secs is not None:
                info = wait_for_topology(client, topology_id, inactive=inactive,
                                         timeout=wait_secs,
                                         on_status=echo_status if err else None)
    if as_json:
        echo_json({"id": topology_id, "name": prepared.name, "sha256": code.sha256,
                   "bytes": code.size, "files": len(code.files),
                   "skipped": list(code.skipped),
                   "status": info.status if info else None,
                   "sched_status": info.sched_status if info else None})
    elif info is not None:
        click.echo(f"{prepared.name} is {info.sched_status}", err=True)


def _timeouts(wait: Wait | None, timeout: float | None,
              call_timeout: float | None) -> tuple[float, float | None]:
    """(each reply's timeout, how long --wait follows the status or None).

    --timeout is each reply's timeout, as in every other command, and --wait takes the
    seconds (a number, as kill's and rebalance's -w). Before, submit's --wait was a flag
    whose deadline was --timeout, and --call-timeout the reply timeout: those spellings
    still mean what they meant, with a warning naming the new one.
    """
    if call_timeout is not None:
        click.echo("warning: --call-timeout is deprecated: write --timeout (seconds to "
                   "wait for each reply, as in the other commands)", err=True)
    if wait is not None and wait.bare and timeout is not None:
        click.echo(f"warning: '--wait --timeout {timeout:g}' is deprecated: write "
                   f"--wait {timeout:g} (--timeout is now each reply's timeout, as in the "
                   "other commands)", err=True)
        return call_timeout or DEFAULT_TIMEOUT, timeout
    reply = timeout if timeout is not None else call_timeout
    return reply or DEFAULT_TIMEOUT, wait.seconds if wait is not None else None
