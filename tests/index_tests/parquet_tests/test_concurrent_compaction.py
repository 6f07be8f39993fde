"""Compaction and dedup never break a writer or a reader.

A rewrite (``compact``, ``dedup``) deletes the files it merged once its output is published;
another handle may still hold those files in its listing.  Its commits and reads then meet a
file that is gone: they must list the partition again and complete, never raise
FileNotFoundError, and a commit retried that way must not write its records twice.

* Two handles in one process, deterministic: the first lists the files, the second compacts
  them away, the first then commits and reads.
* Real processes (the 'spawn' context): two compactors and a dedup in a loop, two writers
  committing small batches, a reader calling the read API, for ``SECONDS``; no call may
  raise, and every acknowledged record is in the store exactly once.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import random
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from compaction_workers import TARGETS, WORKLOAD, batch, reader, rewriter, writer

from tunedb.index import ParquetStore

SECONDS = 25.0


def _spread_over_files(path: Path, commits: int, per_commit: int, tag: str) -> list[str]:
    """Commit ``commits`` batches to ``path``, each as part files (no journal); returns their ids."""
    rng = random.Random(tag)
    db = ParquetStore.open(path)
    db.JOURNAL_MAX = 0
    db.AUTO_COMPACT_FILES = 10**9
    ids = []
    for i in range(commits):
        recs = batch(tag, i, per_commit, rng)
        db.commit(recs)
        ids.extend(r.record_id for r in recs)
    db.close()
    return ids


def _files_of(path: Path) -> set[Path]:
    return set((path / "records").glob("target_slug=*/*.parquet"))


def _stale_handle(path: Path) -> ParquetStore:
    """A handle that listed ``path``'s files, which a compaction by another handle then deleted."""
    db = ParquetStore.open(path)
    before = _files_of(path)
    other = ParquetStore.open(path)
    other.compact()
    other.close()
    assert before - _files_of(path), "the compaction deleted none of the listed files"
    return db


def test_commit_after_a_compaction_deleted_the_listed_files(tmp_path):
    """The first commit of a handle to a target reads that target's files; they were compacted
    away since it listed them: the commit lists again and succeeds, once."""
    path = tmp_path / "db"
    ids = _spread_over_files(path, 12, 6, "seed")
    db = _stale_handle(path)
    rng = random.Random(1)
    recs = batch("late", 0, 20, rng)  # (over several targets: each one's partition is read)
    assert db.commit(recs) == 20
    assert db.commit(recs) == 0  # (known now: not written again)
    db.close()
    check = ParquetStore.open(path)
    assert len(check) == len(ids) + 20
    rows = collections.Counter(ds.dataset([str(f) for f in check.snapshot_files()], format="parquet")
                               .to_table(columns=["record_id"]).column("record_id").to_pylist())
    assert all(rows[r.record_id] == 1 for r in recs)


def test_reads_after_a_compaction_deleted_the_listed_files(tmp_path):
    """Every read call of a handle whose listing a compaction made stale answers as a fresh
    handle does (no FileNotFoundError)."""
    path = tmp_path / "db"
    calls = {
        "len": len,
        "best": lambda db: [[r.record_id for r in db.best(t, WORKLOAD, k=3)] for t in TARGETS],
        "best_costs_many": lambda db: [[c.config_key for c in cs] for cs in
                                       db.best_costs_many([(t, WORKLOAD) for t in TARGETS], k=2)],
        "lookup": lambda db: [db.lookup(t, WORKLOAD, {"tag": "seed0", "i": 0, "j": 0}) for t in TARGETS],
        "entry_records": lambda db: [sorted(r.record_id for r in db.entry_records(t, WORKLOAD)) for t in TARGETS],
        "targets": lambda db: db.targets(),
        "stats": lambda db: db.stats().records,
        "records": lambda db: sorted(db.records().column("record_id").to_pylist()),
    }
    for i, (name, call) in enumerate(calls.items()):
        _spread_over_files(path, 4, 6, f"seed{i}")
        got = call(_stale_handle(path))
        assert got == call(ParquetStore.open(path)), name


def _run_workers(path: Path, out: Path, seconds: float) -> dict[str, dict]:
    """Start the workers (``compaction_workers``) against ``path`` for ``seconds``; returns each
    one's report by name (fails when one did not finish or wrote none)."""
    ctx = multiprocessing.get_context("spawn")
    deadline = time.time() + seconds + 3.0  # (the spawned interpreters start meanwhile)
    jobs = {
        "compact-a": (rewriter, "compact"), "compact-b": (rewriter, "compact"), "dedup": (rewriter, "dedup"),
        "writer-0": (writer, "w0"), "writer-1": (writer, "w1"), "reader": (reader,),
    }
    procs = {}
    for seed, (name, (fn, *args)) in enumerate(jobs.items()):
        p = ctx.Process(target=fn, args=(str(path), *args, deadline, str(out / f"{name}.json"), seed))
        p.start()
        procs[name] = p
    for name, p in procs.items():
        p.join(timeout=max(1.0, deadline - time.time()) + 120)
        if p.is_alive():
            p.kill()
            p.join()
        assert p.exitcode == 0, f"{name} exited with {p.exitcode}"
    return {name: json.loads((out / f"{name}.json").read_text()) for name in procs}


@pytest.mark.slow
def test_compactions_and_dedup_never_break_writers_or_readers(tmp_path):
    """Two compactors, a dedup, two writers and a reader at once: no call raises, and every
    acknowledged record is in the store exactly once (tunedb's count and the live files' rows)."""
    path = tmp_path / "db"
    seeded = _spread_over_files(path, 20, 6, "seed")
    out = tmp_path / "out"
    out.mkdir()
    reports = _run_workers(path, out, SECONDS)
    errors = {name: r["errors"] for name, r in reports.items() if r["errors"]}
    assert not errors, "\n".join(f"--- {name} ({len(e)} errors):\n{e[0]}" for name, e in errors.items())
    assert reports["compact-a"]["files"] + reports["compact-b"]["files"] > 0  # (they did merge files)
    assert all(reports[n]["calls"] > 5 for n in reports), {n: r["calls"] for n, r in reports.items()}
    acked = seeded + reports["writer-0"]["acked"] + reports["writer-1"]["acked"]
    print({name: r["calls"] for name, r in reports.items()}, "records acknowledged:", len(acked))
    assert len(set(acked)) == len(acked)

    db = ParquetStore.open(path)
    ids = db.records().column("record_id").to_pylist()
    assert len(ids) == len(set(ids)) == len(db) == len(acked)
    assert set(ids) == set(acked)
    snap = db.snapshot_files()
    rows = collections.Counter(ds.dataset([str(f) for f in snap], format="parquet")
                               .to_table(columns=["record_id"]).column("record_id").to_pylist())
    twice = [r for r, c in rows.items() if c != 1]
    assert not twice, f"{len(twice)} records in more than one live file"
    assert set(rows) == set(acked)
