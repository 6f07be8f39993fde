"""The bulk path (RecordBatch, large commits indexed lazily) and the write-ahead journal of
small commits: real Parquet directories, real journal files, real child processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tunedb.index import ParquetStore, Record, RecordBatch

from helpers import ROOT

T1 = {"kind": "cpu", "name": "alpha", "compiler": "gcc 12"}
T2 = {"kind": "gpu", "name": "beta"}
W = {"family": "matmul", "M": 64, "N": 64, "K": 64}


def columns(n: int, targets=(T1, T2)) -> dict:
    return {"target": [targets[i % len(targets)] for i in range(n)], "workload": [W] * n,
            "config": [{"tile": i, "unroll": i % 4} for i in range(n)],
            "costs": [[1e-3 * (1 + i % 97), 1.1e-3 * (1 + i % 97)] for i in range(n)],
            "compile_s": [0.5] * n, "wall_s": [1.0] * n}


def parquet_files(db: Path) -> list[Path]:
    return sorted((db / "records").rglob("*.parquet"))


def child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_batch_has_the_keys_of_records_and_answers_lookups(tmp_path):
    cols = columns(3000)
    batch = RecordBatch.from_columns(**cols)
    recs = batch.to_records()
    for r, t, c in zip(recs[:50], cols["target"], cols["config"]):
        ref = Record(t, W, c, r.costs)
        assert (r.target_key, r.workload_key, r.config_key, r.lookup_key, r.entry_key) == \
            (ref.target_key, ref.workload_key, ref.config_key, ref.lookup_key, ref.entry_key)
    db = ParquetStore.open(tmp_path / "db")
    assert db.commit(batch) == 3000          # large: written per target, indexed at the next query
    assert db.commit(batch) == 0             # idempotent by record_id
    assert len(parquet_files(tmp_path / "db")) == 2
    for d in (db, ParquetStore.open(tmp_path / "db")):
        assert len(d) == 3000
        hit = d.lookup(T2, W, {"tile": 7, "unroll": 3})
        assert hit is not None and hit.record_id == recs[7].record_id and hit.costs == recs[7].costs
        assert hit.compile_s == 0.5 and hit.target == T2
        best = d.best(T1, W, k=3)
        assert [b.cost for b in best] == sorted(b.cost for b in best) and best[0].cost == pytest.approx(1.05e-3)
        assert d.records(target=T1).num_rows == 1500


def test_batch_validation_names_field_and_row_and_writes_nothing(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    n = 10
    bad = {
        "status": dict(status=["ok"] * 5 + ["exploded"] + ["ok"] * 4),
        "costs": dict(costs=[[1e-3]] * 4 + [[-1.0]] + [[1e-3]] * 5),
        "compile_s": dict(compile_s=[0.1] * 3 + [-2.0] + [0.1] * 6),
        "source": dict(source="from-a-friend"),
        "record_id": dict(record_id=[f"{i:032x}" for i in range(9)] + ["not-hex"]),
        "config": dict(config=[{"tile": 1}] * 9 + [{"tile": {1, 2}}]),
    }
    for field, override in bad.items():
        cols = columns(n)
        cols.update(override)
        with pytest.raises(ValueError, match=f"'{field}'") as e:
            db.commit(RecordBatch.from_columns(**cols))
        assert "row" in str(e.value), str(e.value)
    # ok without costs, given as Records in a list large enough for the vectorised check
    recs = [Record(T1, W, {"tile": i}, [1e-3]) for i in range(2500)]
    recs[1234] = Record(T1, W, {"tile": 1234}, [], status="ok")
    with pytest.raises(ValueError, match=f"record {recs[1234].record_id}.*'costs' is empty"):
        db.commit(recs)
    assert parquet_files(tmp_path / "db") == [] and len(db) == 0
    assert not list((tmp_path / "db" / "journal").iterdir())


def test_repeated_ids_within_one_commit_are_written_once(tmp_path):
    cols = columns(2500)
    cols["record_id"] = [f"{i % 2400:032x}" for i in range(2500)]
    db = ParquetStore.open(tmp_path / "db")
    assert db.commit(RecordBatch.from_columns(**cols)) == 2400
    assert ParquetStore.open(tmp_path / "db").records().num_rows == 2400


def test_small_commits_go_to_a_journal_that_other_processes_read_and_close_folds(tmp_path):
    path = tmp_path / "db"
    db = ParquetStore.open(path)
    rs = [Record(T1, W, {"tile": i}, [1e-3 * (i + 1)]) for i in range(5)]
    for r in rs:
        db.commit(r)
    journals = list((path / "journal").glob("*.jsonl"))
    assert len(journals) == 1 and parquet_files(path) == []
    p = child("""
        import sys
        from tunedb.index import ParquetStore
        db = ParquetStore.open(sys.argv[1])
        print(len(db), db.lookup({"kind": "cpu", "name": "alpha", "compiler": "gcc 12"},
              {"family": "matmul", "M": 64, "N": 64, "K": 64}, {"tile": 3}).record_id)
        """, str(path))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert out.split() == ["5", rs[3].record_id]
    assert journals[0].exists(), "a live writer's journal is read, never folded by a reader"
    db.close()
    assert not journals[0].exists() and len(parquet_files(path)) == 1
    assert ds.dataset(path / "records", partitioning="hive").to_table().num_rows == 5


def test_journal_folds_past_its_threshold(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    db.JOURNAL_FOLD = 10
    for i in range(25):
        db.commit(Record(T1, W, {"tile": i}, [1e-3]))
    assert len(parquet_files(tmp_path / "db")) == 2  # two folds of 10
    assert len(db) == 25 and len(ParquetStore.open(tmp_path / "db")) == 25


def test_torn_journal_tail_after_a_crash_is_ignored_and_the_journal_folded(tmp_path):
    path = tmp_path / "db"
    p = child("""
        import os, sys
        from tunedb.index import Record, ParquetStore
        db = ParquetStore.open(sys.argv[1])
        for i in range(3):
            db.commit(Record({"kind": "cpu", "name": "alpha"}, {"family": "f"}, {"i": i}, [1.0]))
        sys.stdout.flush()
        os._exit(0)  # no close, no atexit: what a crash leaves behind
        """, str(path))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    (journal,) = (path / "journal").glob("*.jsonl")
    with open(journal, "ab") as f:
        f.write(b'{"record_id":"0123456789abcdef0123456789abcdef","sta')  # a torn append
    db = ParquetStore.open(path)
    assert len(db) == 3 and db.records().num_rows == 3
    assert not journal.exists() and len(parquet_files(path)) == 1  # folded by the opener


def test_folding_a_journal_again_adds_no_copies(tmp_path):
    """A crash after a fold published its files but before it deleted the journal (simulated by
    putting the journal back): the next opener folds it again, and neither tunedb nor pyarrow
    sees a record twice -- the fold's files are named after the journal."""
    import shutil

    path = tmp_path / "db"
    db = ParquetStore.open(path)
    for i in range(6):
        db.commit([Record(T1, W, {"tile": i}, [1e-3]), Record(T2, W, {"tile": i}, [1e-3])])
    (journal,) = (path / "journal").glob("*.jsonl")
    shutil.copy(journal, tmp_path / "saved.jsonl")
    db.close()
    files = parquet_files(path)
    assert len(files) == 2 and not journal.exists()
    shutil.copy(tmp_path / "saved.jsonl", journal)
    db2 = ParquetStore.open(path)
    assert len(db2) == 12 and not journal.exists() and parquet_files(path) == files
    assert ds.dataset(path / "records", partitioning="hive").count_rows() == 12
    db2.compact()  # once merged into a compacted file, a third fold is recognised too
    shutil.copy(tmp_path / "saved.jsonl", journal)
    assert len(ParquetStore.open(path)) == 12 and not journal.exists()
    assert ds.dataset(path / "records", partitioning="hive").count_rows() == 12


