"""Who may use a transfer whose beginner is not known (nimbus/authz.py), with the fakes:
a download session begun outside a request (the daemon itself, no principal) is
nobody's, so no user and no admin may read it, where an upload begun so is left to the
admins (tests/unit/nimbus/security/test_authz.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from support.nimbus import FakeClock, FakeLauncher, N, make_zip, request_as, upload
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.state.store import Store


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[NimbusHandler]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config = load_config(env={}, flags={"data_dir": str(data_dir), "launcher": "none",
                                        "admins": ["ops"], "users": ["alice"]})
    store = Store(data_dir / "nimbus.sqlite3")
    h = NimbusHandler(N, config, store, FakeLauncher(), clock=FakeClock())
    h.recover()
    yield h
    h.close()
    store.close()


@pytest.mark.parametrize("who", ["alice", "ops"])      # a user, an admin
def test_a_download_begun_outside_a_request_is_nobodys(handler: NimbusHandler,
                                                       who: str) -> None:
    location = upload(handler, make_zip())              # the daemon's own, no principal
    session = handler.beginFileDownload(location)
    sessions = handler.transfers.downloads.sessions
    before = {k: d.offset for k, d in sessions.items()}
    with request_as(who), pytest.raises(N.AuthorizationException) as info:
        handler.downloadChunk(session)
    assert info.value.msg == (f"{who!r} may not call downloadChunk on download "
                              f"{session!r}: only the principal that began it may read it")
    assert {k: d.offset for k, d in sessions.items()} == before     # nothing was read
    # The daemon itself (outside a request) still reads it.
    chunk = handler.downloadChunk(session)
    assert chunk and Path(location).read_bytes().startswith(chunk)
