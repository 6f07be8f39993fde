"""Journals as record tables: what the store reads from, and folds out of, its journals.

``tunedb.index.parquet.journal`` is the file format (checksummed lines, torn-tail handling, the ownership
``flock``); this module is the store's side of it:

* ``journal_row`` turns a Record into a journal row (the record columns plus what the store
  adds; times as integer microseconds since the epoch), ``journal_table`` turns rows back into
  a ``RECORD_SCHEMA`` table, ``read_journal`` reads a journal as one table per target.
* ``list_journals`` lists the journals of a DB and removes temp files of dead writers;
  ``scan_journals`` re-reads the journals that changed since the last scan.
* ``fold_journal`` writes a journal's rows as Parquet part files and only then deletes it.
  It is idempotent: each target's file has a name derived from the journal
  (``parts.fold_part_name``), and a file already published by an earlier, interrupted fold of
  the same journal (or already merged into a compacted file) is not written again, so neither
  tunedb nor a plain Parquet reader ever sees a journal's rows twice.  A journal holding lines
  it could not read (corruption; see ``tunedb.index.parquet.journal``) is never deleted: once its good rows
  are folded it is renamed to ``<name>.corrupt`` and kept for inspection.
  ``fold_abandoned`` folds the journals whose writer is gone (their lock can be taken).

Units: ``*_us`` values are integer microseconds since the epoch (UTC).
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import Record
from tunedb.index.model.schema import RECORD_SCHEMA, SCHEMA2_COLUMNS
from tunedb.index.parquet.journal import SUFFIX, JournalWarning, read_contents, try_lock_abandoned
from tunedb.index.parquet.parts import (
    EPOCH,
    PartSpec,
    fold_part_name,
    publish_parts,
    split_by_target,
    superseded_by,
    target_file_meta,
    target_slug,
)
from tunedb.index.support.fsutil import fsync_dir, remove_dead_temp

#: suffix a journal with unreadable lines gets once its good rows are folded (it is kept)
CORRUPT_SUFFIX = ".corrupt"
#: errno values meaning "this DB cannot be written here" (a read-only DB: journals are read in place)
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)

# journal rows hold timestamps as integers (microseconds); the cast to RECORD_SCHEMA makes them
# timestamps again
_JOURNAL_SCHEMA = pa.schema([pa.field(f.name, pa.int64()) if f.name in ("timestamp", "committed") else f
                             for f in RECORD_SCHEMA])


def journal_table(rows: list[dict]) -> pa.Table:
    """Journal rows as a RECORD_SCHEMA table (timestamps are integer microseconds there).  Rows
    of a schema-1 journal (written by tunedb 0.1.0) have no ``host``/``origin``: they read as
    ``""`` (unknown)."""
    t = pa.Table.from_pylist(rows, schema=_JOURNAL_SCHEMA).cast(RECORD_SCHEMA)
    for name in SCHEMA2_COLUMNS:
        c = t.column(name)
        if c.null_count:
            t = t.set_column(t.schema.get_field_index(name), RECORD_SCHEMA.field(name), pc.fill_null(c, ""))
    return t


def journal_row(r: Record, committed_us: int) -> dict:
    """``Record.to_row`` plus what the store adds, JSON-ready (times in integer microseconds).
    The record's own ``session`` is kept (a copied record stays as it was)."""
    row = r.to_row()
    row.update(timestamp=(r.timestamp - EPOCH) // _dt.timedelta(microseconds=1),
               session=r.session, target_slug=target_slug(r.target_name, r.target_key),
               rid_hash=rid_hash(r.record_id), committed=committed_us)
    return row


def read_journal(path: Path) -> list[tuple[str, pa.Table]]:
    """(target_key, its rows) of the complete rows of journal ``path`` (a torn tail is ignored,
    a corrupt line elsewhere reported and skipped: see ``tunedb.index.parquet.journal.read_contents``)."""
    return split_by_target(journal_table(read_contents(path).rows))


#: journal path -> ((size, mtime in ns) read, chunk keys of its rows): what ``scan_journals``
#: read last time
JournalState = dict[str, tuple[tuple[int, int], list[str]]]


