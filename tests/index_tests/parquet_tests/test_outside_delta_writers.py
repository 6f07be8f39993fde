"""Outside Delta writers change ``DB/records`` and tunedb follows; it never deletes data to do so.

Each test builds a DB with tunedb (a few thousand records over three targets, several files per
target), changes the table with the real ``deltalake`` writer (optimize.compact, delete, append,
vacuum, restore) or by hand (a log version that removes every file, a truncated newest version),
then opens it with tunedb, reads, commits and compacts.  After every step tunedb's record count
equals what Delta readers read, and no committed record is lost: every id tunedb committed is
still readable (from tunedb and from Delta; after a hand-written removal, after Delta's restore).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tunedb.index import ParquetStore
from tunedb.index.parquet import deltalog, parts
from tunedb.index.parquet.deltalog import CorruptLogError, LogConflictError
from tunedb.index.parquet.store import DeltaLogWarning

from outside_workers import TARGETS, WORKLOAD, records

assert WORKLOAD == {"family": "matmul", "M": 32, "N": 32, "K": 32}  # (the CLI spells it below)

BASE = 2_100  # records in the base DB: 3 targets x 700
TUNEDB = Path(sys.executable).with_name("tunedb")


def make_db(root: Path) -> tuple[Path, set[str]]:
    """A DB with BASE records in 3 commits per target (9 files); returns it and their ids."""
    db = root / "db"
    ids: set[str] = set()
    with ParquetStore.open(db) as h:
        for i in range(3):
            rs = records(f"base-{i}", BASE // 3, i)
            h.commit(rs)
            ids |= {r.record_id for r in rs}
    return db, ids


def delta_ids(db: Path, version: int | None = None) -> list[str]:
    """The record ids Delta readers read from ``db/records`` (a list: duplicates show)."""
    dt = deltalake.DeltaTable(str(db / "records"), version=version)
    return dt.to_pyarrow_table(columns=["record_id"]).column("record_id").to_pylist()


def tunedb_ids(db: Path, **kw) -> list[str]:
    with ParquetStore.open(db, **kw) as h:
        return h.records(columns=["record_id"]).column("record_id").to_pylist()


def data_files(db: Path) -> set[Path]:
    return set((db / "records").rglob("*.parquet")) - set((db / "records" / "_delta_log").rglob("*"))


def removed_by(db: Path, version: int) -> list[str]:
    """The paths log version ``version`` removes."""
    text = (db / "records" / "_delta_log" / f"{version:020d}.json").read_text()
    return [a["remove"]["path"] for a in map(json.loads, text.splitlines()) if "remove" in a]


def agree(db: Path) -> set[str]:
    """Open with tunedb: its records equal Delta's (same ids, no duplicates); returns them."""
    mine = tunedb_ids(db)
    theirs = delta_ids(db)
    assert len(mine) == len(set(mine))
    assert len(theirs) == len(set(theirs)), f"Delta reads {len(theirs) - len(set(theirs))} rows twice"
    assert len(mine) == len(theirs) and set(mine) == set(theirs), (len(mine), len(theirs))
    return set(mine)


def write_and_compact(db: Path, tag: str) -> set[str]:
    """A tunedb read, commit (journal and file) and compact; returns the ids committed."""
    new = records(tag, 300, 1) + records(f"{tag}-j", 5, 2)
    with ParquetStore.open(db) as h:
        assert h.best_costs(TARGETS[0], WORKLOAD, k=1)
        h.commit(new[:300])
        for r in new[300:]:
            h.commit(r)
        h.compact()
    return {r.record_id for r in new}


def test_outside_compact_then_tunedb_deletes_nothing_delta_needs(tmp_path):
    db, ids = make_db(tmp_path)
    before = data_files(db)
    dt = deltalake.DeltaTable(str(db / "records"))
    v = dt.version()
    dt.optimize.compact()
    assert len(delta_ids(db)) == BASE
    assert agree(db) == ids
    assert before <= data_files(db), "tunedb deleted files an outside compaction removed (theirs to vacuum)"
    assert sorted(delta_ids(db, version=v)) == sorted(ids)  # Delta's time travel still reads them
    ids |= write_and_compact(db, "after-compact")
    assert agree(db) == ids


def test_outside_delete_of_one_record_removes_that_record_only(tmp_path):
    db, ids = make_db(tmp_path)
    victim = sorted(ids)[0]
    dt = deltalake.DeltaTable(str(db / "records"))
    v = dt.version()
    dt.delete(f"record_id = '{victim}'")
    assert len(delta_ids(db)) == BASE - 1
    assert agree(db) == ids - {victim}
    assert victim in delta_ids(db, version=v)  # the file the delete removed is still there to restore
    ids = (ids - {victim}) | write_and_compact(db, "after-delete")
    assert agree(db) == ids
    removed = removed_by(db, v + 1)
    assert removed and all((db / "records" / p).exists() for p in removed), "tunedb deleted the delete's input"


