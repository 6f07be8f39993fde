"""The Parquet store at scale: partitions opened only when a query needs them, and group commit
(threads sharing one handle share journal writes and fsyncs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tunedb.index import ParquetStore, Record, RecordBatch

W = {"family": "matmul", "M": 64, "N": 64, "K": 64}


def _targets(n: int) -> list[dict]:
    return [{"kind": "cpu", "name": f"scale-{i}", "vector_bits": 256} for i in range(n)]


def _fill(path: Path, targets: list[dict], per_target: int) -> None:
    db = ParquetStore.open(path)
    db.commit(RecordBatch.from_columns(
        target=[t for t in targets for _ in range(per_target)], workload=[W] * (len(targets) * per_target),
        config=[{"tile": j} for _ in targets for j in range(per_target)],
        costs=[[1e-3 * (1 + j % 5)] for _ in targets for j in range(per_target)]))
    db.compact()
    db.close()


def _partition_files(path: Path, target: dict) -> list[Path]:
    probe = Record(target, W, {"tile": 0}, [1.0])
    return sorted((path / "records").glob(f"target_slug=*-{probe.target_key[:16]}/*.parquet"))


def test_open_reads_no_partition_until_a_query_needs_it(tmp_path):
    """Every file of one target is overwritten with garbage: opening the DB and querying the other
    targets never reads them (so they answer as before); the first query of that target does."""
    targets = _targets(4)
    _fill(tmp_path / "db", targets, 50)
    bad = _partition_files(tmp_path / "db", targets[3])
    assert bad
    for f in bad:
        f.write_bytes(b"not parquet" * 100)
    db = ParquetStore.open(tmp_path / "db")
    for t in targets[:3]:
        assert db.lookup(t, W, {"tile": 7}).cost == pytest.approx(3e-3)
        best = [r.config["tile"] for r in db.best(t, W, k=2)]  # ten configs tie at 1 ms
        assert len(set(best)) == 2 and all(tile % 5 == 0 for tile in best)
        assert len(db.records(t)) == 50
    db.commit(Record(targets[0], W, {"tile": 999}, [1e-6]))  # commits load only their own target
    assert db.best(targets[0], W)[0].config == {"tile": 999}
    with pytest.raises(pa.ArrowInvalid):
        db.lookup(targets[3], W, {"tile": 7})
    with pytest.raises(pa.ArrowInvalid):
        len(db)  # a whole-DB count reads every partition


def test_lazy_partitions_see_other_processes_commits_and_compactions(tmp_path):
    """A handle that loaded one target picks up, after refresh(), another process's commits to
    it and to a target it never loaded, and a compaction that merged them away."""
    targets = _targets(3)
    _fill(tmp_path / "db", targets, 20)
    db = ParquetStore.open(tmp_path / "db")
    assert db.lookup(targets[0], W, {"tile": 3}) is not None
    other = ParquetStore.open(tmp_path / "db")
    other.commit([Record(targets[0], W, {"tile": 100}, [1e-7]), Record(targets[2], W, {"tile": 100}, [1e-7])])
    other.close()  # folds its journal into part files
    db.refresh()
    assert db.best(targets[0], W)[0].config == {"tile": 100}
    assert db.best(targets[2], W)[0].config == {"tile": 100}
    ParquetStore.open(tmp_path / "db").compact()
    db.refresh()
    assert len(db) == 62 and len(db.records(targets[2])) == 21
    assert sum(t["records"] for t in db.targets()) == 62


def test_threads_share_fsyncs_and_every_acknowledged_commit_survives(tmp_path, monkeypatch):
    """8 threads commit one record at a time to one handle while each fsync takes 20 ms (a slow
    disk): they share journal fsyncs (far fewer fsyncs than commits), every commit returns only
    once durable, and a fresh process finds all of them."""
    db = ParquetStore.open(tmp_path / "db")
    db.commit(Record(_targets(1)[0], W, {"warm": 1}, [1e-3]))  # the journal exists
    journal_fd = db._journal.fd
    real_fsync = os.fsync
    calls = {"journal": 0}

    def slow_fsync(fd: int) -> None:
        if fd == journal_fd:
            calls["journal"] += 1
            time.sleep(0.02)
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", slow_fsync)
    n_threads, per_thread = 8, 40
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for i in range(per_thread):
                assert db.commit(Record(_targets(2)[t % 2], W, {"thread": t, "i": i}, [1e-3])) == 1
        except BaseException as e:  # (reported below)
            errors.append(e)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    assert not errors, errors
    total = n_threads * per_thread
    assert calls["journal"] < total / 2, calls  # shared: 2-8 commits per fsync here, by the machine's load
    assert len(db) == total + 1
    monkeypatch.setattr(os, "fsync", real_fsync)
    code = ("import sys, json; from tunedb.index import ParquetStore; db = ParquetStore.open(sys.argv[1]); "
            "print(json.dumps([len(db), len(set(db.records().column('record_id').to_pylist()))]))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "db")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == [total + 1, total + 1]  # (read from the live journal)


def test_built_partition_indexes_are_cached_in_derived_and_never_used_stale(tmp_path, monkeypatch):
    """A partition's built index is stored in derived/index/ and answers the next handle's
    queries exactly as a build from Parquet does; a commit + compaction makes it stale (a new
    one replaces it), and a damaged cache file is ignored."""
    from tunedb.index.parquet import indexcache

    monkeypatch.setattr(indexcache, "MIN_ROWS", 10)
    targets = _targets(2)
    _fill(tmp_path / "db", targets, 40)
    cache = tmp_path / "db" / "derived" / "index"

    def answers() -> tuple:
        db = ParquetStore.open(tmp_path / "db")
        out = tuple((db.lookup(t, W, {"tile": 9}).record_id, tuple(r.record_id for r in db.best(t, W, k=3)),
                     len(db.records(t))) for t in targets)
        return out, len(db)
    built = answers()
    files = sorted(cache.glob("*.npz"))
    assert len(files) == 2  # one per target
    from tunedb.index.parquet import memindex

    real_build = memindex.build

    def no_build(chunks, *a, **k):
        if chunks:  # (an empty index, as a new partition starts with, is not a build from files)
            raise AssertionError("the index was built again although a cache file matches")
        return real_build(chunks, *a, **k)
    with monkeypatch.context() as m:
        m.setattr(memindex, "build", no_build)
        assert answers() == built  # read from the cache: nothing is built
    for f in files:  # a damaged cache: rebuilt from Parquet, same answers
        f.write_bytes(b"garbage")
    assert answers() == built
    db = ParquetStore.open(tmp_path / "db")
    for _ in range(2):  # two new records of tile 9 outvote its old one (a median of three)
        db.commit(Record(targets[0], W, {"tile": 9}, [1e-9]))
    db.close()
    ParquetStore.open(tmp_path / "db").compact()
    (lk0, best0, n0) = answers()[0][0]
    assert lk0 != built[0][0][0] and best0[0] == lk0 and n0 == 42  # the new measurements answer
    assert sorted(cache.glob("*.npz")) != files and len(list(cache.glob("*.npz"))) == 2


def test_entries_are_remembered_until_the_db_changes(tmp_path, monkeypatch):
    """entries() is kept in derived/ for the next process, keyed by the DB's change token: a new
    handle gets the same table; after a commit (journal) or an invalidation it is recomputed."""
    targets = _targets(3)
    _fill(tmp_path / "db", targets, 10)
    db = ParquetStore.open(tmp_path / "db")
    first = db.entries()
    assert len(list((tmp_path / "db" / "derived").glob("entries2-*.parquet"))) == 1
    from tunedb.index.contract import tables

    def no_summary(t):
        raise AssertionError("entries were recomputed although derived/ holds them for this token")
    with monkeypatch.context() as m:
        m.setattr(tables, "entries", no_summary)
        assert ParquetStore.open(tmp_path / "db").entries().equals(first)  # read from derived/
    other = ParquetStore.open(tmp_path / "db")
    other.commit(Record(targets[1], W, {"tile": 77}, [1e-9]))
    db.refresh()
    e = db.entries().to_pylist()
    assert [r["records"] for r in e] == [10, 11, 10] and min(r["best_cost"] for r in e) == pytest.approx(1e-9)
    other.invalidate(targets[1])
    db.refresh()
    keys = first.column("target_key").to_pylist()
    assert [r["target_key"] for r in db.entries().to_pylist()] == [keys[0], keys[2]]  # (all of 1 is stale)
