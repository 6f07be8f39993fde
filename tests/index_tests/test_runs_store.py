"""Tuning-run summaries (``RecordStore.add_run`` / ``runs``), one suite run against every backend
of tests/index_tests/test_store_contract.py (its ``store`` fixture: Parquet directory, memory, PostgreSQL,
layered over Parquet), then what only the Parquet directory has: files in ``runs/``, torn files,
a read-only (schema 1) DB, a SIGKILLed writer, ``tunedb copy``, pyarrow's view of ``records/``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import pyarrow.dataset as ds
import pytest
import test_store_contract as contract

import tunedb
from tunedb.index.contract.base import MAX_RUN_BYTES, RecordStore, RunWarning
from tunedb.index.memory.store import MemoryStore
from tunedb.index.parquet.store import ParquetStore
from tunedb.index.postgres.store import PostgresStore
from tunedb.index.views.layered import LayeredStore
from tunedb.index.views.trust import TrustedStore

from helpers import TESTS, run_cli

#: the backends of the contract suite (Parquet, memory, PostgreSQL, layered over Parquet)
store = contract.store
T1, recs = contract.T1, contract.recs

HEX = "0123456789abcdef" * 2
DATA = TESTS / "data"


def reopen(s: RecordStore) -> RecordStore | None:
    """Another handle on the same storage (None for an in-memory store: a new one is empty)."""
    if isinstance(s, ParquetStore):
        return tunedb.open(s.path)
    if isinstance(s, PostgresStore):
        return tunedb.open(s.location)
    if isinstance(s, LayeredStore):
        return LayeredStore([reopen(s.layers[0]), *s.layers[1:]])
    return None


def test_round_trip_sets_run_id_and_stored(store):
    given = {"kind": "tune", "workload": {"family": "matmul", "M": 64}, "trials": 12, "best_cost": 1.5e-3,
             "configs": [{"tile": 1}, {"tile": 2}], "ok": True, "note": None, "text": "ünïcode \0 ok"}
    before = json.dumps(given, sort_keys=True)
    rid = store.add_run(given)
    assert len(rid) == 32 and int(rid, 16) >= 0
    assert json.dumps(given, sort_keys=True) == before  # the argument is not changed
    (got,) = store.runs()
    assert got == {**given, "run_id": rid, "stored": got["stored"]}
    assert time.strptime(got["stored"][:19], "%Y-%m-%dT%H:%M:%S") and got["stored"].endswith("+00:00")
    assert len(got["stored"]) == len("2026-12-01T18:40:00.123456+00:00")
    got["trials"] = 99
    got["configs"].append("mutated")
    assert store.runs()[0]["trials"] == 12 and len(store.runs()[0]["configs"]) == 2  # new dicts every call
    assert store.add_run({"kind": "tune", "run_id": HEX, "t": (1, 2)}) == HEX
    assert [r["t"] for r in store.runs() if r["run_id"] == HEX] == [[1, 2]]  # as JSON reads it back


def test_order_kind_filter_and_limit(store):
    ids = []
    for i, kind in enumerate(["tune", "search", "tune", "measure", "tune"]):
        ids.append(store.add_run({"kind": kind, "i": i}))
        time.sleep(0.002)
    assert [r["i"] for r in store.runs()] == [0, 1, 2, 3, 4]
    assert [r["i"] for r in store.runs("tune")] == [0, 2, 4]
    assert store.runs("nothing") == []
    assert [r["i"] for r in store.runs(limit=2)] == [3, 4]  # the newest two, oldest first
    assert [r["i"] for r in store.runs("tune", limit=2)] == [2, 4]
    assert [r["i"] for r in store.runs(limit=100)] == [0, 1, 2, 3, 4]
    assert store.runs(limit=0) == []
    stored = [r["stored"] for r in store.runs()]
    assert stored == sorted(stored)
    for bad in ({"kind": 3}, {"limit": -1}, {"limit": 1.5}, {"limit": True}):
        with pytest.raises(ValueError) as ei:
            store.runs(**bad)
        assert "\n" not in str(ei.value)


def test_same_run_id_replaces_the_summary(store):
    rid = store.add_run({"kind": "tune", "progress": 0.5})
    other = store.add_run({"kind": "tune", "progress": 1.0})
    first_stored = store.runs()[0]["stored"]
    time.sleep(0.002)
    assert store.add_run({"kind": "tune", "run_id": rid, "progress": 1.0, "best": 3}) == rid
    got = store.runs()
    assert [r["run_id"] for r in got] == [other, rid]  # re-saved: stored anew, so newest
    assert got[1]["best"] == 3 and got[1]["progress"] == 1.0 and got[1]["stored"] > first_stored
    assert store.add_run({"kind": "search", "run_id": rid}) == rid  # a new kind too
    assert [r["run_id"] for r in store.runs("tune")] == [other] and len(store.runs("search")) == 1


@pytest.mark.parametrize("bad, why", [
    ({"kind": "tune", "cost": float("nan")}, "strict JSON"),
    ({"kind": "tune", "nested": [{"cost": float("inf")}]}, "strict JSON"),
    ({"kind": "tune", 7: "int key"}, "key 7"),
    ({"kind": "tune", "deep": {(1, 2): "tuple key"}}, "key"),
    ({"kind": "tune", "thing": object()}, "strict JSON"),
    ({"kind": 5}, "kind"),
    ({"kind": ""}, "kind"),
    ({"trials": 3}, "kind"),
    ({"kind": "tune", "run_id": "ABCDEF" * 5 + "AB"}, "run_id"),
    ({"kind": "tune", "run_id": "abc"}, "run_id"),
    ({"kind": "tune", "run_id": 12}, "run_id"),
    ([("kind", "tune")], "mapping"),
    ({"kind": "tune", "blob": "x" * (MAX_RUN_BYTES + 1)}, "over the limit"),
])
def test_invalid_summaries_raise_one_line_and_write_nothing(store, bad, why):
    store.add_run({"kind": "keep", "run_id": HEX})
    before = store.runs()
    with pytest.raises(ValueError, match=why) as ei:
        store.add_run(bad)
    assert "\n" not in str(ei.value)
    assert store.runs() == before
    if isinstance(store, ParquetStore):
        assert sorted(os.listdir(store.path / "runs")) == [f"{HEX}.json"]


def test_cyclic_summary_is_refused(store):
    d: dict = {"kind": "tune"}
    d["self"] = d
    with pytest.raises(ValueError, match="strict JSON"):
        store.add_run(d)
    shared = {"tile": 4}
    store.add_run({"kind": "tune", "a": shared, "b": [shared, shared]})  # shared, not cyclic: fine
    assert store.runs()[0]["b"] == [{"tile": 4}, {"tile": 4}]
    assert len(store.runs()) == 1


def test_a_fresh_handle_sees_the_runs(store):
    rid = store.add_run({"kind": "tune", "n": 1})
    store.add_run({"kind": "search", "n": 2})
    other = reopen(store)
    if other is None:
        pytest.skip("an in-memory store has no other handle")
    try:
        assert other.runs() == store.runs()
        assert [r["run_id"] for r in other.runs("tune")] == [rid]
        other.add_run({"kind": "tune", "run_id": rid, "n": 3})
        assert [r["n"] for r in store.runs("tune")] == [3]  # written through the other handle
    finally:
        if not isinstance(store, LayeredStore):
            other.close()


def test_runs_leave_records_len_and_change_token_alone(store):
    store.commit(recs(5))
    stats = store.stats()  # (first: the Parquet store's stats() folds its own commits, a token change)
    token, n, rows = store.change_token(), len(store), store.records().to_pylist()
    store.add_run({"kind": "tune", "best": 1e-3})
    store.add_run({"kind": "tune", "best": 2e-3})
    assert store.change_token() == token and len(store) == n == 5
    assert store.records().to_pylist() == rows
    after = store.stats()
    assert (after.records, after.targets, after.entries, after.files) == \
        (stats.records, stats.targets, stats.entries, stats.files)
    assert store.lookup(T1, recs(1)[0].workload, {"tile": 0}) is not None
    store.compact()
    assert len(store) == 5 and len(store.runs()) == 2


def test_trusted_view_passes_runs_through(store):
    view = TrustedStore(store, "measured")
    rid = view.add_run({"kind": "tune"})
    assert [r["run_id"] for r in store.runs()] == [rid] == [r["run_id"] for r in view.runs("tune", limit=1)]


# ---------------------------------------------------------------------------- layered
def test_layered_union_first_layer_wins(tmp_path):
    top, lower = tunedb.open(tmp_path / "top"), MemoryStore("lower")
    lower.add_run({"kind": "tune", "run_id": HEX, "where": "lower"})
    time.sleep(0.002)
    only_lower = lower.add_run({"kind": "search", "where": "lower"})
    time.sleep(0.002)
    top.add_run({"kind": "measure", "run_id": HEX, "where": "top"})
    s = LayeredStore([top, lower])
    got = s.runs()
    assert [(r["run_id"], r["where"]) for r in got] == [(only_lower, "lower"), (HEX, "top")]
    assert s.runs("tune") == []  # the lower layer's summary of HEX is hidden by the top one
    assert [r["run_id"] for r in s.runs(limit=1)] == [HEX]
    new = s.add_run({"kind": "tune"})
    assert [r["run_id"] for r in top.runs("tune")] == [new] and len(lower.runs()) == 2
    with pytest.raises(ValueError, match="read-only"):
        LayeredStore([top, lower], writable=None).add_run({"kind": "tune"})
    s.close()


# ---------------------------------------------------------------------------- Parquet directory
def test_parquet_files_and_torn_files_are_skipped(tmp_path):
    db = tunedb.open(tmp_path / "db")
    db.commit(recs(3))
    rid = db.add_run({"kind": "tune", "n": 1})
    runs = tmp_path / "db" / "runs"
    assert sorted(os.listdir(runs)) == [f"{rid}.json"]
    assert json.loads((runs / f"{rid}.json").read_text())["n"] == 1
    good = db.runs()
    (runs / f"{'a' * 32}.json").write_text('{"kind": "tune", "run_id": "' + "a" * 32 + '", "stor')  # torn
    (runs / f"{'b' * 32}.json").write_bytes(b"\xff\xfe not utf-8")
    (runs / f"{'c' * 32}.json").write_text("[1, 2]")  # JSON, not a summary
    (runs / f"{'d' * 32}.json").write_text(json.dumps({**good[0], "run_id": "e" * 32}))  # not its name
    (runs / "_tmp-otherhost-1-abc.json").write_text("{")  # a writer's temp file: ignored quietly
    (runs / "notes.txt").write_text("?")
    with pytest.warns(RunWarning) as caught:
        assert db.runs() == good
    assert len(caught) == 4 and all("\n" not in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunWarning)
        assert db.runs("tune", limit=5) == good
    assert len(db) == 3 and db.records().num_rows == 3


def test_parquet_readers_of_records_never_see_runs(tmp_path):
    p = tmp_path / "db"
    db = tunedb.open(p)
    db.commit(recs(4))
    db.commit(recs(70, base=2e-3))  # a part file besides the journal
    db.add_run({"kind": "tune"})
    db.close()
    db = tunedb.open(p)
    assert len(db) == 74
    files = db.snapshot_files()
    assert files and all("runs" not in f.parts for f in files)
    assert ds.dataset(p / "records", partitioning="hive").count_rows() == 74
    db.compact()
    assert ds.dataset(p / "records", partitioning="hive").count_rows() == 74 and len(db.runs()) == 1
    db.close()


def test_parquet_copy_works_and_does_not_copy_runs(tmp_path):
    src = tunedb.open(tmp_path / "src")
    src.commit(recs(6))
    src.add_run({"kind": "tune"})
    src.close()
    p = run_cli("copy", str(tmp_path / "src"), str(tmp_path / "dst"), "--json")
    assert p.returncode == 0, p.stderr
    dst = tunedb.open(tmp_path / "dst")
    assert len(dst) == 6 and dst.runs() == []
    dst.close()


def test_schema1_db_refuses_add_run_like_commit(tmp_path):
    p = tmp_path / "old"
    shutil.copytree(DATA / "db-schema1", p)
    before = {str(f.relative_to(p)): f.read_bytes() for f in p.rglob("*") if f.is_file() and f.name != "_lock"}
    db = ParquetStore.open(p)
    assert db.runs() == []
    with pytest.raises(ValueError) as ei:
        db.add_run({"kind": "tune"})
    assert str(ei.value) == f"{p} is a tunedb schema 1 database; run `tunedb upgrade --db {p}` to write to it"
    with pytest.raises(ValueError) as ec:
        db.commit(recs(1))
    assert str(ec.value) == str(ei.value)
    db.close()
    assert {str(f.relative_to(p)): f.read_bytes() for f in p.rglob("*") if f.is_file() and f.name != "_lock"} \
        == before
    assert not (p / "runs").exists()


_CHILD = """
import sys, time
import tunedb
s = tunedb.open(sys.argv[1])
rid = s.add_run({"kind": "tune", "trials": 7, "configs": list(range(1000))})
print("ADDED", rid, flush=True)
time.sleep(120)
"""


def test_add_run_survives_sigkill_right_after_it_returns(store):
    if not isinstance(store, (ParquetStore, PostgresStore)):
        pytest.skip("the Parquet and PostgreSQL stores outlive their process (layered: its top is Parquet)")
    where = str(store.path) if isinstance(store, ParquetStore) else store.location
    child = subprocess.Popen([sys.executable, "-c", _CHILD, where], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = child.stdout.readline()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert line.startswith("ADDED "), child.stderr.read()[-3000:]
    assert child.returncode == -signal.SIGKILL
    rid = line.split()[1]
    fresh = reopen(store)
    try:
        got = fresh.runs()
        assert [r["run_id"] for r in got] == [rid] and got[0]["trials"] == 7 and len(got[0]["configs"]) == 1000
    finally:
        fresh.close()
    if isinstance(store, ParquetStore):
        assert not [n for n in os.listdir(store.path / "runs") if n.startswith("_tmp-")]