def test_outside_append_is_read(tmp_path):
    db, ids = make_db(tmp_path)
    other = tmp_path / "other"
    extra = records("appended", 4, 3) + [r for r in records("appended-new-target", 3, 0)
                                         if r.target_name == TARGETS[0]["name"]]
    with ParquetStore.open(other) as h:
        h.commit(extra)
        table = h.records()
    deltalake.write_deltalake(str(db / "records"), table, mode="append")
    assert len(delta_ids(db)) == BASE + len(extra)
    assert agree(db) == ids | {r.record_id for r in extra}
    with ParquetStore.open(db) as h:  # the appended rows answer lookups
        r = extra[0]
        assert h.lookup(r.target, r.workload, r.config).record_id == r.record_id
    ids |= {r.record_id for r in extra} | write_and_compact(db, "after-append")
    assert agree(db) == ids


@pytest.mark.parametrize("when", ["before-tunedb-opens", "after-tunedb-adopted"])
def test_outside_compact_and_vacuum(tmp_path, when):
    db, ids = make_db(tmp_path)
    dt = deltalake.DeltaTable(str(db / "records"))
    dt.optimize.compact()
    if when == "after-tunedb-adopted":
        assert agree(db) == ids
    deltalake.DeltaTable(str(db / "records")).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                     dry_run=False)
    assert agree(db) == ids
    ids |= write_and_compact(db, "after-vacuum")
    assert agree(db) == ids
    deltalake.DeltaTable(str(db / "records")).vacuum(retention_hours=0, enforce_retention_duration=False,
                                                     dry_run=False)
    assert agree(db) == ids


def test_hand_written_version_that_removes_every_file_is_followed_and_undone_by_restore(tmp_path):
    db, ids = make_db(tmp_path)
    ld = db / "records" / "_delta_log"
    dt = deltalake.DeltaTable(str(db / "records"))
    v = dt.version()
    files = data_files(db)
    lines = [json.dumps({"remove": {"path": os.path.relpath(f, db / "records"), "dataChange": True,
                                    "deletionTimestamp": 0}}) for f in sorted(files)]
    (ld / f"{v + 1:020d}.json").write_text("\n".join(lines) + "\n")
    assert delta_ids(db) == []
    assert agree(db) == set()  # tunedb follows the log ...
    assert files <= data_files(db), "tunedb deleted files a hand-written log version removed"
    with ParquetStore.open(db) as h:  # ... and writes and compacts on top of it
        h.commit(records("on-top", 10, 0))
        h.compact()
    on_top = {r.record_id for r in records("on-top", 10, 0)}
    assert agree(db) == on_top
    assert files <= data_files(db)
    # nothing was lost: Delta's restore brings every committed record back, in both views
    deltalake.DeltaTable(str(db / "records")).restore(v)
    assert set(delta_ids(db)) == ids
    assert agree(db) == ids
    ids |= write_and_compact(db, "after-restore")
    assert agree(db) == ids


