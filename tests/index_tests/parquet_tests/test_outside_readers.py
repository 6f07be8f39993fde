"""Readers outside tunedb never see half a change.

The documented way to read a DB from outside is its Delta Lake table, ``DB/records``:
``deltalake.DeltaTable(...).to_pyarrow_dataset()`` (pyarrow), ``polars.read_delta`` and DuckDB
over that dataset.  Each operation that writes records (a large commit, a journal fold by its
writer or by a recovering opener, compact, dedup, forget, upgrade) is SIGKILLed right after each
of its ``rename``, ``unlink``, ``fsync`` and ``link`` calls in turn; right after the kill, before
any tunedb opens the DB again, the three engines must each read exactly the records before the
operation or exactly the records after it -- no temp file, no output beside its inputs, no
forgotten row, no duplicate.  Then tunedb opens the DB, and it and the engines agree.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import deltalake
import duckdb
import polars as pl
import pytest

from tunedb.index import ParquetStore
from tunedb.index.parquet.upgrade import upgrade

from helpers import TESTS
from outside_workers import records

HERE = TESTS
WORKER = HERE / "outside_workers.py"
SCHEMA1 = HERE / "data" / "db-schema1"
OPS = ("commit", "fold", "recover", "compact", "dedup", "forget", "forget-target", "upgrade")


def run(op: str, db: Path, point: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(WORKER), op, str(db), point], capture_output=True, text=True,
                          timeout=180, cwd=HERE)


def outside_ids(db: Path) -> dict[str, list[str] | None]:
    """The record ids each outside engine reads from ``db/records`` (None: no table yet)."""
    try:
        dt = deltalake.DeltaTable(str(db / "records"))
    except deltalake.exceptions.TableNotFoundError:
        return {"pyarrow": None, "polars": None, "duckdb": None}
    dataset = dt.to_pyarrow_dataset()
    out = {"pyarrow": dataset.to_table(columns=["record_id"]).column("record_id").to_pylist(),
           "polars": pl.read_delta(str(db / "records"), columns=["record_id"])["record_id"].to_list()}
    rel = duckdb.from_arrow(dataset)
    out["duckdb"] = [r[0] for r in rel.select("record_id").fetchall()]
    return out


def base_db(root: Path, op: str) -> Path:
    """The DB an operation starts from: three targets, several commit files each (some records
    committed twice: dedup and keep-top have work), and for ``recover`` a journal whose writer
    was killed."""
    db = root / "base"
    if op == "upgrade":
        shutil.copytree(SCHEMA1, db)
        return db
    with ParquetStore.open(db) as h:
        for i in range(3):
            h.commit(records(f"base-{i}", 300, i))
        h.commit(records("base-0", 300, 0, id_tag="again"))  # the same measurements again: dedup's work
    if op == "recover":
        assert run("abandon", db, "none").returncode == 0
        assert list((db / "journal").glob("*.jsonl"))
    return db


def states(root: Path, op: str) -> tuple[Path, set[frozenset], dict]:
    """The base DB, the record-id sets an outside reader may see during ``op`` (before, after;
    upgrade: also after its log of the old files), and the op's call counts."""
    base = base_db(root, op)
    before = outside_ids(base)["pyarrow"]
    done = root / "done"
    shutil.copytree(base, done)
    counted = run(op, done, "count")
    assert counted.returncode == 0, counted.stderr
    counts = json.loads(counted.stdout.strip().splitlines()[-1])
    after = outside_ids(done)["pyarrow"]
    assert after is not None and len(after) == len(set(after))
    allowed = {frozenset(after)}
    if before is not None:
        allowed.add(frozenset(before))
    if op == "upgrade":  # its first step logs the old layout's files (the journal folds next)
        with ParquetStore.open(SCHEMA1, read_only=True) as old:
            files = {r for r in old.records().column("record_id").to_pylist()}
        allowed |= {frozenset(files), frozenset(after)}
        from tunedb.index.parquet import journal_fold
        in_journal = set()
        for jp in journal_fold.list_journals(SCHEMA1 / "journal"):
            for _, t in journal_fold.read_journal(jp):
                in_journal |= set(t.column("record_id").to_pylist())
        allowed.add(frozenset(files - in_journal))
    shutil.rmtree(done)
    return base, allowed, counts


