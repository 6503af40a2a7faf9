"""The authorization rules as functions (nimbus/security/authz.py), without a handler:
which principals a conf names, what a refusal carries, the default users, anonymous
under every rule, the principal a client certificate gives; and that a topology's
Spark application does not inherit the daemon's secrets. Each service method by
principal, through the handler, is in test_authz.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.security.authz import (ANONYMOUS, Authorizer, Call,
                                                 CertificatePrincipals, TopologyAcl,
                                                 Unauthorized, principals_in)
from nimbus_thrift.nimbus.spark import submit as submit_module
from nimbus_thrift.rpc.tls import CertificateRefused


# --- the rules as functions ---------------------------------------------------------------

def test_principals_in_a_conf_grant_nothing_unless_a_list_of_names() -> None:
    assert principals_in({"topology.users": ["a", "b", 3, ""]}, "topology.users") == \
        frozenset({"a", "b"})
    for value in ("a", None, {"a": 1}, 5):
        assert principals_in({"topology.users": value}, "topology.users") == frozenset()


def test_unauthorized_carries_its_data() -> None:
    authz = Authorizer(admins=["root"], users=["alice"])
    acl = TopologyAcl.of("wc-1-1", "alice", {"topology.readonly.users": ["carol"]})
    with pytest.raises(Unauthorized) as info:
        authz.check(Call("killTopology", "carol", "p", {}), acl)
    assert (info.value.principal, info.value.operation) == ("carol", "killTopology")
    assert str(info.value) == ("'carol' may not call killTopology on topology 'wc-1-1': "
                               "only its owner 'alice', admins and the principals in its "
                               "topology.users may")
    authz.check(Call("getTopologyConf", "carol", "p", {}), acl)
    authz.check(Call("killTopology", "root", "p", {}), acl)
    authz.check(Call("killTopology", None, None, {}), acl)      # the daemon itself


def test_the_default_users_are_the_daemons_user_and_the_admins() -> None:
    authz = Authorizer(admins=["ops"], daemon_user="nimbus")
    assert [p for p in ("nimbus", "ops", "root", "alice", ANONYMOUS)
            if authz.may_use(p)] == ["nimbus", "ops"]
    named = Authorizer(admins=["ops"], users=["alice"], daemon_user="nimbus")
    assert [p for p in ("nimbus", "ops", "alice", ANONYMOUS) if named.may_use(p)] == \
        ["ops", "alice"]
    allowed = Authorizer(users=["alice"], daemon_user="nimbus", allow_anonymous=True)
    assert allowed.may_use(ANONYMOUS)


def test_anonymous_gets_nothing_from_any_rule_without_allow_anonymous() -> None:
    acl = TopologyAcl.of("wc-1-1", ANONYMOUS, {"topology.users": [ANONYMOUS],
                                               "topology.readonly.users": [ANONYMOUS]})
    closed = Authorizer(admins=[ANONYMOUS], users=[ANONYMOUS], daemon_user="nimbus")
    assert not closed.is_admin(ANONYMOUS)
    assert not closed.may_use(ANONYMOUS)
    assert not closed.may_control(ANONYMOUS, acl) and not closed.may_read(ANONYMOUS, acl)
    assert not closed.may_use_upload(ANONYMOUS, ANONYMOUS)
    assert not closed.may_use_download(ANONYMOUS, ANONYMOUS)
    for operation, topology in (("getClusterInfo", None), ("getTopologyConf", acl),
                                ("killTopology", acl), ("getSupervisorAssignments", None)):
        with pytest.raises(Unauthorized, match="allow_anonymous is off"):
            closed.check(Call(operation, ANONYMOUS, "p", {}), topology)
    with pytest.raises(Unauthorized, match="allow_anonymous is off"):
        closed.check_upload(Call("uploadChunk", ANONYMOUS, "p", {}), "/d/inbox/u.zip",
                            ANONYMOUS)
    with pytest.raises(Unauthorized, match="allow_anonymous is off"):
        closed.check_download(Call("downloadChunk", ANONYMOUS, "p", {}), "s", ANONYMOUS)
    opened = Authorizer(admins=[ANONYMOUS], daemon_user="nimbus", allow_anonymous=True)
    assert opened.is_admin(ANONYMOUS) and opened.may_control(ANONYMOUS, acl)


@pytest.mark.parametrize("cn, reason", [("root", "the superuser's name"),
                                        ("anonymous", "the name of callers nobody "
                                                      "identified"),
                                        ("nimbus", "the daemon's own OS user")])
def test_a_certificate_may_not_claim_a_reserved_name(cn: str, reason: str) -> None:
    mapping = CertificatePrincipals("nimbus")
    with pytest.raises(CertificateRefused) as info:
        mapping({"subject": ((("organizationName", "x"),), (("commonName", cn),))})
    assert (info.value.principal, info.value.reason) == (
        cn, f"it is {reason}, which no certificate may claim")
    assert str(info.value) == (f"client certificate for {cn!r} refused: it is {reason}, "
                               "which no certificate may claim")


def test_a_certificate_is_its_cn_otherwise() -> None:
    mapping = CertificatePrincipals("nimbus")
    assert mapping({"subject": ((("commonName", "alice"),),)}) == "alice"
    assert mapping({"subject": ((("commonName", "Root"),),)}) == "Root"   # another name
    assert mapping({"subject": ((("organizationName", "x"),),)}) is None  # anonymous


# --- topologies do not inherit the daemon's secrets ---------------------------------------

def test_the_spark_application_environment_is_built_explicitly(tmp_path: Path) -> None:
    daemon_env = {
        "PATH": "/usr/bin", "HOME": "/home/n", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "JAVA_HOME": "/jvm", "JAVA_TOOL_OPTIONS": "-Xss1m", "SPARK_CONF_DIR": "/etc/spark",
        "HADOOP_CONF_DIR": "/etc/hadoop", "TMPDIR": "/scratch", "PYTHONPATH": "/lib/py",
        # The daemon's settings and secrets:
        "NIMBUS_THRIFT_TLS_KEY_FILE": "/etc/nimbus/key.pem",
        "NIMBUS_THRIFT_TLS_CERT_FILE": "/etc/nimbus/cert.pem",
        "NIMBUS_THRIFT_ADMINS": "ops", "NIMBUS_THRIFT_DATA_DIR": "/srv/nimbus",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t", "GITHUB_TOKEN": "t0k3n",
        "SSH_AUTH_SOCK": "/run/ssh.sock", "KRB5CCNAME": "/tmp/krb5cc",
    }
    env = submit_module.environment(tmp_path / "w", tmp_path / "home", daemon_env)
    assert {k: v for k, v in env.items()
            if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP",
                         "SPARK_HOME", "PYTHONPATH", "NIMBUS_THRIFT_WORK_DIR")} == {
        "PATH": "/usr/bin", "HOME": "/home/n", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "JAVA_HOME": "/jvm", "JAVA_TOOL_OPTIONS": "-Xss1m", "SPARK_CONF_DIR": "/etc/spark",
        "HADOOP_CONF_DIR": "/etc/hadoop", "TMPDIR": "/scratch"}
    assert env["SPARK_HOME"] == str(tmp_path / "home")
    # The one variable of ours it gets: where its blobs are (topology/blobs.py).
    assert env["NIMBUS_THRIFT_WORK_DIR"] == str(tmp_path / "w")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "w" / "code")
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == "/lib/py"
    assert not any("/etc/nimbus" in v or "s3cr3t" in v for v in env.values())


def test_the_environment_defaults_to_the_daemons_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIMBUS_THRIFT_TLS_KEY_FILE", "/etc/nimbus/key.pem")
    monkeypatch.setenv("JAVA_HOME", "/jvm")
    env = submit_module.environment(tmp_path / "w", None)
    assert env["JAVA_HOME"] == "/jvm"
    assert [k for k in env if k.startswith("NIMBUS_THRIFT_")] == ["NIMBUS_THRIFT_WORK_DIR"]
    assert env["NIMBUS_THRIFT_WORK_DIR"] == str(tmp_path / "w")
