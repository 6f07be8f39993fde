"""One handle's side of the write-ahead journals: its own writer, and what it read of every journal.

``tunedb.index.parquet.journal`` is the file format and the group-committing ``JournalWriter``;
``tunedb.index.parquet.journal_fold`` reads journals as record tables and folds them into Parquet.
This module is the state a store handle keeps between those calls (``Journals``):

* ``writer``: the handle's own journal, opened on the first small commit (``enqueue``), a new one
  after an append that could not be undone (``broken``) or in a forked child (a child never
  appends to its parent's journal);
* ``state``: the size and chunk keys of each journal as last read (``scan``);
* folding: the handle's own journal (``fold_own``, ``fold_own_if_full``) and those whose writer
  is gone (``fold_abandoned``).

Durability: a record queued by ``enqueue`` is durable once ``JournalWriter.wait`` returns for its
ticket (written and fsync'ed, shared with the other threads committing at the same time).  A fold
writes the journal's rows as Parquet part files (durably) before it deletes the journal, and is
idempotent, so a crash at any point loses and doubles nothing (see ``journal_fold``).

Locking: ``Journals`` is not thread-safe: every method expects the store's handle lock held.
``fold(recovering=True)`` (and so ``fold_abandoned``) takes the DB lock (``_lock`` file) shared
itself, so that a re-fold and a compaction never interleave.  Each fold reports the part files
it published through the ``published`` callback the caller passes (the store counts them toward
automatic compaction); the callback is an argument, never stored, so the handle and its
``Journals`` form no reference cycle (a dropped handle folds its journal at once, in ``__del__``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from tunedb.index.model.record import Record
from tunedb.index.parquet import journal_fold
from tunedb.index.parquet.journal import JournalWriter
from tunedb.index.parquet.journal_fold import journal_row
from tunedb.index.support.fsutil import file_lock

#: called with each Parquet part file a fold published
Published = Callable[[Path], None]

#: what a scan found: (chunk keys no longer valid, new chunks as (key, target_key, rows), live chunk keys)
JournalScan = tuple[list[str], list[tuple[str, str, pa.Table]], set[str]]


class Journals:
    """The journals of one DB as one handle sees them (see module docstring)."""

    def __init__(self, journal_dir: Path, records_dir: Path, db_lock: Path):
        self.dir = journal_dir
        self.records_dir = records_dir
        self.db_lock = db_lock  # the DB's advisory lock file (taken shared when recovering)
        self.writer: JournalWriter | None = None
        self.state: journal_fold.JournalState = {}  # journal path -> (size read, chunk keys)

    # ------------------------------------------------------------------ reading
    def scan(self) -> JournalScan:
        """(Re)read every journal that changed since the last scan (``journal_fold.scan_journals``).
        FileNotFoundError: a journal was folded meanwhile (nothing changes; the refresh retries)."""
        state, stale, fresh = journal_fold.scan_journals(self.dir, self.state)
        self.state = state
        live = {k for _, keys in state.values() for k in keys}
        return stale, fresh, live

    # ------------------------------------------------------------------ appending
    def open_here(self) -> bool:
        """Whether this process holds an open, usable journal (a commit may append at once)."""
        j = self.writer
        return j is not None and not j.broken and j.pid == os.getpid()

    def writable(self) -> bool:
        """Whether a small commit may go to a journal (one is open, or the directory is writable)."""
        if self.writer is not None:
            return True
        return self.dir.is_dir() and os.access(self.dir, os.W_OK)

    def enqueue(self, recs: list[Record], committed: int) -> tuple:
        """Queue ``recs`` on this handle's journal (opened on first use; a new one after an
        append that could not be undone); returns (journal, ticket) for ``JournalWriter.wait``,
        which the caller calls outside the handle lock (group commit)."""
        j = self.writer
        if j is not None and j.broken and j.pid == os.getpid():
            self.writer = None
            j.close()  # retired: folded by whoever finds it abandoned
            j = None
        if j is None or j.pid != os.getpid():  # (a forked child never appends to its parent's)
            j = self.writer = JournalWriter(self.dir)
        return j, j.enqueue([journal_row(r, committed) for r in recs])

    # ------------------------------------------------------------------ folding
    def fold(self, path: Path, published: Published, recovering: bool = False) -> None:
        """Fold journal ``path`` into Parquet part files, then delete it (see ``fold_journal``).
        ``recovering`` (a journal whose writer is gone): under the DB lock, shared, so that a
        re-fold after an interrupted fold and a compaction never interleave.  OSError when it
        cannot write (the journal stays)."""
        if recovering:
            with file_lock(self.db_lock, shared=True):
                written = journal_fold.fold_journal(path, self.records_dir, recovering=True)
        else:
            written = journal_fold.fold_journal(path, self.records_dir)
        for f in written:
            published(f)

    def fold_own(self, published: Published) -> None:
        """Fold this handle's journal (if any) and close it; the next small commit opens a new
        one.  A journal of the parent process (after a fork) is only closed here, never folded.
        OSError when the fold cannot write: the journal, closed, stays for whoever finds it
        abandoned."""
        j, self.writer = self.writer, None
        if j is None:
            return
        try:
            if j.pid == os.getpid():
                j.flush()  # appends queued by threads still waiting are in the file before it is folded
                self.fold(j.path, published)
        finally:
            j.close()

    def fold_own_if_full(self, threshold: int, published: Published) -> None:
        """``fold_own`` once the journal holds ``threshold`` records.  Its records are durable
        already, so a failure (a full disk) is not the commit's: it is swallowed, and the
        journal, closed, stays for a later fold by whoever finds it abandoned."""
        j = self.writer
        if j is not None and j.records >= threshold:
            try:
                self.fold_own(published)
            except OSError:
                pass

    def fold_abandoned(self, published: Published, *, strict: bool = False) -> None:
        """Fold the journals of writers that are gone (``strict``: raise OSError when one cannot
        be written, else warn and leave it; see ``journal_fold.fold_abandoned``).  The caller
        decides whether the DB may be written at all (an older schema's or a read-only handle's
        journals are read in place)."""
        own = self.writer.path if self.writer is not None else None
        journal_fold.fold_abandoned(self.dir, own, lambda p: self.fold(p, published, recovering=True), strict=strict)
