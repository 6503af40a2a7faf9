"""The ``nimbus-thrift`` command: parse, validate, call one library function.

User mistakes are one sentence and a non-zero exit, never a traceback.

This package holds the click group and registers the commands; each module beside it
owns one job: the shared flags (:mod:`.options`), the values users type
(:mod:`.param_types`), the client connection (:mod:`.connection`), stopping on signals
(:mod:`.stop_signals`), submit's progress lines (:mod:`.progress`), and the commands
themselves: the demo server (:mod:`.demo_command`), the daemon (:mod:`.daemon_commands`),
the topologies (:mod:`.topology_commands`), submitting (:mod:`.submit_command`), the
blob store (:mod:`.blob_commands`), a topology's log (:mod:`.logs_command`, read by
:mod:`.log_reader`), a local run without a daemon (:mod:`.run_command`) and the
examples the package ships (:mod:`.example_command`).
"""

from __future__ import annotations

import click

from .. import logs
from .blob_commands import blob
from .daemon_commands import nimbus, ui, warm_up
from .demo_command import demo
from .example_command import example
from .run_command import run
from .logs_command import logs_
from .submit_command import submit
from .topology_commands import activate, conf, deactivate, info, kill, list_, rebalance, \
    set_log_level


@click.group()
@click.version_option(package_name="nimbus-thrift")
def main() -> None:
    """nimbus-thrift: a Storm-Nimbus-like service on a half-sync/half-async Thrift server.

    `example wordcount > wordcount.py` writes out an example topology; `run` runs one on
    a local Spark without a daemon. Start the daemon with `nimbus` (`warm-up` first
    makes topologies start sooner);
    `submit`, `list`, `info`, `kill`, `activate`, `deactivate`, `rebalance`, `conf`,
    `set-log-level`, `logs` and `blob` talk to a running one: through the local daemon's Unix
    socket when it exists and no host or port is given, else over TCP (--host/--port),
    with TLS given --tls-cert, --tls-key or --tls-ca. Each setting also comes from
    NIMBUS_THRIFT_HOST, ..._PORT, ..._TLS_CERT, ..._TLS_KEY, ..._TLS_CA, ..._UNIX_SOCKET,
    or from ~/.config/nimbus-thrift/client.yaml (keys host, port, tls_cert, tls_key,
    tls_ca, unix_socket); flags win over the environment, which wins over the file.
    NO_COLOR turns colour off, FORCE_COLOR on (else a terminal gets it).
    """
    # Inherited by every subcommand's context (click.echo strips or keeps styles by it);
    # the console log renderer asks logs.color_choice itself.
    choice = logs.color_choice()
    if choice is not None:
        click.get_current_context().color = choice


# The order commands were written in (--help sorts them by name).
for _command in (demo, nimbus, ui, warm_up, list_, info, kill, activate, deactivate,
                 rebalance, submit, conf, blob, set_log_level, logs_, example,
                 run):
    main.add_command(_command)
del _command
