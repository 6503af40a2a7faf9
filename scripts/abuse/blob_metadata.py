"""Issue 27, item 5: blob metadata outside the quota. The attacker (from 127.0.0.2)
creates 40 empty blobs whose ACLs hold 255 entries of 4 KB names, then up to 1,200
empty blobs with 60 entries of 250-byte names (~15.7 KB of ACL, under the 16 KiB a
fixed daemon allows), then deletes every blob it made. Meanwhile a
well-behaved client on 127.0.0.1 calls getClusterInfo. Prints what the attacker got,
the state database's size (file and WAL) after each step and once the daemon's sweeps
ran after the deletes, the bytes the quota counts (/metrics' inbox_bytes), the good
client's median and worst latency, and the daemon's RSS.

Usage:
    .venv/bin/python scripts/abuse/blob_metadata.py [--big 40] [--small 1200]
        [--tree DIR]     # a checkout to run the daemon from (e.g. a worktree of before)
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from harness import Daemon, Probe, Raw, outcome

from nimbus_thrift.idl import nimbus_idl

N = nimbus_idl()
#: Bytes of each name in the big ACLs: 255 of them stay under the 1 MiB frame.
NAME_BYTES = 4000
#: The second wave's ACLs: 60 names of this many bytes.
FIT_NAMES, FIT_NAME_BYTES = 60, 250
#: The daemon's sweep period here (its default is minutes): the deletes' pages go back
#: at a sweep.
SWEEP_SECS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def db_mib(data_dir: Path) -> str:
    sizes = [(data_dir / f"nimbus.sqlite3{suffix}") for suffix in ("", "-wal")]
    main, wal = (p.stat().st_size / 2**20 if p.exists() else 0.0 for p in sizes)
    return f"{main:.1f} MiB (+ WAL {wal:.1f} MiB)"


def inbox_bytes(ui_port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as exc:
        return f"unknown ({exc})"
    found = re.search(r"^\w*inbox_bytes (\S+)$", text, re.M)
    return f"{float(found.group(1)):.0f}" if found else "unknown"


def create(raw: Raw, key: str, names: list[str]) -> str:
    acl = [N.AccessControl(type=2, name=name, access=1) for name in names]

    def go() -> None:
        session = raw.call("beginCreateBlob", key, N.SettableBlobMeta(acl=acl))
        raw.call("finishBlobUpload", session)
    return outcome(go)


def tally(results: list[str]) -> str:
    """Outcomes counted, the keys and names in them elided (one line per kind)."""
    kinds = Counter(re.sub(r"'[^']*'", "'...'", r) for r in results)
    return "; ".join(f"{n} x {what}" for what, n in kinds.most_common(3))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--big", type=int, default=40, help="blobs with 255-entry ACLs")
    p.add_argument("--small", type=int, default=1200,
                   help=f"blobs with {FIT_NAMES}-entry ACLs of {FIT_NAME_BYTES}-byte names")
    p.add_argument("--tree", type=Path, default=None,
                   help="run the daemon from this checkout (PYTHONPATH)")
    args = p.parse_args()
    if args.tree is not None:
        os.environ["PYTHONPATH"] = str(args.tree.resolve())
    ui_port = free_port()
    with tempfile.TemporaryDirectory() as work:
        d = Daemon(Path(work), ui_port=ui_port, sweep_secs=SWEEP_SECS)
        try:
            rss_before = d.rss_mib()
            print(f"start: database {db_mib(d.data_dir)}, inbox_bytes "
                  f"{inbox_bytes(ui_port)}")
            raw = Raw(d)
            made: list[str] = []
            with Probe(d) as probe:
                started = time.perf_counter()
                results = []
                for i in range(args.big):
                    names = [f"u{i:03d}{j:03d}" + "x" * (NAME_BYTES - 7) for j in range(255)]
                    results.append(create(raw, f"big{i}", names))
                    if results[-1] == "ok":
                        made.append(f"big{i}")
                print(f"{args.big} blobs of 255 x {NAME_BYTES}-byte names: "
                      f"{tally(results)} ({time.perf_counter() - started:.1f} s)")
                print(f"  database {db_mib(d.data_dir)}, inbox_bytes {inbox_bytes(ui_port)}")
                results = []
                fit = [f"u{j:03d}" + "y" * (FIT_NAME_BYTES - 4) for j in range(FIT_NAMES)]
                for i in range(args.small):
                    results.append(create(raw, f"small{i}", fit))
                    if results[-1] == "ok":
                        made.append(f"small{i}")
                print(f"{args.small} empty blobs of {FIT_NAMES} x {FIT_NAME_BYTES}-byte "
                      f"names: {tally(results)}")
                print(f"  database {db_mib(d.data_dir)}, inbox_bytes {inbox_bytes(ui_port)}")
                for key in made:
                    raw.call("deleteBlob", key)
                print(f"deleted {len(made)}: database {db_mib(d.data_dir)}")
                # Sweeps give the free pages back; WAL checkpoints move them to the file.
                deadline = time.monotonic() + 10 * SWEEP_SECS
                while time.monotonic() < deadline:
                    raw.call("listBlobs", "")          # commits keep checkpoints going
                    time.sleep(SWEEP_SECS / 2)
                print(f"  after {10 * SWEEP_SECS} s of sweeps: database "
                      f"{db_mib(d.data_dir)}, inbox_bytes {inbox_bytes(ui_port)}")
            raw.close()
            lat = probe.latencies
            if lat:
                print(f"good client, getClusterInfo: {len(lat)} answers, median "
                      f"{statistics.median(lat) * 1e3:.0f} ms, worst {max(lat) * 1e3:.0f} ms,"
                      f" {len(probe.errors)} errors")
            print(f"daemon RSS: {rss_before:.0f} MiB before, peak "
                  f"{d.rss_mib('VmHWM'):.0f} MiB, {d.rss_mib():.0f} MiB after")
        finally:
            d.stop()


if __name__ == "__main__":
    sys.exit(main())
