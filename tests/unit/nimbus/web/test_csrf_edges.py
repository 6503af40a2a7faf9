"""The cross-site checks (nimbus/web/csrf.py) at their edges, through the web
application with a fake launcher (the fakes tier): an empty token, a Host that only
begins with one of the daemon's names, and the Sec-Fetch-Site values that are not
``same-origin``. Each is refused, and the topology is left as it was."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("host", ["localhost.evil.example", "localhost.attacker:8080",
                                  "LOCALHOST.evil.example:80",
                                  "127.0.0.1.evil.example"])
def test_a_host_that_only_begins_with_a_name_of_the_daemon_is_403(env: WebEnv,
                                                                  host: str) -> None:
    # DNS rebinding with a name whose first label is "localhost": the whole host is
    # compared, not its first label.
    tid = env.submit()
    response = env.request("GET", f"/api/v1/topology/{tid}", headers={"host": host})
    assert response.status == 403
    assert "is not a name of this daemon" in json.loads(response.body)["errorMessage"]
    assert b"antiForgeryToken" not in response.body
    status, body = env.post(f"/api/v1/topology/{tid}/kill/0", headers={"host": host})
    assert status == 403 and "is not a name of this daemon" in body["errorMessage"]
    assert env.get(f"/api/v1/topology/{tid}")[1]["status"] == "ACTIVE"


@pytest.mark.parametrize("site", ["same-site", "none", "cross-site"])
def test_an_action_not_from_the_same_origin_is_403(env: WebEnv, site: str) -> None:
    # same-site is another port or subdomain of this site (another origin); none is a
    # typed address or a bookmark: neither is this daemon's page.
    tid = env.submit()
    status, body = env.post(f"/api/v1/topology/{tid}/deactivate",
                            headers={"sec-fetch-site": site})
    assert status == 403
    assert f"refused a cross-site request (Sec-Fetch-Site: {site})" in body["errorMessage"]
    assert env.launcher.state[tid] == "running"
    assert env.post(f"/api/v1/topology/{tid}/deactivate",
                    headers={"sec-fetch-site": "same-origin"})[0] == 200
