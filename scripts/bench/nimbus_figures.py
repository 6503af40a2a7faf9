#!/usr/bin/env python3
"""Prints the nimbus daemon's figures for code transfer and calls, on this machine:
upload and download MB/s through NimbusClient (Storm's 307,200-byte chunks, each one
committed to SQLite with synchronous=FULL), the time of a submit (zip checks, topology
checks, commit) and of getClusterInfo with N topologies.

    .venv/bin/python scripts/bench/nimbus_figures.py [--mib 64] [--topologies 20]

There is no Storm Nimbus here to compare with, so these are absolute figures: read them
on a quiet machine, against an earlier run.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import structlog

from nimbus_thrift.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config, nimbus_idl


def code_zip(pad_bytes: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("app/__init__.py", "")
        zf.writestr("app/parts.py", "class Source: pass\nclass Sink: pass\n")
        zf.writestr("pad.bin", os.urandom(pad_bytes))
    return buf.getvalue()


def topology() -> object:
    n = nimbus_idl()

    def shell(script: str) -> object:
        return n.ComponentObject(shell=n.ShellComponent(execution_command="python",
                                                        script=script))
    return n.StormTopology(
        spouts={"source": n.SpoutSpec(spout_object=shell("app.parts.Source"), common=n.ComponentCommon(
            inputs={}, streams={"default": n.StreamInfo(output_fields=["x"], direct=False)}))},
        bolts={"sink": n.Bolt(bolt_object=shell("app.parts.Sink"), common=n.ComponentCommon(
            inputs={n.GlobalStreamId(componentId="source", streamId="default"):
                    n.Grouping(shuffle=n.NullStruct())}, streams={}, parallelism_hint=2))},
        state_spouts={})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64, help="code zip size")
    parser.add_argument("--topologies", type=int, default=20)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "code.zip"
        src.write_bytes(code_zip(args.mib << 20))
        size = src.stat().st_size
        config = load_config(env={}, flags={"data_dir": f"{tmp}/data", "port": 0,
                                                "launcher": "none", "ui_port": 0})
        with NimbusDaemon(config) as daemon:
            assert daemon.handler is not None
            port = daemon.handler.address[1]
            with NimbusClient("127.0.0.1", port) as client:
                start = time.perf_counter()
                location = client.upload_file(src)
                upload = time.perf_counter() - start
                start = time.perf_counter()
                for i in range(args.topologies):
                    client.submitTopology(f"t{i}", location, "{}", topology())
                submit = (time.perf_counter() - start) / args.topologies
                first = client.getClusterInfo().topologies[0].id
                start = time.perf_counter()
                client.download_file(first, Path(tmp) / "back.zip")
                download = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(200):
                    client.getClusterInfo()
                cluster = (time.perf_counter() - start) / 200
    print(f"upload    {size / upload / 1e6:8.0f} MB/s   ({size / 1e6:.0f} MB in {upload:.2f} s)")
    print(f"download  {size / download / 1e6:8.0f} MB/s")
    print(f"submit    {submit * 1e3:8.1f} ms     (zip of {size / 1e6:.0f} MB checked, then committed)")
    print(f"getClusterInfo with {args.topologies} topologies  {cluster * 1e3:.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