def check_point(root: Path, base: Path, op: str, point: str, allowed: set[frozenset]) -> None:
    db = root / f"kill-{point.replace(':', '-')}"
    shutil.copytree(base, db)
    p = run(op, db, point)
    assert p.returncode in (0, -9), p.stderr
    seen = outside_ids(db)
    for engine, ids in seen.items():
        if ids is None:
            assert op == "upgrade", f"{op} killed at {point}: no Delta table for {engine}"
            continue
        assert len(ids) == len(set(ids)), f"{op} killed at {point}: {engine} reads {len(ids) - len(set(ids))} " \
                                          f"rows twice"
        assert frozenset(ids) in allowed, f"{op} killed at {point}: {engine} reads {len(ids)} rows, " \
                                          f"neither the state before nor after ({sorted(len(a) for a in allowed)})"
    # tunedb opens (recovering; an upgrade cut short is run again, as its error tells) and then it
    # and every engine read the same records
    if op == "upgrade":
        upgrade(db)
    with ParquetStore.open(db) as h:
        mine = sorted(h.records().column("record_id").to_pylist())
    again = outside_ids(db)
    for engine, ids in again.items():
        assert ids is not None and sorted(ids) == mine, f"{op} killed at {point}: after tunedb reopened, " \
                                                        f"{engine} reads {len(ids or [])} rows, tunedb {len(mine)}"
    shutil.rmtree(db)


def points(counts: dict[str, int]) -> list[str]:
    return [f"{name}:{k}" for name, n in sorted(counts.items()) for k in range(1, n + 1)]


@pytest.mark.parametrize("op", OPS)
def test_outside_readers_see_before_or_after_a_killed_write_quick(tmp_path, op):
    """A sample of each operation's kill points (the slow test takes all of them)."""
    base, allowed, counts = states(tmp_path, op)
    pts = points(counts)
    assert counts["link"] and counts["fsync"], counts  # (link: a Delta log version)
    rng = random.Random(op)
    # the log's commit point (link) and the calls around it, plus a random few
    chosen = {p for p in pts if p.startswith("link:")} | set(rng.sample(pts, min(4, len(pts))))
    for point in sorted(chosen):
        check_point(tmp_path, base, op, point, allowed)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_outside_readers_see_before_or_after_at_every_kill_point(tmp_path, op):
    """Every rename, unlink, fsync and link of each operation."""
    base, allowed, counts = states(tmp_path, op)
    for point in points(counts):
        check_point(tmp_path, base, op, point, allowed)
    print(f"\n{op}: {len(points(counts))} kill points ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}), "
          f"pyarrow, Polars and DuckDB each read the state before or after at every one")


def test_reader_of_a_changing_db_never_sees_a_duplicate(tmp_path):
    """Readers in a loop while a writer commits, compacts and forgets: every read of every
    engine is duplicate-free and never holds a forgotten record."""
    db = tmp_path / "db"
    with ParquetStore.open(db) as h:
        h.commit(records("start", 300))
    writer = subprocess.Popen([sys.executable, str(WORKER), "churn", str(db), "none"], cwd=HERE)
    reads = 0
    try:
        while writer.poll() is None or reads < 3:
            try:
                seen = outside_ids(db)
            except (OSError, deltalake.exceptions.DeltaError, duckdb.Error):
                continue  # a file removed by a later version after this read listed it: read again
            for engine, ids in seen.items():
                assert ids is not None and len(ids) == len(set(ids)), engine
            reads += 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    with ParquetStore.open(db) as h:
        mine = sorted(h.records().column("record_id").to_pylist())
        assert "outside-1" not in set(h.records().column("target_name").to_pylist())
    assert sorted(outside_ids(db)["polars"]) == mine
    names = pl.read_delta(str(db / "records"), columns=["target_name"])["target_name"].unique().to_list()
    assert "outside-1" not in names