def test_corrupt_newest_version_is_named_moved_aside_and_the_log_rebuilt(tmp_path):
    db, ids = make_db(tmp_path)
    ld = db / "records" / "_delta_log"
    newest = sorted(ld.glob("*.json"))[-1]
    text = newest.read_text()
    newest.write_text(text[: len(text) // 2])  # a truncated last version
    old = os.stat(newest).st_mtime - 60
    os.utime(newest, (old, old))
    # a read-only handle changes nothing: it reads tunedb's files and says what is wrong, in one line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert set(tunedb_ids(db, read_only=True)) == ids
    notes = [str(w.message) for w in caught if issubclass(w.category, DeltaLogWarning)]
    assert len(notes) == 1 and "\n" not in notes[0] and str(newest) in notes[0], notes
    assert newest.read_text() == text[: len(text) // 2]
    with pytest.raises(CorruptLogError) as e:
        deltalog.read_state(db / "records")
    assert str(newest) in str(e.value) and "\n" not in str(e.value)
    # the writable open moves it aside and rebuilds: nothing committed is lost, Delta reads it all
    assert agree(db) == ids
    aside = [p for p in ld.iterdir() if p.name.startswith(newest.name + ".corrupt-")]
    assert len(aside) == 1 and aside[0].read_text() == text[: len(text) // 2]
    ids |= write_and_compact(db, "after-repair")
    assert agree(db) == ids


def test_corrupt_middle_version_moves_the_log_aside_and_rebuilds_it(tmp_path):
    db, ids = make_db(tmp_path)
    ld = db / "records" / "_delta_log"
    middle = sorted(ld.glob("*.json"))[1]
    middle.write_text('{"add": {"path": "tar')
    os.utime(middle, (0, 0))
    with pytest.raises(Exception, match="Json error"):  # (Delta readers cannot read it either)
        delta_ids(db)
    p = subprocess.run([str(TUNEDB), "--db", str(db), "stats", "--json"], capture_output=True, text=True,
                       timeout=120)  # the next tunedb command (a new process: it replays the log)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["records"] == len(ids)
    assert agree(db) == ids
    assert any(p.name.startswith("_delta_log.corrupt-") for p in (db / "records").iterdir())
    ids |= write_and_compact(db, "after-rebuild")
    assert agree(db) == ids


def test_cli_after_an_outside_compact_deletes_nothing_delta_needs(tmp_path):
    db, ids = make_db(tmp_path)
    deltalake.DeltaTable(str(db / "records")).optimize.compact()
    before = data_files(db)
    for cmd in (["best", "--json", "--target", TARGETS[0]["name"], "--workload", "matmul:M=32,N=32,K=32"],
                ["stats", "--json"]):
        p = subprocess.run([str(TUNEDB), "--db", str(db), *cmd], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
    stats = json.loads(p.stdout)
    assert before <= data_files(db)
    assert len(delta_ids(db)) == BASE == stats["records"]
    assert set(delta_ids(db)) == ids


def test_a_rewrite_racing_an_outside_delete_logs_nothing_and_keeps_every_file(tmp_path):
    db, ids = make_db(tmp_path)
    records_dir = db / "records"
    d = parts.partition_dirs(records_dir)[0]
    inputs = sorted(d.glob("part-*.parquet"))
    deferred: list[parts.Rewrite] = []
    parts.rewrite_partition(records_dir, d, None, deferred=deferred)  # published, not logged yet
    victim = pq.read_table(inputs[0], columns=["record_id"]).column("record_id")[0].as_py()
    deltalake.DeltaTable(str(records_dir)).delete(f"record_id = '{victim}'")  # meanwhile, outside
    with pytest.raises(LogConflictError, match="outside Delta writer") as e:
        parts.finish_rewrites(records_dir, deferred, "OPTIMIZE")
    assert "\n" not in str(e.value)
    assert deferred[0].output is not None and not deferred[0].output.exists()  # the rewrite is undone
    assert all(f.exists() for f in inputs)
    assert agree(db) == ids - {victim}


def _outside_append_is_refused(db, table, says: str) -> int:
    """Append ``table`` to ``db``'s records with the real Delta writer, then check that tunedb's
    writable open refuses it in one line naming ``says`` and a .parquet file, changing no data
    file and no log file; returns the table version before the append (to restore)."""
    v = deltalake.DeltaTable(str(db / "records")).version()
    deltalake.write_deltalake(str(db / "records"), table, mode="append")
    files = data_files(db)
    log = sorted(os.listdir(db / "records" / "_delta_log"))
    with pytest.raises(ValueError) as e:
        ParquetStore.open(db)
    msg = str(e.value)
    assert "\n" not in msg and says in msg and ".parquet" in msg, msg
    assert data_files(db) == files and sorted(os.listdir(db / "records" / "_delta_log")) == log
    return v


def test_outside_rows_that_cannot_be_records_are_refused_in_one_line_and_change_nothing(tmp_path):
    db, ids = make_db(tmp_path)
    with ParquetStore.open(tmp_path / "other") as h:
        h.commit(records("bad", 3, 0))
        table = h.records()
    table = table.set_column(table.schema.get_field_index("target_key"), "target_key",
                             pa.nulls(table.num_rows, pa.string()))
    v = _outside_append_is_refused(db, table, "no target_key")
    with warnings.catch_warnings(record=True) as caught:  # read-only: tunedb's records, and a note
        warnings.simplefilter("always")
        assert set(tunedb_ids(db, read_only=True)) == ids
    assert any(issubclass(w.category, DeltaLogWarning) for w in caught)
    deltalake.DeltaTable(str(db / "records")).restore(v)  # the documented way out: undo it with Delta
    assert agree(db) == ids


def test_a_commit_that_meets_a_log_corrupted_meanwhile_repairs_it_and_succeeds(tmp_path):
    db, ids = make_db(tmp_path)
    new = records("meanwhile", 500, 2)
    with ParquetStore.open(db) as h:
        newest = sorted((db / "records" / "_delta_log").glob("*.json"))[-1]
        newest.write_text(newest.read_text()[:40])
        os.utime(newest, (0, 0))
        assert h.commit(new) == len(new)
        assert len(h) == len(ids) + len(new)
    assert agree(db) == ids | {r.record_id for r in new}


@pytest.mark.parametrize("column, value, says", [("config", '{"tile":"\\udcff"}', "surrogate"),
                                                 ("status", "exploded", "status")])
def test_outside_rows_a_commit_would_refuse_are_refused_and_change_nothing(tmp_path, column, value, says):
    """An outside append of rows that tunedb's own commit refuses (here a config whose JSON
    escapes a lone surrogate, which would make every later read fail, or an unknown status) is
    refused by the writable open in one line naming the file, and nothing changes."""
    db, ids = make_db(tmp_path)
    with ParquetStore.open(tmp_path / "other") as h:
        h.commit(records("bad", 3, 0))
        table = h.records()
    table = table.set_column(table.schema.get_field_index(column), column,
                             pa.array([value] * table.num_rows, pa.string()))
    v = _outside_append_is_refused(db, table, says)
    deltalake.DeltaTable(str(db / "records")).restore(v)
    assert agree(db) == ids
