"""Who may call what (nimbus/authz.py) and the audit trail (nimbus/audit.py), with the
fakes: every method of service Nimbus, by its rule in the table, for each kind of
principal (the owner, another user, an admin, a principal in topology.users, one in
topology.readonly.users, one not in users, anonymous). A refused call answers the IDL's
AuthorizationException, changes nothing, and is an audit event. And the default policy:
with no users, the daemon's own OS user and the admins; anonymous nowhere unless
allow_anonymous. The rules as functions, and certificates' principals, are in
test_authz_rules.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from thriftpy2.thrift import TApplicationException

from support.nimbus import (FakeClock, FakeLauncher, N, audit_events, make_zip, request_as,
                            upload, wordcount)
from nimbus_thrift.nimbus.security import authz as authz_module
from nimbus_thrift.nimbus.security.authz import ANONYMOUS, METHODS, Rule, daemon_principal
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import ANSWERED_BY, NimbusHandler
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.nimbus.service.wire_errors import declared_exceptions

#: The kinds of principal, and who plays each. None is a request without a principal
#: (plain TCP): the daemon calls it "anonymous".
PRINCIPALS: dict[str, str | None] = {
    "owner": "alice", "other user": "mallory", "admin": "ops",
    "in topology.users": "bob", "in topology.readonly.users": "carol",
    "not in users": "eve", "anonymous": None}
USERS = ["alice", "mallory", "bob", "carol"]
ADMINS = ["ops"]
#: Who passes each rule (beginFileDownload's CODE rule is TOPOLOGY_READ for a
#: topology's code and UPLOAD for an upload's file: both are cases below).
ALLOWED: dict[Rule, set[str]] = {
    Rule.USER: {"owner", "other user", "admin", "in topology.users",
                "in topology.readonly.users"},
    Rule.TOPOLOGY: {"owner", "admin", "in topology.users"},
    Rule.TOPOLOGY_READ: {"owner", "admin", "in topology.users",
                         "in topology.readonly.users"},
    Rule.UPLOAD: {"owner", "admin"},
    Rule.DOWNLOAD: {"owner"},
    Rule.SUPERVISOR: {"admin"},
}


class Scene:
    """A handler with admins and users set, and what the owner made: topology "wc"
    (bob in its topology.users, carol in its topology.readonly.users), a finished
    upload (its code), an open upload, a download session of its code."""

    def __init__(self, data_dir: Path, **config: Any):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.launcher = FakeLauncher()
        self.clock = FakeClock()
        settings = {"data_dir": str(data_dir), "launcher": "none", "admins": ADMINS,
                    "users": USERS, **config}
        self.config = load_config(env={}, flags=settings)
        self.open_handler()
        with request_as("alice"):
            self.done = upload(self.handler, make_zip())
            self.handler.submitTopology("wc", self.done, json.dumps({
                "topology.users": ["bob"], "topology.readonly.users": ["carol"]}),
                wordcount())
            self.tid = self.handler.getClusterInfo().topologies[0].id
            self.open = self.handler.beginFileUpload()
            self.handler.uploadChunk(self.open, b"abc")
            self.session = self.handler.beginFileDownload(self.tid)
        self.idle()

    def open_handler(self) -> None:
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, self.config, self.store, self.launcher,
                                     clock=self.clock)
        self.handler.recover()

    def restart(self) -> None:
        self.close()
        self.open_handler()

    def close(self) -> None:
        self.handler.close()
        self.store.close()

    def idle(self) -> None:
        assert self.handler.background.wait_idle(10)

    def state(self) -> Any:
        """Everything a call could change: rows, actions, uploads, files, launcher
        calls, download sessions and how far they were read."""
        self.idle()
        transfers = self.handler.transfers
        return (self.store.topologies(), self.store.actions(), self.store.uploads(),
                sorted(p.name for p in transfers.inbox.iterdir()),
                sorted(p.name for p in self.handler.topologies_dir.iterdir()),
                list(self.launcher.calls),
                {k: d.offset for k, d in transfers.downloads.sessions.items()})

    def upload_of(self, who: str) -> str:
        """An upload ``who`` may submit: its own if it may upload, else the owner's
        (the submit is refused before the upload matters)."""
        if who not in ALLOWED[Rule.USER]:
            return self.done
        with request_as(PRINCIPALS[who]):
            return upload(self.handler, make_zip())


@pytest.fixture
def scene(tmp_path: Path) -> Any:
    s = Scene(tmp_path / "data")
    yield s
    s.close()


# How each case calls its method: prepare(scene, who) does what the call needs first
# (outside the snapshot) and returns the call.
Prepare = Callable[[Scene, str], Callable[[], Any]]


@dataclass(frozen=True)
class Case:
    method: str
    rule: Rule          # who passes (the method's rule, CODE resolved)
    prepare: Prepare
    #: What an allowed call raises (a call Spark has no meaning for), else None.
    allowed_raises: type[Exception] | None = None


def _deactivated(s: Scene) -> None:
    s.handler.deactivate("wc")          # outside a request: the daemon itself


def _prepare_activate(s: Scene, who: str) -> Callable[[], Any]:
    _deactivated(s)
    return lambda: s.handler.activate("wc")


CASES = [
    Case("submitTopology", Rule.USER, lambda s, who: (
        lambda loc: lambda: s.handler.submitTopology("wc2", loc, "{}", wordcount()))(
        s.upload_of(who))),
    Case("submitTopologyWithOpts", Rule.USER, lambda s, who: (
        lambda loc: lambda: s.handler.submitTopologyWithOpts(
            "wc2", loc, "{}", wordcount(),
            N.SubmitOptions(initial_status=N.TopologyInitialStatus.INACTIVE)))(
        s.upload_of(who))),
    Case("killTopology", Rule.TOPOLOGY, lambda s, who: lambda: s.handler.killTopology("wc")),
    Case("killTopologyWithOpts", Rule.TOPOLOGY,
         lambda s, who: lambda: s.handler.killTopologyWithOpts(
             "wc", N.KillOptions(wait_secs=0))),
    Case("activate", Rule.TOPOLOGY, _prepare_activate),
    Case("deactivate", Rule.TOPOLOGY, lambda s, who: lambda: s.handler.deactivate("wc")),
    Case("rebalance", Rule.TOPOLOGY, lambda s, who: lambda: s.handler.rebalance(
        "wc", N.RebalanceOptions(wait_secs=0, num_workers=2))),
    Case("beginFileUpload", Rule.USER, lambda s, who: s.handler.beginFileUpload),
    Case("uploadChunk", Rule.UPLOAD,
         lambda s, who: lambda: s.handler.uploadChunk(s.open, b"more")),
    Case("finishFileUpload", Rule.UPLOAD,
         lambda s, who: lambda: s.handler.finishFileUpload(s.open)),
    Case("beginFileDownload", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.beginFileDownload(s.tid)),
    Case("beginFileDownload", Rule.UPLOAD,
         lambda s, who: lambda: s.handler.beginFileDownload(s.done)),
    Case("downloadChunk", Rule.DOWNLOAD,
         lambda s, who: lambda: s.handler.downloadChunk(s.session)),
    Case("getNimbusConf", Rule.USER, lambda s, who: s.handler.getNimbusConf),
    Case("getClusterInfo", Rule.USER, lambda s, who: s.handler.getClusterInfo),
    Case("getLeader", Rule.USER, lambda s, who: s.handler.getLeader),
    Case("isTopologyNameAllowed", Rule.USER,
         lambda s, who: lambda: s.handler.isTopologyNameAllowed("wc3")),
    Case("getTopologyInfo", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopologyInfo(s.tid)),
    Case("getTopologyConf", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopologyConf(s.tid)),
    Case("getTopology", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopology(s.tid)),
    Case("getUserTopology", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getUserTopology(s.tid)),
    # Storm 2.x (nimbus/storm2_calls.py).
    Case("getTopologySummaries", Rule.USER, lambda s, who: s.handler.getTopologySummaries),
    Case("getTopologySummaryByName", Rule.USER,
         lambda s, who: lambda: s.handler.getTopologySummaryByName("wc")),
    Case("getTopologySummary", Rule.USER,
         lambda s, who: lambda: s.handler.getTopologySummary(s.tid)),
    Case("getTopologyInfoByName", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopologyInfoByName("wc")),
    Case("getTopologyInfoWithOpts", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopologyInfoWithOpts(
             s.tid, N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.ONE))),
    Case("getTopologyInfoByNameWithOpts", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getTopologyInfoByNameWithOpts(
             "wc", N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.NONE))),
    Case("getTopologyHistory", Rule.USER,
         lambda s, who: lambda: s.handler.getTopologyHistory("alice")),
    Case("getOwnerResourceSummaries", Rule.USER,
         lambda s, who: lambda: s.handler.getOwnerResourceSummaries("")),
    Case("getComponentPendingProfileActions", Rule.TOPOLOGY_READ,
         lambda s, who: lambda: s.handler.getComponentPendingProfileActions(
             s.tid, "count", N.ProfileAction.JSTACK_DUMP)),
    Case("setWorkerProfiler", Rule.TOPOLOGY,
         lambda s, who: lambda: s.handler.setWorkerProfiler(s.tid, N.ProfileRequest(
             nodeInfo=N.NodeInfo(node="127.0.0.1", port={6700}),
             action=N.ProfileAction.JSTACK_DUMP)),
         allowed_raises=TApplicationException),
    Case("uploadNewCredentials", Rule.TOPOLOGY,
         lambda s, who: lambda: s.handler.uploadNewCredentials(
             "wc", N.Credentials(creds={"k": "v"})),
         allowed_raises=TApplicationException),
    Case("getSupervisorAssignments", Rule.SUPERVISOR,
         lambda s, who: lambda: s.handler.getSupervisorAssignments("node-1"),
         allowed_raises=TApplicationException),
    Case("sendSupervisorWorkerHeartbeats", Rule.SUPERVISOR,
         lambda s, who: lambda: s.handler.sendSupervisorWorkerHeartbeats(
             N.SupervisorWorkerHeartbeats(supervisor_id="s", worker_heartbeats=[])),
         allowed_raises=TApplicationException),
    Case("sendSupervisorWorkerHeartbeat", Rule.SUPERVISOR,
         lambda s, who: lambda: s.handler.sendSupervisorWorkerHeartbeat(
             N.SupervisorWorkerHeartbeat(storm_id=s.tid, executors=[], time_secs=1)),
         allowed_raises=TApplicationException),
    Case("processWorkerMetrics", Rule.SUPERVISOR,
         lambda s, who: lambda: s.handler.processWorkerMetrics(N.WorkerMetrics(
             topologyId=s.tid, port=6700, hostname="h",
             metricList=N.WorkerMetricList(metrics=[]))),
         allowed_raises=TApplicationException),
    Case("createStateInZookeeper", Rule.USER,
         lambda s, who: lambda: s.handler.createStateInZookeeper("key")),
]
#: The methods whose allowed call changes the state (a refused one must not).
CHANGING = {"submitTopology", "submitTopologyWithOpts", "killTopology",
            "killTopologyWithOpts", "activate", "deactivate", "rebalance", "beginFileUpload",
            "uploadChunk", "finishFileUpload", "beginFileDownload", "downloadChunk"}


#: The groups of calls of the handler (by their names in its METHOD_TABLE) whose
#: methods this file's cases cover.
CORE = {"topologies", "queries", "transfer_calls", "storm2"}


def _case_id(case: Case) -> str:
    return f"{case.method}[{case.rule.value}]"


# --- the table --------------------------------------------------------------------------

def test_the_table_classifies_every_method_of_the_service() -> None:
    assert authz_module.unclassified(N.Nimbus) == []
    assert set(METHODS) == set(N.Nimbus.thrift_services)
    # And every method of the handler's core groups has its cases below, with its
    # table rule (CODE: both of its). The blob store's, log levels' and pages' methods
    # (blob_calls, logs, pages) have their own authorization tests.
    implemented = [m for m in METHODS if ANSWERED_BY.get(m) in CORE]
    assert len(implemented) == 36, implemented     # 1.x's 20 and storm2's 16
    for method in implemented:
        entry = METHODS[method]
        rules = {c.rule for c in CASES if c.method == method}
        expected = {Rule.TOPOLOGY_READ, Rule.UPLOAD} if entry.rule is Rule.CODE \
            else {entry.rule}
        assert rules == expected, method


def test_a_method_missing_from_the_table_stops_the_handler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(METHODS, "getLeader")
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "launcher": "none"})
    store = Store(tmp_path / "nimbus.sqlite3")
    try:
        with pytest.raises(ValueError, match="missing from nimbus/authz.py's METHODS .*: "
                                             "getLeader$"):
            NimbusHandler(N, config, store, FakeLauncher())
    finally:
        store.close()


# --- method by method, principal by principal --------------------------------------------

@pytest.mark.parametrize("who", list(PRINCIPALS))
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_method_by_principal(scene: Scene, case: Case, who: str) -> None:
    call = case.prepare(scene, who)
    before = scene.state()
    principal = PRINCIPALS[who]
    name = principal if principal is not None else ANONYMOUS
    # A method that declares no AuthorizationException (Storm declares none for some)
    # answers a refusal as a TApplicationException with the same sentence.
    refusal = N.AuthorizationException \
        if N.AuthorizationException in declared_exceptions(N, case.method) \
        else TApplicationException
    with audit_events() as audit, request_as(principal, case.method):
        if who in ALLOWED[case.rule]:
            if case.allowed_raises is None:
                call()
                outcome = "ok"
            else:
                with pytest.raises(case.allowed_raises, match="not supported on Spark"):
                    call()
                outcome = "error"
        else:
            with pytest.raises(refusal) as info:
                call()
            outcome = "refused"
    events = audit()
    after = scene.state()
    if outcome == "refused":
        message = getattr(info.value, "msg", None) or info.value.message
        assert message.startswith(f"{name!r} may not call {case.method}"), message
        if case.rule in (Rule.TOPOLOGY, Rule.TOPOLOGY_READ):
            assert f"on topology {scene.tid!r}" in message
        assert after == before, "a refused call changed the state"
    elif case.method in CHANGING:
        assert after != before, "the allowed call did nothing: the case tests nothing"
    elif outcome == "error":
        assert after == before, "a call not supported here changed the state"
    if outcome == "refused" or METHODS[case.method].audit_all:
        assert [(e["operation"], e["principal"], e["outcome"], e["peer"]) for e in events] \
            == [(case.method, name, outcome, "127.0.0.1:40000")]
        assert events[0]["log_level"] == ("warning" if outcome == "refused" else "info")
    else:
        assert events == []


# --- the rules' edges ---------------------------------------------------------------------

def _handler(tmp_path: Path, **settings: Any) -> tuple[NimbusHandler, Store]:
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "launcher": "none",
                                        **settings})
    store = Store(tmp_path / "nimbus.sqlite3")
    handler = NimbusHandler(N, config, store, FakeLauncher(), clock=FakeClock())
    handler.recover()
    return handler, store


def test_empty_users_means_the_daemons_own_user_and_the_admins(tmp_path: Path) -> None:
    handler, store = _handler(tmp_path, admins=["ops"])
    me = daemon_principal()
    try:
        for principal in (me, "ops"):
            with request_as(principal):
                handler.getClusterInfo()
                location = upload(handler, make_zip())
                handler.submitTopology(f"t-{principal}", location, "{}", wordcount())
        # Anyone else on the machine (another OS user, or a certificate's CN) is refused,
        # reads included, with a message that names no principal of the daemon's.
        for principal in ("eve", None):
            with request_as(principal), pytest.raises(N.AuthorizationException) as info:
                handler.getClusterInfo()
            assert me not in info.value.msg.replace(f"{principal!r}", "") \
                and "ops" not in info.value.msg, info.value.msg
        with request_as("eve"), pytest.raises(N.AuthorizationException) as info:
            handler.beginFileUpload()
        assert info.value.msg == ("'eve' may not call beginFileUpload: only the daemon's "
                                  "own OS user and admins may use this nimbus (users is "
                                  "not set)")
        owners = {t.name: t.owner for t in handler.getClusterInfo().topologies}
        assert owners == {f"t-{me}": me, "t-ops": "ops"}
    finally:
        handler.close()
        store.close()


def test_anonymous_may_call_nothing_unless_allow_anonymous(tmp_path: Path) -> None:
    # Not even named in admins and users: without allow_anonymous, nobody identified
    # is let in, for reads too.
    s = Scene(tmp_path / "data", users=["alice", "anonymous"], admins=["anonymous"])
    try:
        before = s.state()
        for call in (s.handler.getClusterInfo, s.handler.getNimbusConf,
                     lambda: s.handler.getTopologyInfo(s.tid),
                     lambda: s.handler.killTopology("wc"), s.handler.beginFileUpload):
            with request_as(None), pytest.raises(N.AuthorizationException) as info:
                call()
            assert "allow_anonymous is off" in info.value.msg, info.value.msg
        assert s.state() == before
    finally:
        s.close()
    # With it, anonymous is a principal like any other: here an admin.
    s = Scene(tmp_path / "data2", users=["alice"], admins=["anonymous"],
              allow_anonymous=True)
    try:
        with request_as(None):
            s.handler.getClusterInfo()
            s.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
        assert s.store.topologies()[0].status == "KILLED"
    finally:
        s.close()


def test_allowed_anonymous_counts_as_a_user_and_owns_what_it_submits(
        tmp_path: Path) -> None:
    s = Scene(tmp_path / "data", allow_anonymous=True)       # users: alice's and others
    try:
        with request_as(None):
            s.handler.getClusterInfo()
            location = upload(s.handler, make_zip())
            s.handler.submitTopology("anon", location, "{}", wordcount())
            with pytest.raises(N.AuthorizationException, match="only its owner 'alice'"):
                s.handler.killTopology("wc")
        assert s.store.topology_named("anon").owner == ANONYMOUS
    finally:
        s.close()


def test_the_owner_is_who_submitted_whatever_the_conf_says(scene: Scene) -> None:
    with request_as("bob"):
        location = upload(scene.handler, make_zip())
        scene.handler.submitTopology("bobs", location, json.dumps(
            {"topology.submitter.user": "alice", "topology.submitter.principal": "alice"}),
            wordcount())
        info = scene.handler.getTopologyInfo(
            next(t.id for t in scene.handler.getClusterInfo().topologies
                 if t.name == "bobs"))
    assert info.owner == "bob"
    listed = {t.name: t.owner for t in scene.handler.getClusterInfo().topologies}
    assert listed == {"wc": "alice", "bobs": "bob"}
    conf = json.loads(scene.handler.getTopologyConf(info.id))
    assert conf["topology.submitter.user"] == conf["topology.submitter.principal"] == "bob"
    # Alice is named in the conf she did not write, and still may not kill it.
    with request_as("alice"), pytest.raises(N.AuthorizationException,
                                             match="only its owner 'bob'"):
        scene.handler.killTopology("bobs")


def test_calls_outside_a_request_are_the_daemon_itself(tmp_path: Path) -> None:
    s = Scene(tmp_path / "data", users=["alice"], admins=[])
    try:
        with audit_events() as audit:
            s.handler.getClusterInfo()
            location = upload(s.handler, make_zip())
            s.handler.submitTopology("mine", location, "{}", wordcount())
            s.handler.killTopology("wc")            # alice's: the daemon may
        assert audit() == []
        owners = {t.name: t.owner for t in s.handler.getClusterInfo().topologies}
        assert owners["mine"] == daemon_principal()
        # An upload begun outside a request has no known owner: only admins may use it.
        with request_as("alice"), pytest.raises(N.AuthorizationException,
                                                 match="only admins may use it"):
            s.handler.submitTopology("again", location, "{}", wordcount())
    finally:
        s.close()


def test_submitting_someone_elses_upload_is_refused(scene: Scene) -> None:
    with request_as("alice"):
        location = upload(scene.handler, make_zip())
    before = scene.state()
    with request_as("bob"), pytest.raises(N.AuthorizationException) as info:
        scene.handler.submitTopology("bobs", location, "{}", wordcount())
    # The upload is named without the daemon's path to it (its location is the file's).
    assert location.startswith("/")
    assert info.value.msg == (f"'bob' may not call submitTopology with upload "
                              f"{location.rsplit('/', 1)[-1]!r}: it was begun by another "
                              "principal")
    assert scene.state() == before
    with request_as("ops"):                 # an admin may
        scene.handler.submitTopology("ops", location, "{}", wordcount())
    assert scene.store.topology_named("ops").owner == "ops"


def test_authorization_comes_before_validation(scene: Scene) -> None:
    # A refused principal learns nothing about what else is wrong with its call.
    with request_as("eve"), pytest.raises(N.AuthorizationException):
        scene.handler.submitTopology("bad/name", "nowhere", "not json", None)
    with request_as("mallory"), pytest.raises(N.AuthorizationException):
        scene.handler.rebalance("wc", N.RebalanceOptions(num_executors={"ghost": 9}))
    with request_as("mallory"), pytest.raises(N.NotAliveException):
        scene.handler.killTopology("ghost")     # an unknown name is unknown to all


@pytest.mark.parametrize("key", ["topology.users", "topology.readonly.users"])
@pytest.mark.parametrize("value", ["bob", ["bob", 7], [""], {"bob": 1}])
def test_topology_acl_keys_must_be_lists_of_names(scene: Scene, key: str,
                                                  value: Any) -> None:
    with request_as("alice"):
        location = upload(scene.handler, make_zip())
        with pytest.raises(N.InvalidTopologyException) as info:
            scene.handler.submitTopology("acl", location, json.dumps({key: value}),
                                         wordcount())
    assert info.value.msg == f"{key} must be a list of principal names, not {value!r}"
    assert scene.store.topology_named("acl") is None


def test_every_user_lists_every_topology(scene: Scene) -> None:
    # As Storm: names, owners and counts are listed to all users; the rest is not.
    with request_as("mallory"):
        assert [(t.name, t.owner) for t in scene.handler.getClusterInfo().topologies] == \
            [("wc", "alice")]


# --- uploads and downloads belong to who began them --------------------------------------

def test_an_upload_stays_its_owners_across_a_restart(scene: Scene) -> None:
    scene.restart()
    with request_as("alice"):
        scene.handler.uploadChunk(scene.open, b"def")
    with request_as("bob"), pytest.raises(N.AuthorizationException,
                                           match="begun by another principal"):
        scene.handler.finishFileUpload(scene.open)
    with request_as("alice"):
        scene.handler.finishFileUpload(scene.open)
        session = scene.handler.beginFileDownload(scene.open)
        assert scene.handler.downloadChunk(session) == b"abcdef"


def test_a_damaged_owner_file_leaves_the_upload_to_admins(scene: Scene) -> None:
    transfers = scene.handler.transfers
    upload_id = scene.store.upload_at(scene.open).id
    transfers.owner_path(upload_id).write_bytes(b"\xff" * 10)
    scene.restart()
    with request_as("alice"), pytest.raises(N.AuthorizationException,
                                             match="only admins may use it"):
        scene.handler.uploadChunk(scene.open, b"def")
    with request_as("ops"):
        scene.handler.uploadChunk(scene.open, b"def")


def test_an_uploads_owner_file_goes_with_it(scene: Scene) -> None:
    transfers = scene.handler.transfers
    upload_id = scene.store.upload_at(scene.open).id
    assert transfers.owner_path(upload_id).read_bytes() == b"alice"
    assert transfers.began_by(upload_id) == "alice"
    scene.clock.advance(scene.config.file_copy_expiration_secs + 1)
    transfers.sweep()                           # expired: deleted
    assert not transfers.owner_path(upload_id).exists()
    assert transfers.began_by(upload_id) is None


def test_a_failed_begin_leaves_no_owner_behind(scene: Scene,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    transfers = scene.handler.transfers
    before = sorted(p.name for p in transfers.inbox.iterdir())

    def fail(*args: Any) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(scene.store, "insert_upload", fail)
    with request_as("alice"), pytest.raises(OSError):
        scene.handler.beginFileUpload()
    assert sorted(p.name for p in transfers.inbox.iterdir()) == before
    assert len(transfers._upload_owner) == 2        # the scene's two uploads only


def test_an_admin_cannot_read_someone_elses_download_session(scene: Scene) -> None:
    with request_as("ops"):
        own = scene.handler.beginFileDownload(scene.tid)
        assert scene.handler.downloadChunk(own) == make_zip()
        with pytest.raises(N.AuthorizationException,
                           match="only the principal that began it may read it"):
            scene.handler.downloadChunk(scene.session)


# --- the audit trail ----------------------------------------------------------------------

def test_audit_events_name_the_topology_and_the_outcome(scene: Scene) -> None:
    with audit_events() as audit:
        with request_as("alice", peer="unix:alice (pid 7)"):
            with pytest.raises(N.NotAliveException):
                scene.handler.killTopology("ghost")
            scene.handler.deactivate("wc")
            location = upload(scene.handler, make_zip())
            scene.handler.submitTopology("wc2", location, "{}", wordcount())
        with request_as("eve"), pytest.raises(N.AuthorizationException):
            scene.handler.getTopologyConf(scene.tid)
    events = audit()
    assert all(e["logger"] == "nimbus_thrift.audit" and e["event"] == "audit"
               for e in events)
    summary = [(e["operation"], e["principal"], e["outcome"], e.get("topology"),
                e.get("topology_id")) for e in events]
    new_id = scene.store.topology_named("wc2").id
    assert summary == [
        ("killTopology", "alice", "error", "ghost", None),
        ("deactivate", "alice", "ok", "wc", scene.tid),
        ("beginFileUpload", "alice", "ok", None, None),
        ("finishFileUpload", "alice", "ok", None, None),
        ("submitTopology", "alice", "ok", "wc2", new_id),
        ("getTopologyConf", "eve", "refused", scene.tid, None),
    ]
    assert events[0]["error"] == "no topology named 'ghost'"
    assert events[0]["peer"] == "unix:alice (pid 7)"
    assert events[2]["upload"] == events[3]["upload"] == location
    assert events[5]["reason"].startswith("'eve' may not call getTopologyConf")
