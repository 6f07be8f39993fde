"""After tunedb repairs a damaged ``_delta_log``, outside Delta readers read the table again.

Each kind of damage is made by hand on a real DB (a checkpoint, ``_last_checkpoint``, a stray
version after a gap, a version naming a file outside the table, a truncated version); then a new
``tunedb`` process opens the DB writable and another commits to it.  Afterwards ``deltalake``,
Polars and DuckDB each read exactly the record ids tunedb reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import deltalake
import duckdb
import polars as pl
import pytest

from tunedb.index import ParquetStore
from tunedb.index.parquet import deltalog

from outside_workers import records

TUNEDB = Path(sys.executable).with_name("tunedb")
TESTS = Path(__file__).resolve().parents[2]


def _make(root: Path) -> Path:
    db = root / "db"
    with ParquetStore.open(db) as h:
        for i in range(4):
            h.commit(records(f"base-{i}", 150, i))
    rd = db / "records"
    deltalog.write_checkpoint(rd, deltalog.read_state(rd))  # (a real checkpoint to damage)
    with ParquetStore.open(db) as h:
        h.commit(records("after-checkpoint", 90))
    return db


def _garbage_checkpoint(ld: Path) -> None:
    v = json.loads((ld / "_last_checkpoint").read_text())["version"]
    (ld / f"{v:020d}.checkpoint.parquet").write_bytes(b"PAR1 not a parquet file PAR1")


def _truncated_checkpoint(ld: Path) -> None:
    v = json.loads((ld / "_last_checkpoint").read_text())["version"]
    f = ld / f"{v:020d}.checkpoint.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _missing_checkpoint(ld: Path) -> None:
    v = json.loads((ld / "_last_checkpoint").read_text())["version"]
    (ld / f"{v:020d}.checkpoint.parquet").unlink()


def _stray_after_gap(ld: Path) -> None:
    newest = max(int(p.name[:20]) for p in ld.glob("*.json"))
    stray = {"add": {"path": "target_slug=x-0000000000000000/part-1-00.parquet", "partitionValues": {},
                     "size": 1, "modificationTime": 0, "dataChange": True}}
    (ld / f"{newest + 2:020d}.json").write_text(json.dumps(stray) + "\n")


def _outside_path(ld: Path) -> None:
    newest = max(int(p.name[:20]) for p in ld.glob("*.json"))
    add = {"add": {"path": "../../elsewhere/part.parquet", "partitionValues": {}, "size": 1,
                   "modificationTime": 0, "dataChange": True}}
    (ld / f"{newest + 1:020d}.json").write_text(json.dumps(add) + "\n")


def _truncated_newest(ld: Path) -> None:
    newest = sorted(ld.glob("*.json"))[-1]
    newest.write_text(newest.read_text()[:40])


DAMAGE = {"garbage checkpoint": _garbage_checkpoint, "truncated checkpoint": _truncated_checkpoint,
          "missing checkpoint": _missing_checkpoint, "stray version after a gap": _stray_after_gap,
          "version naming a file outside": _outside_path, "truncated newest version": _truncated_newest}


def _outside_ids(db: Path) -> dict[str, list[str]]:
    dt = deltalake.DeltaTable(str(db / "records"))
    ds = dt.to_pyarrow_dataset()
    return {"deltalake": dt.to_pyarrow_table(columns=["record_id"]).column("record_id").to_pylist(),
            "polars": pl.read_delta(str(db / "records"), columns=["record_id"])["record_id"].to_list(),
            "duckdb": [r[0] for r in duckdb.from_arrow(ds).select("record_id").fetchall()]}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300, cwd=TESTS)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_outside_readers_read_again_after_tunedb_opens_and_commits(tmp_path, kind):
    db = _make(tmp_path)
    ld = db / "records" / "_delta_log"
    for f in ld.iterdir():  # (aged: the repair does not wait for a writer that may be mid-write)
        os.utime(f, (0, 0))
    DAMAGE[kind](ld)
    p = _run(str(TUNEDB), "--db", str(db), "stats", "--json")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    code = ("import sys; sys.path.insert(0, '.'); from outside_workers import records; "
            "from tunedb.index import ParquetStore; h = ParquetStore.open(sys.argv[1]); "
            "h.commit(records('repaired', 30)); h.close()")
    p = _run(sys.executable, "-c", code, str(db))
    assert p.returncode == 0, p.stderr
    with ParquetStore.open(db) as h:
        mine = sorted(h.records(columns=["record_id"]).column("record_id").to_pylist())
    assert len(mine) == 4 * 150 + 90 + 30
    for reader, ids in _outside_ids(db).items():
        assert sorted(ids) == mine, reader