def scan_journals(journal_dir: Path, state: JournalState
                  ) -> tuple[JournalState, list[str], list[tuple[str, str, pa.Table]]]:
    """Read again every journal whose size or mtime changed since ``state`` (a journal grows
    with each commit, and shrinks back when an append fails and is undone).  Returns (the new
    state, chunk keys of changed journals that are no longer valid, the new chunks as (chunk
    key, target_key, rows)); a chunk key is ``<journal path>::<target_key>``.
    FileNotFoundError: a journal was folded meanwhile (the caller retries; nothing is
    returned half-done)."""
    new_state: JournalState = {}
    stale: list[str] = []
    fresh: list[tuple[str, str, pa.Table]] = []
    for jp in list_journals(journal_dir):
        st = jp.stat()
        sig = (st.st_size, st.st_mtime_ns)
        old = state.get(str(jp))
        if old is not None and old[0] == sig:
            new_state[str(jp)] = old
            continue
        if old is not None:
            stale.extend(old[1])
        ck = []
        for tkey, group in read_journal(jp):
            ck.append(f"{jp}::{tkey}")
            fresh.append((ck[-1], tkey, group))
        new_state[str(jp)] = (sig, ck)
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


def _already_folded(final: Path, check_superseded: bool) -> bool:
    """Whether fold file ``final`` is already published, or (``check_superseded``) was published
    and then merged into a compacted file of its partition."""
    if final.exists():
        return True
    if not check_superseded:
        return False
    try:
        names = sorted(n for n in os.listdir(final.parent) if n.startswith("cpart-"))
    except FileNotFoundError:
        return False
    return final.name in superseded_by(final.parent, names)


def fold_journal(path: Path, records_dir: Path, *, recovering: bool = False) -> list[Path]:
    """Write the rows of journal ``path`` as Parquet part files, one per target, durably and
    idempotently (see module docstring), then delete the journal and fsync its directory;
    returns the files this call published.

    ``recovering``: the journal's writer is gone and an earlier fold may have been cut short,
    so a file of it already merged into a compacted file counts as folded too (the caller
    holds the DB lock shared, so no compaction runs meanwhile).  A crash at any point leaves
    the journal or its files or both, never a row twice in Parquet; readers de-duplicate the
    journal against the files by record_id.  On a write failure (ENOSPC) the error is raised
    and the journal stays.  A journal with corrupt lines is renamed ``<name>.corrupt``
    (``JournalWarning``), never deleted; a torn last line (a commit cut short by a crash,
    never acknowledged) is dropped with a ``JournalWarning``."""
    contents = read_contents(path, warn=False)
    specs = []
    for tkey, group in split_by_target(journal_table(contents.rows)):
        name, tj = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
        first_us = pc.min(group.column("committed").cast(pa.int64())).as_py()
        specs.append(PartSpec(target_slug(name, tkey), group, target_file_meta(tkey, name, tj), "part",
                              fold_part_name(path.name, tkey, first_us)))
    published = publish_parts(records_dir, specs, skip=lambda final: _already_folded(final, recovering))
    if contents.bad:
        kept = path.with_name(path.name + CORRUPT_SUFFIX)
        os.rename(path, kept)
        warnings.warn(f"journal {path}: {len(contents.bad)} corrupt line(s) (line "
                      f"{', '.join(map(str, contents.bad[:10]))}) could not be read; its {len(contents.rows)} "
                      f"good rows are folded and the file is kept as {kept.name}", JournalWarning, stacklevel=2)
    else:
        if contents.torn_tail:
            warnings.warn(f"journal {path}: ignored a torn last line (a commit cut short by a crash; it never "
                          f"returned)", JournalWarning, stacklevel=2)
        path.unlink()
    fsync_dir(path.parent)
    return [p for p in published if p is not None]


def fold_abandoned(journal_dir: Path, own: Path | None, fold: Callable[[Path], None], *,
                   strict: bool = False) -> None:
    """``fold(path)`` each journal but ``own`` whose writer is gone, holding its lock meanwhile
    (so two processes never fold the same journal).  A journal that cannot be folded because
    the DB is read-only (EROFS, EACCES, EPERM) is left as it is: readers read it in place.
    Any other OSError (ENOSPC, EIO) is raised when ``strict``, else reported as a
    ``JournalWarning`` and the journal left for a later fold; either way the journal stays
    whole."""
    for jp in list_journals(journal_dir):
        if jp == own:
            continue
        fd = try_lock_abandoned(jp)
        if fd is None:
            continue
        try:
            fold(jp)
        except FileNotFoundError:
            pass  # folded by another process between listing and locking
        except OSError as e:
            if e.errno in READ_ONLY_ERRNOS:
                continue
            if strict:
                raise
            warnings.warn(f"could not fold journal {jp} ({e}); it stays and is read in place",
                          JournalWarning, stacklevel=2)
        finally:
            os.close(fd)
