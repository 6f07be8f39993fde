"""The Parquet store: lookups, best, maintenance, crash safety and concurrent writers; at the end,
the tests of one backend that the contract suite held (a store as a context manager, projections
of a schema-1 directory, the memory store's filtered reads)."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time

import deltalake
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.dataset as ds
import pytest

import tunedb
from tunedb.index import ParquetStore, Record
from tunedb.index.testing import store_tests as contract

from helpers import TESTS

HERE = TESTS
T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12"}
T2 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 13"}  # a toolchain upgrade: another target
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}


def recs(n, target=T1, workload=W, base=1e-3):
    return [Record(target, workload, {"tile": i}, [base * (i + 1), base * (i + 1.1)]) for i in range(n)]


def test_lookup_best_and_reopen(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    rs = recs(20)
    assert db.commit(rs) == 20
    assert db.commit(rs) == 0  # idempotent by record_id
    failed = Record(T1, W, {"tile": 99}, [], status="runtime_error", error="segfault")
    db.commit(failed)
    for d in (db, ParquetStore.open(tmp_path / "db")):
        assert len(d) == 21
        hit = d.lookup(T1, W, {"tile": 3})
        assert hit is not None and hit.record_id == rs[3].record_id and hit.costs == rs[3].costs
        assert d.lookup(T1, W, {"tile": 99}).status == "runtime_error"  # failures are cached
        assert d.lookup(T1, W, {"tile": 1000}) is None
        assert d.lookup(T2, W, {"tile": 3}) is None  # other toolchain: other key, no stale answer
        best = d.best(T1, W, k=3)
        assert [r.config["tile"] for r in best] == [0, 1, 2]
        assert all(r.status == "ok" for r in best)
    s = ParquetStore.open(tmp_path / "db").stats().to_dict()
    assert (s["records"], s["targets"], s["workloads"], s["entries"]) == (21, 1, 1, 1)
    assert s["size_bytes"] > 0 and s["files"] >= 1


def test_lookup_latest_measurement_wins_and_hit_rate(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    db.commit(Record(T1, W, {"tile": 1}, [2.0]))
    time.sleep(0.01)
    db.commit(Record(T1, W, {"tile": 1}, [1.0]))
    assert db.lookup(T1, W, {"tile": 1}).cost == 1.0
    db2 = ParquetStore.open(tmp_path / "db")
    assert db2.lookup(T1, W, {"tile": 1}).cost == 1.0
    assert db2.lookup(T1, W, {"tile": 2}) is None
    s = db2.stats().to_dict()
    assert (s["lookups"], s["hits"], s["hit_rate"]) == (2, 1, 0.5)
    assert [r.cost for r in db2.best(T1, W, k=5)] == [1.0]  # one per config


def test_other_process_commits_seen_after_refresh(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    code = ("from tunedb.index import ParquetStore, Record; db = ParquetStore.open(r'%s');"
            "db.commit(Record({'kind':'cpu','name':'p'}, {'family':'f'}, {'x': 1}, [0.5]))" % (tmp_path / "db"))
    subprocess.run([sys.executable, "-c", code], check=True)
    assert db.lookup({"kind": "cpu", "name": "p"}, {"family": "f"}, {"x": 1}) is None
    db.refresh()
    assert db.lookup({"kind": "cpu", "name": "p"}, {"family": "f"}, {"x": 1}).cost == 0.5


def test_records_filter_and_hive_dataset(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    db.commit(recs(5) + recs(3, target={"kind": "gpu", "name": "g"}))
    t = db.records(target=T1)
    assert t.num_rows == 5 and set(t.column("target_key").to_pylist()) == {Record(T1, W, {}, [1]).target_key}
    assert db.records().num_rows == 8
    # small commits sit in the handle's journal until folded: close() folds them into Parquet
    assert sorted(p.suffix for p in (tmp_path / "db" / "journal").iterdir()) == [".jsonl"]
    db.close()
    assert list((tmp_path / "db" / "journal").iterdir()) == []
    hive = ds.dataset(tmp_path / "db" / "records", partitioning="hive").to_table()
    assert hive.num_rows == 8
    assert set(hive.column("target").to_pylist()) >= {'{"compiler":"gcc 12","kind":"cpu","name":"alpha"}'}


def test_compact_dedup_forget_invalidate(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    for i in range(5):
        db.commit(recs(4, base=1e-3 * (i + 1)))  # same configs, other costs
    dup = Record(T1, W, {"tile": 0}, [1e-3, 1.1e-3])
    db.commit([dup, Record(T1, W, {"tile": 0}, [1e-3, 1.1e-3])])  # an identical repeat
    files_before = db.stats().files
    st = db.compact()
    assert st["files_before"] == files_before and st["files_after"] == 1
    assert len(db) == 22 and db.stats().files == 1
    st = db.dedup()
    assert st["removed"] == 2  # the two repeats of (tile 0, [1e-3, 1.1e-3]) beyond the first
    assert len(db) == 20
    st = db.forget(keep_top=2)
    assert len(db) == 2 and [r.config["tile"] for r in db.best(T1, W, k=5)] == [0, 1]
    db.commit(Record(T1, W, {"tile": 7}, [], status="compile_error"))
    db.forget(keep_top=0)
    assert len(db) == 1  # failed configs survive top-k retention (they stop retries)
    key = db.invalidate(T1)
    assert key == dup.target_key
    assert db.lookup(T1, W, {"tile": 7}) is None and db.best(T1, W) == []
    db.commit(Record(T1, W, {"tile": 7}, [0.5]))
    assert ParquetStore.open(tmp_path / "db").lookup(T1, W, {"tile": 7}).cost == 0.5
    assert ParquetStore.open(tmp_path / "db").stats().stale_targets == [key]
    db.forget(target=T1)
    assert len(ParquetStore.open(tmp_path / "db")) == 0


def test_forget_older_than(tmp_path):
    import datetime as dt

    db = ParquetStore.open(tmp_path / "db")
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30)
    db.commit([Record(T1, W, {"tile": 1}, [1.0], timestamp=old), Record(T1, W, {"tile": 2}, [1.0])])
    assert db.forget(older_than_days=7)["removed"] == 1
    assert db.lookup(T1, W, {"tile": 1}) is None and db.lookup(T1, W, {"tile": 2}) is not None


def test_automatic_compaction_past_threshold(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    db.AUTO_COMPACT_FILES = 8
    db.JOURNAL_MAX = 0  # a Parquet file per commit (the path a journal fold or a larger commit takes)
    for r in recs(40):
        db.commit(r)
    assert len(db) == 40  # a compaction during commit must not double-count the handle's own records
    db.refresh()
    assert db.stats().files < 40 and len(db) == 40


def test_crash_mid_compaction_never_double_counts(tmp_path):
    """Simulate the crash window: the compacted file is in place, the sources are not yet deleted."""
    import shutil

    db = ParquetStore.open(tmp_path / "db")
    db.JOURNAL_MAX = 0  # a Parquet file per commit
    for r in recs(6):
        db.commit(r)
    part = next((tmp_path / "db" / "records").glob("target_slug=*"))
    saved = tmp_path / "saved"
    shutil.copytree(part, saved)
    db.compact()
    for f in saved.iterdir():  # put the superseded sources back, as after a crash before unlink
        shutil.copy(f, part / f.name)
    assert ds.dataset(tmp_path / "db" / "records", partitioning="hive").count_rows() == 12  # the crash window
    assert deltalake.DeltaTable(str(tmp_path / "db" / "records")).to_pyarrow_dataset().count_rows() == 6
    db2 = ParquetStore.open(tmp_path / "db", create=False)
    assert len(db2) == 6 and db2.records().num_rows == 6
    assert len(list(part.glob("part-*.parquet"))) == 0  # cleaned up on open (by a reader too)
    assert ds.dataset(tmp_path / "db" / "records", partitioning="hive").count_rows() == 6


def test_unreadable_or_foreign_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file.txt").write_text("hello")
    with pytest.raises(ValueError):
        ParquetStore.open(tmp_path / "x")
    with pytest.raises(FileNotFoundError):
        ParquetStore.open(tmp_path / "missing", create=False)


@pytest.mark.slow
def test_sigkill_never_loses_acknowledged_commits(tmp_path):
    path = tmp_path / "db"
    ParquetStore.open(path)
    acked: set[str] = set()
    rng = random.Random(1234)
    for run in range(20):
        p = subprocess.Popen([sys.executable, str(HERE / "store_workers.py"), "commit-loop", str(path), str(run),
                              "100000", str(rng.choice([1, 5, 50]))], stdout=subprocess.PIPE, text=True)
        select.select([p.stdout], [], [], 120)  # its first acknowledgement, however slowly it starts
        time.sleep(rng.uniform(0.0, 0.8))
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        lines = out.splitlines()
        if lines and len(lines[-1]) != 32:
            lines = lines[:-1]  # a torn last line: not acknowledged
        acked.update(lines)
    assert len(acked) > 100
    db = ParquetStore.open(path)
    ids = set(db.records().column("record_id").to_pylist())
    assert acked <= ids
    assert len(db) == len(ids)
    assert not list(path.rglob("_tmp-*")), "leftover temporary files are cleaned up on open"


@pytest.mark.slow
def test_four_writers_and_a_compacting_reader(tmp_path):
    path = tmp_path / "db"
    ParquetStore.open(path)
    writers = [subprocess.Popen([sys.executable, str(HERE / "store_workers.py"), "writer", str(path), f"w{i}",
                                 "2000"], stdout=subprocess.PIPE, text=True) for i in range(4)]
    reader = subprocess.Popen([sys.executable, str(HERE / "store_workers.py"), "reader", str(path), "20"],
                              stdout=subprocess.PIPE, text=True)
    for w in writers:
        out, _ = w.communicate(timeout=600)
        assert w.returncode == 0 and "done" in out
    out, _ = reader.communicate(timeout=600)
    assert reader.returncode == 0, out
    db = ParquetStore.open(path)
    t = db.records()
    assert t.num_rows == 8000 and len(db) == 8000
    ids = t.column("record_id").to_pylist()
    assert len(set(ids)) == 8000
    pairs = {(c) for c in t.column("config").to_pylist()}
    assert len(pairs) == 8000


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_costs_from_columns_equals_the_estimator_over_records(tmp_path, seed):
    """The Parquet store ranks an entry from its decoded columns; the answer is exactly
    ``estimate.rank`` over ``entry_records``: the same configs in the same order, the same
    estimates and the same representative records -- with several files, repeated configs,
    confirmation re-measurements, noisy records, failures, ties and a refuted record."""
    from tunedb.index.model.estimate import rank

    rng = random.Random(seed)
    db = ParquetStore.open(tmp_path / "db")
    t, w = {"kind": "cpu", "name": "rank"}, {"family": "matmul", "M": 8}
    for batch in range(4):
        recs = []
        for i in range(120):
            c = {"tile": rng.randrange(25)}
            meta = {}
            if rng.random() < 0.15:
                meta["origin"] = rng.choice(["confirm", "compare", "runoff"])
            if rng.random() < 0.1:
                meta["noisy"] = True
            failed = rng.random() < 0.05
            costs = [] if failed else [round(rng.choice([1e-3, 2e-3, rng.uniform(1e-3, 3e-3)]), 6)
                                       for _ in range(rng.randint(1, 4))]
            recs.append(Record(t, w, c, costs, status="runtime_error" if failed else "ok", meta=meta))
        db.commit(recs)
    db.mark({db.best(t, w, 3)[2].record_id: "refuted"})
    for k in (1, 5, 100):
        fast = db.best_costs(t, w, k)
        slow = rank(db.entry_records(t, w), k)
        assert [c.config_key for c in fast] == [c.config_key for c in slow]
        assert [c.estimate for c in fast] == [c.estimate for c in slow]
        assert [c.record.record_id for c in fast] == [c.record.record_id for c in slow]


def test_a_batch_lookup_read_after_a_compaction_gives_the_same_records(tmp_path):
    """``lookup_batch`` builds answers when they are read: a file merged away between the
    look-up and the read is no error, the answer is the same record (looked up again)."""
    db = ParquetStore(tmp_path / "db")
    t, w = {"kind": "cpu", "name": "x"}, {"family": "f", "n": 1}
    rs = []
    for part in range(3):  # three part files
        batch = [Record(t, w, {"i": part * 100 + i}, [1e-3 * (i + 1)]) for i in range(100)]
        db.commit(batch)
        rs += batch
    got = db.lookup_batch(t, w, [r.config for r in rs[::7]] + [{"i": -5}])
    assert got.hits == len(rs[::7])
    db.compact()
    other = ParquetStore(tmp_path / "db")
    other.compact()  # another handle merges the files this handle's answers point at
    assert [r.record_id for r in got[:-1]] == [r.record_id for r in rs[::7]] and got[-1] is None


# --------------------------------------------------------------------- moved from the contract suite
# (what only the Parquet directory or the memory store does; the contract itself is
# tunedb.index.testing.store_tests, run by tests/index_tests/test_store_contract.py)
def test_context_manager_closes_and_keeps_data(tmp_path):
    with tunedb.open(tmp_path / "db") as s:
        s.commit(contract.recs(2))
    assert len(tunedb.open(tmp_path / "db")) == 2
    with tunedb.open("memory:") as m:
        m.commit(contract.recs(2))
        assert len(m) == 2  # a memory store lives as long as its handle


def test_memory_store_filtered_read_costs_the_matching_records_not_the_store(capsys):
    """MemoryStore keeps its records' indices by target, workload and entry: a filtered read
    answers the same rows as a scan of every record, in commit order, and does not touch the
    other targets' records (the timing ratio is printed, not asserted)."""
    from tunedb.index.memory.store import MemoryStore
    from tunedb.index.model.batch import RecordBatch

    s = MemoryStore()
    many = [Record({"kind": "cpu", "name": f"t{i % 40}"}, {"family": "mm", "M": i % 7}, {"i": i}, [1e-3])
            for i in range(20_000)]
    s.commit(RecordBatch.from_records(many))
    mine = contract.recs(5) + contract.recs(3, workload=contract.W2)
    s.commit(mine[:4])
    s.commit(contract.recs(2, target=contract.T2))
    s.commit(mine[4:])
    # the same rows, in commit order, as a full scan filtered afterwards
    full = s.records()
    for tgt, wl in ((contract.T1, contract.W), (contract.T1, None), (None, contract.W2), (contract.T2, contract.W),
                    (contract.T1, {"family": "conv"})):
        got = s.records(tgt, wl)
        m = pa.array([True] * full.num_rows)
        if tgt is not None:
            m = pa.compute.and_(m, pa.compute.equal(full.column("target_key"), Record(tgt, contract.W, {}).target_key))
        if wl is not None:
            m = pa.compute.and_(m, pa.compute.equal(full.column("workload_key"), Record(contract.T1, wl, {}).workload_key))
        assert got.equals(full.filter(m)), (tgt, wl)
    assert s.records(contract.T1, contract.W).column("record_id").to_pylist() == [r.record_id for r in mine[:5]]
    # still right after a rewrite of the maps (dedup/forget rebuild them) and an invalidation
    s.forget(target=contract.T2)
    assert s.records(contract.T2).num_rows == 0 and s.records(contract.T1, contract.W2).num_rows == 3
    s.invalidate(contract.T1)
    assert s.records(contract.T1, include_stale=False).num_rows == 0 and s.records(contract.T1).num_rows == 8
    # cost: one entry among 20k records of other targets vs a full read
    t0 = time.perf_counter()
    for _ in range(20):
        s.records(contract.T1, contract.W)
    one = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    s.records()
    every = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nMemoryStore, 20k records: records(target, workload) of 5 records {one * 1e3:.3f} ms, "
              f"records() {every * 1e3:.1f} ms (ratio {every / one:.0f}x)")


def test_parquet_projection_of_a_schema1_db_reads_missing_columns_as_unknown(tmp_path):
    """A schema-1 DB's files (and journal) lack host/origin: a projection of them reads ``""``
    (unknown), as the full read does, without failing on the missing column."""
    import shutil

    from tunedb.index.parquet.store import ParquetStore

    src = TESTS / "data" / "db-schema1"
    shutil.copytree(src, tmp_path / "db")
    with ParquetStore.open(tmp_path / "db") as db:
        assert db.schema_version == 1
        full = db.records()
        assert full.num_rows > 0
        for f in ({}, {"include_stale": False}, {"target": full.column("target_key")[0].as_py()}):
            contract.assert_projections_match(db, **f)
        got = db.records(columns=["origin", "host"])
        assert set(got.column("host").to_pylist()) == {""} and set(got.column("origin").to_pylist()) == {""}
