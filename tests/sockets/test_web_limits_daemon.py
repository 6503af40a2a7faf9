"""The daemon's HTTP side on a real socket runs with the default limits
(nimbus/web/limits.py): the daemon builds its server without limits of its own, and
a body of exactly the default limit is read where one byte more is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.web.limits import HttpLimits

from support.nimbus import FakeClock
from support.web import FiguresLauncher, http_get


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"), "port": 0,
                                        "ui_port": -1})
    d = NimbusDaemon(config, launcher=FiguresLauncher(FakeClock()))
    d.start()
    yield d
    d.stop(grace=5.0)


def test_the_daemons_http_side_has_the_default_limits(daemon: NimbusDaemon) -> None:
    assert daemon.web is not None and daemon.web.address is not None
    assert daemon.web.limits == HttpLimits()
    assert (daemon.web.limits.max_body_bytes, daemon.web.limits.max_header_bytes) == \
        (65536, 16384)
    path = "/api/v1/topology/nope/rebalance/0"
    # 64 KiB of body is read (then the action is refused for what it is, not its size).
    status, _, body = http_get(daemon.web.address, path, method="POST",
                               body=b" " * 65536)
    assert status != 413, body
    status, _, body = http_get(daemon.web.address, path, method="POST",
                               body=b" " * 65537)
    assert status == 413
    assert json.loads(body)["errorMessage"] == "the request body is over 65536 bytes"
