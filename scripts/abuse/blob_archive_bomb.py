"""Issue 27, item 1: a tiny bzip2 tar blob mapped with ``uncompress``. The attacker (from
127.0.0.2) creates a blob of 2,000,000 empty tar members (~25 KB of bzip2), submits a
topology that maps it with ``uncompress``, then updates it again (each new version is
placed again). Meanwhile a well-behaved client on 127.0.0.1 updates an unrelated blob
that another topology maps (each update is placed before it is answered) and a probe
calls getClusterInfo. Prints both clients' median and worst latency, what the attacker
got, and the daemon's RSS (before, peak, after).

Before (the tree before issue 27's fix): the daemon listed every member with
getmembers() under the lock every work directory shared.

Usage:
    .venv/bin/python scripts/abuse/blob_archive_bomb.py [--members 2000000] [--rounds 3]
        [--tree DIR]     # a checkout to run the daemon from (e.g. a worktree of before)
"""

from __future__ import annotations

import argparse
import bz2
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from harness import Daemon, Probe, Raw, outcome

from nimbus_thrift.client.blobs import upload_blob
from nimbus_thrift.idl import nimbus_idl
from nimbus_rows import code_zip, topology

N = nimbus_idl()
#: Members per bzip2 stream: the bomb is one stream repeated (tarfile reads
#: concatenated streams as one), so making 2,000,000 members takes ~2 s, not 70.
STREAM_MEMBERS = 20_000


def bomb(members: int) -> bytes:
    """A bzip2 tar of ``members`` empty files named ``e``."""
    header = tarfile.TarInfo("e").tobuf(format=tarfile.USTAR_FORMAT)
    stream = bz2.compress(header * STREAM_MEMBERS, 9)
    whole, rest = divmod(members, STREAM_MEMBERS)
    return stream * whole + bz2.compress(header * rest + b"\0" * 1024, 9)


def upload_raw(raw: Raw, code: bytes) -> str:
    location = raw.call("beginFileUpload")
    raw.call("uploadChunk", location, code)
    raw.call("finishFileUpload", location)
    return location


def blob_raw(raw: Raw, key: str, data: bytes, create: bool) -> None:
    if create:
        meta = N.SettableBlobMeta(acl=[N.AccessControl(type=1, access=7)])
        session = raw.call("beginCreateBlob", key, meta)
    else:
        session = raw.call("beginUpdateBlob", key)
    for i in range(0, len(data), 500_000):
        raw.call("uploadBlobChunk", session, data[i:i + 500_000])
    raw.call("finishBlobUpload", session)


def median_worst(latencies: list[float]) -> str:
    if not latencies:
        return "no answers"
    return (f"{len(latencies)} answers, median {statistics.median(latencies) * 1e3:.0f} ms,"
            f" worst {max(latencies) * 1e3:.0f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=3, help="versions of the bomb placed")
    p.add_argument("--tree", type=Path, default=None,
                   help="run the daemon from this checkout (PYTHONPATH)")
    args = p.parse_args()
    if args.tree is not None:
        os.environ["PYTHONPATH"] = str(args.tree.resolve())
    data = bomb(args.members)
    print(f"bomb: {args.members} members, {len(data)} bytes of bzip2")
    with tempfile.TemporaryDirectory() as work:
        d = Daemon(Path(work))
        try:
            rss_before = d.rss_mib()
            with d.client(timeout=120) as good:
                upload_blob(good, "dict", io.BytesIO(b"v0"), create=True)
                location = good.beginFileUpload()
                good.uploadChunk(location, code_zip())
                good.finishFileUpload(location)
                good.submitTopology("reader", location, json.dumps(
                    {"topology.blobstore.map": {"dict": {"localname": "dict.txt"}}}),
                    topology(["app.parts.Source"]))
            attack_log: list[str] = []
            stop = threading.Event()

            def attack() -> None:
                raw = Raw(d, timeout=600)
                try:
                    started = time.perf_counter()
                    blob_raw(raw, "bomb", data, create=True)
                    result = outcome(lambda: raw.call(
                        "submitTopology", "bomber", upload_raw(raw, code_zip()),
                        json.dumps({"topology.blobstore.map": {
                            "bomb": {"localname": "data", "uncompress": True}}}),
                        topology(["app.parts.Source"])))
                    attack_log.append(f"submit {result} in "
                                      f"{time.perf_counter() - started:.1f} s")
                    for _ in range(args.rounds - 1):
                        started = time.perf_counter()
                        result = outcome(lambda: blob_raw(raw, "bomb", data, create=False))
                        attack_log.append(f"update {result} in "
                                          f"{time.perf_counter() - started:.1f} s")
                finally:
                    raw.close()
                    stop.set()

            updates: list[float] = []
            failures: list[str] = []
            thread = threading.Thread(target=attack, daemon=True)
            peak = rss_before
            with Probe(d) as probe, d.client(timeout=120) as good:
                thread.start()
                version = 0
                while not stop.is_set():
                    version += 1
                    started = time.perf_counter()
                    result = outcome(lambda: upload_blob(
                        good, "dict", io.BytesIO(b"v%d" % version), create=False))
                    if result == "ok":
                        updates.append(time.perf_counter() - started)
                    else:
                        failures.append(result)
                    peak = max(peak, d.rss_mib(), d.rss_mib("VmHWM"))
                    stop.wait(0.1)
                thread.join()
            for line in attack_log:
                print(f"attacker: {line}")
            with d.client() as client:
                tid = next(t.id for t in client.getClusterInfo().topologies
                           if t.name == "bomber")
                info = client.getTopologyInfo(tid)
                errors = [e.error for errs in (info.errors or {}).values() for e in errs]
            print(f"attacker's topology errors: {errors[:1]} ({len(errors)} in all)")
            print(f"good client, unrelated blob updates: {median_worst(updates)}, "
                  f"{len(failures)} failures")
            print(f"good client, getClusterInfo: {median_worst(probe.latencies)}, "
                  f"{len(probe.errors)} errors")
            print(f"daemon RSS: {rss_before:.0f} MiB before, peak {peak:.0f} MiB, "
                  f"{d.rss_mib():.0f} MiB after")
        finally:
            d.stop()


if __name__ == "__main__":
    sys.exit(main())
