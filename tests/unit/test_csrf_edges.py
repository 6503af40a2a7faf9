"""The cross-site checks (nimbus/web/csrf.py) at their edges, through the web
application with a fake launcher (the fakes tier): an empty token is refused, and the
topology is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from support.web import Token, WebEnv


@pytest.fixture
def env(tmp_path: Path) -> Iterator[WebEnv]:
    e = WebEnv(tmp_path / "data", admins=["root"])
    yield e
    e.close()


def test_an_empty_token_is_403_and_changes_nothing(env: WebEnv) -> None:
    tid = env.submit()
    status, body = env.post(f"/api/v1/topology/{tid}/kill/0", token="")
    assert status == 403
    assert "is not this daemon's antiForgeryToken" in body["errorMessage"]
    assert env.get(f"/api/v1/topology/{tid}")[1]["status"] == "ACTIVE"
    assert env.launcher.state[tid] == "running"
    assert env.store.action(tid) is None
    # The daemon's own token, on the same request, passes.
    assert env.post(f"/api/v1/topology/{tid}/kill/0", token=Token.REAL)[0] == 200