@pytest.mark.slow
def test_journal_of_a_killed_writer_is_folded_by_the_next_reader(tmp_path):
    path = tmp_path / "db"
    ParquetStore.open(path)
    p = child("""
        import sys, time
        from tunedb.index import Record, ParquetStore
        db = ParquetStore.open(sys.argv[1])
        for i in range(4):
            db.commit(Record({"kind": "cpu", "name": "alpha"}, {"family": "f"}, {"i": i}, [1.0]))
        print("committed", flush=True)
        time.sleep(120)
        """, str(path))
    assert p.stdout.readline().strip() == "committed"
    db = ParquetStore.open(path)
    assert len(db) == 4 and len(list((path / "journal").glob("*.jsonl"))) == 1  # live: read, kept
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    deadline = time.time() + 10
    while list((path / "journal").glob("*.jsonl")) and time.time() < deadline:
        db.refresh()
        time.sleep(0.05)
    assert not list((path / "journal").glob("*.jsonl")) and len(db) == 4
    assert json.loads(json.dumps(db.stats().to_dict()))["records"] == 4


def test_journaled_records_obey_invalidate_and_forget(tmp_path):
    db = ParquetStore.open(tmp_path / "db")
    for i in range(5):
        db.commit(Record(T1, W, {"tile": i}, [1e-3 * (i + 1)]))
    db.refresh()  # the journal is now read back like a record file
    assert len(db) == 5 and [r.config for r in db.best(T1, W, 2)] == [{"tile": 0}, {"tile": 1}]
    db.invalidate(T1)
    assert db.lookup(T1, W, {"tile": 1}) is None and db.records(include_stale=False).num_rows == 0
    db.commit(Record(T1, W, {"tile": 1}, [5e-3]))  # a new measurement answers again
    assert db.lookup(T1, W, {"tile": 1}).cost == 5e-3
    assert ParquetStore.open(tmp_path / "db").lookup(T1, W, {"tile": 1}).cost == 5e-3
    assert db.forget(target=T1)["removed"] == 6  # the handle's journal is folded first
    assert len(db) == 0 and len(ParquetStore.open(tmp_path / "db")) == 0
