"""Issue 27, item 7: SIGHUP, what a closed terminal or a dropped SSH session sends to
the daemon. A client on 127.0.0.1 calls getClusterInfo in a loop; after a few seconds
the daemon gets SIGHUP. Before: it died of the signal (no graceful stop: the Unix
socket left behind, calls cut off). Prints how it ended, how long the stop took,
what it left in the data directory, the client's median and worst latency before the
signal, and the daemon's RSS.

    .venv/bin/python scripts/abuse/hangup.py [--tree DIR] [--seconds 3]
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from abuse_common import REPO, parser
from tree_daemon import Timed, TreeDaemon

sys.path.insert(0, str(REPO))
from nimbus_thrift.client import NimbusClient  # noqa: E402


def lock_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def main() -> None:
    p = parser(__doc__ or "")
    p.set_defaults(seconds=3.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = TreeDaemon(args.tree, Path(tmp))
        unix = Path(daemon.event("nimbus_started")["unix_socket"])
        client = NimbusClient("127.0.0.1", daemon.port, timeout=10, connect_attempts=1)
        good = Timed(lambda: client.call("getClusterInfo"))
        try:
            good.start()
            time.sleep(args.seconds)
            rss = daemon.rss_mib()
            good.stop.set()
            good.join(30)
            started = time.monotonic()
            daemon.proc.send_signal(signal.SIGHUP)
            code = daemon.proc.wait(30)
            took = time.monotonic() - started
        finally:
            client.close()
            daemon.stop()
        how = (f"killed by {signal.Signals(-code).name}" if code < 0
               else f"exit status {code}")
        lock = daemon.data_dir / "nimbus.lock"
        print(f"hangup: {how} after {took * 1e3:.0f} ms; graceful stop logged: "
              f"{bool(daemon.event('nimbus_stopped'))}; nimbus.sock left: {unix.exists()}; "
              f"nimbus.lock {'free' if lock_free(lock) else 'HELD'}"
              f"{' (file kept, as after SIGTERM)' if lock.exists() else ''}; daemon RSS "
              f"{rss:.0f} MiB; {good.report('good client before the signal')}")


if __name__ == "__main__":
    main()
