"""Rows for the state store's tests: a topology record, a workload touching every
table, and a store's rows as plain values (what replicas are compared by)."""

from __future__ import annotations

import dataclasses

from nimbus_thrift.nimbus.state.store import (MAX_ERRORS_PER_TOPOLOGY, Action, Blob, Store,
                                              TopologyRecord, Upload)


def record(tid: str = "wc-1-1700000000", name: str = "wc", **changes: object
           ) -> TopologyRecord:
    rec = TopologyRecord(
        id=tid, name=name, status="ACTIVE", prev_status=None, owner="alice",
        submitted_at=1_700_000_000.5, num_workers=2,
        executors={"sentences": 1, "split": 2}, tasks={"sentences": 1, "split": 4},
        conf={"topology.workers": 2, "nested": {"a": [1, None, "x"]}},
        topology=b"\x00\x01binary\xff", code_upload="u1", code_sha256="ab" * 32,
        code_bytes=1234)
    return dataclasses.replace(rec, **changes)  # type: ignore[arg-type]


def rows(store: Store) -> dict[str, list[tuple[object, ...]]]:
    tables = ("meta", "topologies", "actions", "errors", "uploads", "blobs", "blob_uploads")
    return {t: [tuple(r) for r in store._query(f"SELECT rowid, * FROM {t} ORDER BY rowid")]
            for t in tables}


def workload(store: Store) -> None:
    store.next_counter()
    store.insert_upload(Upload("u1", "/inbox/u1", "open", 0, None, 1.0, 1.0, None))
    store.grow_upload("u1", 10, 2.0)
    store.complete_upload("u1", "cafe", 3.0)
    with store.transaction():
        store.insert_topology(record("a-1-1", "a"))
        store.insert_topology(record("b-2-1", "b"))
    store.set_status("a-1-1", "INACTIVE", "ACTIVE")
    store.set_parallelism("b-2-1", 3, {"split": 3})
    store.set_action(Action("a-1-1", "remove", 9.0, {"wait": 1}))
    for i in range(MAX_ERRORS_PER_TOPOLOGY + 5):        # the cap trims by rowid
        store.add_error("b-2-1", "split", f"error {i}", i)
    store.put_blob(Blob("k", 1, "f1", 7, "ab", "[]", 1.0, 1.0))
    store.set_blob_acl("k", "[[1, null, 1]]")
    store.clear_action("a-1-1")
    store.delete_topology("a-1-1")
