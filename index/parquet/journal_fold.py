"""Journals as record tables: what the store reads from, and folds out of, its journals.

``index.journal`` is the file format (checksummed lines, torn-tail handling, the ownership
``flock``); this module is the store's side of it:

* ``journal_row`` turns a Record into a journal row (the record columns plus what the store
  adds; times as integer microseconds since the epoch), ``journal_table`` turns rows back into
  a ``RECORD_SCHEMA`` table, ``read_journal`` reads a journal as one table per target.
* ``list_journals`` lists the journals of a DB and removes temp files of dead writers;
  ``scan_journals`` re-reads the journals that grew since the last scan.
* ``fold_journal`` writes a journal's rows as Parquet part files and only then deletes it
  (a crash in between leaves both; readers de-duplicate by record_id).
  ``fold_abandoned`` folds the journals whose writer is gone (their lock can be taken).

Units: ``*_us`` values are integer microseconds since the epoch (UTC).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tunedb.index.keys import rid_hash
from tunedb.index.parquet.fsutil import fsync_dir, remove_dead_temp
from tunedb.index.parquet.journal import SUFFIX, read_rows, try_lock_abandoned
from tunedb.index.parquet.parts import EPOCH, split_by_target, target_file_meta, target_slug
from tunedb.index.record import Record
from tunedb.index.schema import RECORD_SCHEMA

# journal rows hold timestamps as integers (microseconds); the cast to RECORD_SCHEMA makes them
# timestamps again
_JOURNAL_SCHEMA = pa.schema([pa.field(f.name, pa.int64()) if f.name in ("timestamp", "committed") else f
                             for f in RECORD_SCHEMA])


def journal_table(rows: list[dict]) -> pa.Table:
    """Journal rows as a RECORD_SCHEMA table (timestamps are integer microseconds there)."""
    t = pa.Table.from_pylist(rows, schema=_JOURNAL_SCHEMA)
    return t.cast(RECORD_SCHEMA)


def journal_row(r: Record, committed_us: int, session: str) -> dict:
    """``Record.to_row`` plus what the store adds, JSON-ready (times in integer microseconds);
    ``session`` stands in for a record that has none."""
    row = r.to_row()
    row.update(timestamp=(r.timestamp - EPOCH) // _dt.timedelta(microseconds=1),
               session=r.session or session, target_slug=target_slug(r.target_name, r.target_key),
               rid_hash=rid_hash(r.record_id), committed=committed_us)
    return row


def read_journal(path: Path) -> list[tuple[str, pa.Table]]:
    """(target_key, its rows) of the complete rows of journal ``path`` (a torn tail is ignored)."""
    return split_by_target(journal_table(read_rows(path)))


#: journal path -> (bytes read, chunk keys of its rows): what ``scan_journals`` read last time
JournalState = dict[str, tuple[int, list[str]]]


def scan_journals(journal_dir: Path, state: JournalState
                  ) -> tuple[JournalState, list[str], list[tuple[str, str, pa.Table]]]:
    """Read again every journal whose size changed since ``state`` (journals only grow until
    they are folded and deleted).  Returns (the new state, chunk keys of changed journals that
    are no longer valid, the new chunks as (chunk key, target_key, rows)); a chunk key is
    ``<journal path>::<target_key>``.  FileNotFoundError: a journal was folded meanwhile (the
    caller retries; nothing is returned half-done)."""
    new_state: JournalState = {}
    stale: list[str] = []
    fresh: list[tuple[str, str, pa.Table]] = []
    for jp in list_journals(journal_dir):
        size = jp.stat().st_size
        old = state.get(str(jp))
        if old is not None and old[0] == size:
            new_state[str(jp)] = old
            continue
        if old is not None:
            stale.extend(old[1])
        ck = []
        for tkey, group in read_journal(jp):
            ck.append(f"{jp}::{tkey}")
            fresh.append((ck[-1], tkey, group))
        new_state[str(jp)] = (size, ck)
    return new_state, stale, fresh


def list_journals(journal_dir: Path) -> list[Path]:
    """The journals in ``journal_dir``, sorted; temp files of writers that are gone are removed
    on the way (a journal is created under a temp name, locked, then renamed)."""
    try:
        with os.scandir(journal_dir) as it:
            names = [e.name for e in it]
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        if n.startswith("_tmp-"):
            remove_dead_temp(journal_dir / n)
        elif n.endswith(SUFFIX):
            out.append(journal_dir / n)
    return sorted(out)


def fold_journal(path: Path, write: Callable[[str, pa.Table, dict[bytes, bytes]], Path]) -> None:
    """Write the rows of journal ``path`` as Parquet part files, one per target, through
    ``write(slug, table, file metadata)`` (which publishes durably), then delete the journal
    and fsync its directory.  A crash in between leaves both; readers de-duplicate by
    record_id."""
    for tkey, group in read_journal(path):
        name, tj = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
        write(target_slug(name, tkey), group, target_file_meta(tkey, name, tj))
    path.unlink()
    fsync_dir(path.parent)


def fold_abandoned(journal_dir: Path, own: Path | None, fold: Callable[[Path], None]) -> None:
    """``fold(path)`` each journal but ``own`` whose writer is gone, holding its lock meanwhile
    (so two processes never fold the same journal).  A journal that cannot be folded (a
    read-only DB) is left as it is: readers read it in place."""
    for jp in list_journals(journal_dir):
        if jp == own:
            continue
        fd = try_lock_abandoned(jp)
        if fd is None:
            continue
        try:
            fold(jp)
        except OSError:
            pass  # a read-only DB: the journal is read as it is
        finally:
            os.close(fd)
