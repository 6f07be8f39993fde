"""The record store: a directory of Parquet files, hive-partitioned by target.

Layout of a DB directory::

    tunedb.json                         marker (format, schema version)
    records/target_slug=<slug>/part-<ns>-<id>.parquet    one file per commit and target
    records/target_slug=<slug>/cpart-<ns>-<id>.parquet   compacted files (list what they supersede)
    records/_delta_log/                 the Delta Lake log of the live files (outside readers)
    journal/<host>-<pid>-<id>.jsonl     write-ahead journals of small commits (see tunedb.index.parquet.journal)
    invalidations/part-*.parquet        (target_key, invalidated_at): stale-marking, append-only
    verdicts/part-*.parquet             (record_id, verdict, marked_at): see tunedb.index.parquet.verdicts
    runs/<run_id>.json                  tuning-run summaries, one file per run (tunedb.index.parquet.runs)
    derived/                            rebuildable caches (vector index, ...)
    _lock                               advisory lock held by compaction and other rewrites

Contract
--------
* ``commit`` validates every record first (ValueError naming field and record; nothing
  written).  Up to ``JOURNAL_MAX`` records are appended to the handle's journal and fsync'ed;
  more are written as one new file per target under a name readers ignore (``_tmp-``),
  fsynced, renamed into place, directory fsynced.  Either way durable when it returns.
  A ``RecordBatch`` (tunedb.index.model.batch) is the columnar bulk form; large commits are indexed in
  memory at the next query rather than in ``commit``.
  Writers never modify a published file, so any number of processes may append to one
  DB without a lock.
* All-or-nothing: a commit that raises (OSError such as ENOSPC on a full disk) leaves nothing
  of itself behind -- a failed journal append is truncated away (``tunedb.index.parquet.journal``), the
  files of a larger commit are all written before any is renamed into place
  (``parts.publish_parts``) -- and the handle stays usable: once there is room again the next
  commit succeeds and every acknowledged record is still there.  Work a commit does after
  its records are durable (folding the journal, automatic compaction) never makes it raise:
  it is retried later.  ``compact``/``dedup``/``forget`` raise OSError when they cannot write.
* Concurrent rewrites never break a commit or a read: a handle reads the files it listed last,
  and a ``compact``/``dedup``/``forget`` elsewhere deletes the files it merged.  An operation
  that meets such a file lists the directory again and starts over (``_rereading``: at most
  ``REREAD_TRIES`` times, the last under the DB lock, shared, which no rewrite deletes under);
  a commit does so in its duplicate check, before it writes anything, so it never writes a
  record twice.  It never raises FileNotFoundError; ``VanishedFileError`` (an OSError, one
  line) only when files vanish even then, i.e. something outside tunedb deletes them.
* Readers de-duplicate by ``record_id``.  A compacted file names the files it supersedes in
  its Parquet metadata; readers ignore superseded files, so a crash in the middle of a
  compaction never double-counts.
* Other readers: ``records/`` is a Delta Lake table (``tunedb.index.parquet.deltalog``): every
  published file is logged once durable, and a rewrite swaps its inputs for its output in one
  log version before deleting the inputs, so pyarrow (``deltalake``), Polars, DuckDB and Spark
  reading the table see each change whole -- never a temp file, a rewrite's output beside its
  inputs, or a forgotten row -- at any kill point.  ``snapshot_files()`` gives the same live
  files from tunedb.
* Crash recovery: every opener (``open``, ``refresh``; read-only use too, as long as the
  directory is writable) logs what a killed writer published but did not log, deletes the
  superseded files a killed rewrite left (once the log no longer lists them) and folds journals
  whose writer is gone; folding is idempotent (``tunedb.index.parquet.journal_fold``).
* Outside Delta writers (``tunedb.index.parquet.deltalog``, ``tunedb.index.parquet.outside``):
  a writable open adopts what they changed in the log (compact, delete, append, restore,
  vacuum, hand-written versions), so that ``len(db)`` equals what Delta readers read, and
  never deletes a file an outside version removed; a corrupt log version is moved aside and
  the log rebuilt from the files.  A read-only handle warns (``DeltaLogWarning``) instead.
* A handle sees its own commits at once and other processes' commits after ``refresh()``
  (or a new ``open``).  Returned Records are immutable; returned tables are fresh copies.
* Thread safety: one handle may be shared by threads (an internal lock guards its state).
* Costs and times are seconds; timestamps UTC.

Schema versions (``docs/schema.md``)
------------------------------------
The marker names the DB's schema version.  Schema 2 (tunedb 0.2.0) added the record columns
``host`` and ``origin``.  A DB of an older schema (1: tunedb 0.1.0) opens as it is and every
read answers exactly as the tunedb that wrote it did (its files lack host/origin: they read as
``""``, unknown).  Such a handle is read-only: ``commit``, ``invalidate``, ``mark``,
``compact``, ``dedup`` and ``forget`` raise ``ValueError`` with the one line "DIR is a tunedb
schema 1 database; run `tunedb upgrade --db DIR` to write to it" before writing anything, and
opening it folds no journal (the old writer's journals are read in place), so a reader of a
shared or read-only copy never changes it and never needs to upgrade.  ``tunedb upgrade``
(``tunedb.index.parquet.upgrade``) brings it to the current schema in place.  A DB of a newer
schema is refused at open (see ``tunedb.index.parquet.layout``).

This module is the handle: opening and closing, refreshing, committing, and the public API,
each method short and delegating to the part that does the work.  Its parts, one job each:

* ``tunedb.index.parquet.partition_set`` (``PartitionSet``): the handle's in-memory view -- every
  target's ``partition.Partition``, decoded rows (``rowcache``), journal rows, target metadata,
  invalidations and verdicts -- and what a refresh does to it;
* ``tunedb.index.parquet.journal_set`` (``Journals``): this handle's journal writer, the journals'
  scan state and folding (over ``journal``, the file format, and ``journal_fold``);
* ``tunedb.index.parquet.commits``: validating and grouping a commit, writing a small one as
  part files;
* ``tunedb.index.parquet.queries`` (``Queries``): lookups, best costs, entry records, targets;
  whole-table reads and the change token;
* ``tunedb.index.parquet.rewrites``: compaction, dedup and retention rewrites, the Delta log
  reconciliation and the deletion of superseded files;
* beneath them: ``parts`` (part files: naming, durable publishing, partition rewrites),
  ``memindex`` (the index arrays), ``deltalog``, ``invalidations``, ``verdicts``, ``runs``,
  ``layout`` (the marker), ``tunedb.index.support.fsutil`` (durable writes, locks), ``tunedb.index.contract.retention``.

Locks: the handle lock (``_lock``, an RLock) guards all in-memory state; the parts' methods
expect it held unless their docstring says they take it.  The DB lock (``<db>/_lock``, an
advisory file lock) is taken shared by refreshes, whole-table reads and journal recovery, and
exclusively by rewrites; appends never take it.  Journal appends are written and fsync'ed
outside the handle lock (group commit).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.contract.answers import Lookups
from tunedb.index.contract.base import RecordStore, StoreStats
from tunedb.index.contract.checks import check_columns, check_forget_options, check_runs_query
from tunedb.index.contract.retention import dedup_mask
from tunedb.index.contract.runs_codec import prepare_run, select_runs
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import Record
from tunedb.index.model.version import SCHEMA_VERSION
from tunedb.index.parquet import commits, deltalog, layout, outside, parts, queries, rewrites, verdicts
from tunedb.index.parquet import runs as runfiles
from tunedb.index.parquet.invalidations import INVAL_SCHEMA as INVAL_SCHEMA
from tunedb.index.parquet.invalidations import append as append_invalidation
from tunedb.index.parquet.invalidations import load as load_invalidations
from tunedb.index.parquet.journal import JournalWarning, JournalWriter
from tunedb.index.parquet.journal_set import Journals
from tunedb.index.parquet.layout import MARKER as MARKER
from tunedb.index.parquet.partition_set import PartitionSet
from tunedb.index.parquet.parts import META_SUPERSEDES as META_SUPERSEDES
from tunedb.index.parquet.parts import META_TARGET as META_TARGET
from tunedb.index.parquet.parts import META_TARGET_KEY as META_TARGET_KEY
from tunedb.index.parquet.parts import META_TARGET_NAME as META_TARGET_NAME
from tunedb.index.retrieval.mixin import RetrievalMixin
from tunedb.index.support.fsutil import file_lock, remove_dead_temp, tree_bytes

_OPEN_HANDLES: weakref.WeakSet = weakref.WeakSet()


class VanishedFileError(OSError):
    """A record file went missing while it was read, every time the read was tried
    (``ParquetStore.REREAD_TRIES``), the last time with the DB lock held so that no tunedb
    rewrite could delete it: something outside tunedb removes files.  ``str()`` is one line."""


class DeltaLogWarning(UserWarning):
    """A read-only handle found outside changes (or an unreadable version) in the Delta log that
    it cannot adopt or repair: it reads tunedb's files as they are."""


@atexit.register
def _fold_at_exit() -> None:
    """Fold the journals of handles still open at interpreter exit (best effort: a journal
    left behind is folded by the next process that opens the DB)."""
    for db in list(_OPEN_HANDLES):
        try:
            db.close()
        except Exception:
            pass


class ParquetStore(RetrievalMixin, RecordStore):
    """A tuning-record database in one directory: the Parquet backend of
    ``tunedb.index.contract.base.RecordStore`` (see the module docstring for its layout and parts)."""

    keeps_rankings = True  # (``derived/ranked/``: tunedb.index.parquet.rankcache)

    # tunables (class attributes: a test or a caller may override them per handle)
    JOURNAL_MAX = 64      # records: a commit up to this size is appended to the handle's journal
    JOURNAL_FOLD = 1_000  # records: a journal this long is folded into Parquet part files
    SMALL_COMMIT = 2_000  # records: a commit up to this size goes to the overlay, a larger one is indexed lazily
    AUTO_COMPACT_FILES = 64      # files in one partition that trigger an automatic compaction
    AUTO_COMPACT_MAX_BYTES = 1 << 20  # automatic compaction merges only files smaller than this
    TABLE_CACHE_ROWS = 2_000_000  # rows of decoded file tables kept in memory (~600 bytes a row; read at creation)
    OVERLAY_LIMIT = 200_000       # own-commit records kept outside the sorted arrays before a rebuild
    REREAD_TRIES = 5  # tries of a read that meets a file a concurrent rewrite deleted (``_rereading``)

    # ------------------------------------------------------------------ opening
    def __init__(self, path: Path, schema_version: int = SCHEMA_VERSION):
        self.path = Path(path)
        #: the DB's schema version (its marker's); below SCHEMA_VERSION the handle is read-only
        self.schema_version = schema_version
        self.records_dir = self.path / "records"
        self.inval_dir = self.path / "invalidations"
        self.verdict_dir = self.path / verdicts.DIRNAME
        self.runs_dir = self.path / runfiles.DIRNAME
        self.derived_dir = self.path / "derived"
        self.journal_dir = self.path / "journal"
        self.session = uuid.uuid4().hex[:16]
        self._lock = threading.RLock()  # the handle lock: guards everything below
        # built partition indexes are cached in derived/ (not for an older schema: read-only)
        self._view = PartitionSet(self.derived_dir if schema_version >= SCHEMA_VERSION else None,
                                  self.TABLE_CACHE_ROWS)
        self._journals = Journals(self.journal_dir, self.records_dir, self.path / "_lock")
        self._queries = queries.Queries(self._view, self._lock)
        self._due = rewrites.CompactionDue()  # files published per partition: automatic compaction
        self._entries_memo: tuple | None = None  # (change_token, entries table)
        self._refreshes = 0
        self._relist = False
        self._noted = False  # a read-only handle said once that the log holds outside changes
        self.read_only = False

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = True, read_only: bool = False) -> "ParquetStore":
        """Open the DB at ``path`` (created when missing and ``create``; any number of
        processes may create the same new DB at once, see ``layout.prepare``).  Finishes
        what a crashed process left: folds abandoned journals, deletes superseded files.

        ``read_only``: the handle never writes to the directory (the dashboard's promise): the
        DB must exist, nothing crashed processes left is finished (their journals are read in
        place, superseded and temporary files ignored, as on a read-only medium), and every
        method that would write raises ValueError.  Derived caches a read builds (``entries``,
        ``stats``, ``best``) are the exception: don't call those on a read-only handle when
        nothing may change."""
        if read_only and os.path.isdir(path) and not os.path.isfile(os.path.join(path, MARKER)):
            # (prepare would adopt an empty directory as a DB being created: a write)
            raise ValueError(f"{os.fspath(path)} is not a tunedb database (no {MARKER})")
        p = layout.prepare(path, False if read_only else create)
        db = cls(p, layout.schema_version(p))
        db.read_only = read_only
        db.refresh()
        _OPEN_HANDLES.add(db)
        return db

    def close(self) -> None:
        """Fold this handle's journal into Parquet and drop caches (the handle stays usable).
        When the fold cannot write (a full disk) the journal stays, durable, for the next
        opener to fold, and a ``JournalWarning`` says so."""
        with self._lock:
            try:
                self._journals.fold_own(self._due.part_published)
            except OSError as e:
                warnings.warn(f"could not fold the journal of {self.path} ({e}); it stays and the next open "
                              f"folds it", JournalWarning, stacklevel=2)
            finally:
                self._view.tables.clear()

    def __del__(self) -> None:
        # a handle dropped without close() still folds its journal (like a file flushing)
        try:
            if getattr(self, "_journals", None) is not None and self._journals.writer is not None:
                self._journals.fold_own(self._due.part_published)
        except Exception:
            pass

    def __enter__(self) -> "ParquetStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def _journal(self) -> JournalWriter | None:
        """This handle's open journal writer, if any (``Journals.writer``)."""
        return self._journals.writer

    #: lookups (configs asked) and hits (answered) this session (kept by ``Queries``)
    lookups = property(lambda self: self._queries.lookups, lambda self, n: setattr(self._queries, "lookups", n))
    hits = property(lambda self: self._queries.hits, lambda self, n: setattr(self._queries, "hits", n))

    @property
    def writable_schema(self) -> bool:
        """Whether this tunedb writes to the DB: its schema is the current one (an older one is
        read-only until ``tunedb upgrade``)."""
        return self.schema_version >= SCHEMA_VERSION

    def _check_writable(self) -> None:
        """ValueError (one line) when the handle is read-only or the DB's schema is older than
        this tunedb writes."""
        if self.read_only:
            raise ValueError(f"{self.path} is open read-only; open it without read_only to write to it")
        if not self.writable_schema:
            raise ValueError(f"{self.path} is a tunedb schema {self.schema_version} database; "
                             f"run `tunedb upgrade --db {self.path}` to write to it")

    # ------------------------------------------------------------- refreshing
    def refresh(self) -> None:
        """Re-scan the directory: pick up other processes' commits and compactions, fold the
        journals of writers that are gone and delete the files a killed compaction left
        superseded (where the directory is writable).  A writable handle also repairs an
        unreadable Delta log and adopts outside Delta writers' changes first (under the DB
        lock, exclusive: ``rewrites.sync_outside``; ValueError, one line, for an outside file it
        cannot read as records).  Lists files only: the partitions this handle has loaded are
        re-indexed where they changed, the others when first queried."""
        self._refresh(can_wait=True)

    def _refresh(self, can_wait: bool) -> None:
        """``refresh``; ``can_wait`` False: the caller may hold the DB lock shared (a read that
        refreshes mid-way), so the DB lock is not waited for exclusively: outside changes are
        then adopted by a later refresh, and until then nothing is logged or deleted."""
        with self._lock:
            writer = not self.read_only and self.writable_schema
            if writer:
                try:
                    deltalog.read_state(self.records_dir)
                except deltalog.CorruptLogError:  # (before folds: they log their files)
                    self._sync_outside(can_wait)
            self._fold_abandoned_journals()
            for _ in range(3):
                if not self._refresh_shared() or not self._sync_outside(can_wait):
                    break

    def _sync_outside(self, can_wait: bool) -> bool:
        """``rewrites.sync_outside`` (the log holds an outside Delta writer's changes, or cannot be
        read: adopt or repair under the DB lock, exclusive; never while holding it shared).
        Returns whether it ran (not when ``can_wait`` is False and the lock is held elsewhere)."""
        return rewrites.sync_outside(self.records_dir, self.path / "_lock", blocking=can_wait) is not None

    def _refresh_shared(self) -> bool:
        """One refresh pass under the DB lock, shared (handle lock held): list, reconcile the
        log, delete superseded files.  Returns whether the log first needs ``sync_outside``."""
        # a shared lock keeps compactions (exclusive) from deleting files while we list and
        # read them; appends take no lock, so they never wait for readers
        with file_lock(self.path / "_lock", shared=True):
            for attempt in range(20):
                try:
                    self._refresh_once()
                    break
                except FileNotFoundError:
                    time.sleep(0.005 * (attempt + 1))
            else:
                self._refresh_once()
            if self.read_only:
                self._note_outside_changes()
                return False
            rec = self._reconcile_log()
            if rec.outside or rec.corrupt is not None:
                return True
            if rec.ok and self._view.superseded:
                deletable = [f for f in self._view.superseded if f not in rec.keep]
                left = rewrites.remove_superseded(deletable, self._view.drop_file) if deletable else []
                self._view.superseded = [*left, *(f for f in self._view.superseded if f in rec.keep)]
            if self._relist:  # files the index held were deleted: list and index again
                self._relist = False
                self._refresh_once()
        return False

    def _note_outside_changes(self) -> None:
        """A read-only handle changes nothing: when the log holds outside changes (or cannot be
        read) it says so once, in one line (``DeltaLogWarning``), and reads tunedb's files."""
        if self._noted or not self.writable_schema:
            return
        note = outside.read_only_note(self.records_dir, self._view.live_parquet(self.records_dir),
                                      self._view.superseded)
        if note is not None:
            self._noted = True
            warnings.warn(note, DeltaLogWarning, stacklevel=4)

    def _refresh_once(self) -> None:
        """One listing of the directory into the view (handle lock and DB lock, shared, held).
        FileNotFoundError: something was deleted while listing (the caller retries)."""
        self._refreshes += 1
        files_by_dir, temps = parts.scan_partitions(self.records_dir)
        for t in temps if not self.read_only else ():
            remove_dead_temp(t)
        journal_keys, rewritten = self._view.apply_journals(*self._journals.scan())
        self._view.load_marks(self.inval_dir, self.verdict_dir)
        self._view.apply_listing(files_by_dir, journal_keys, rewritten)

    def _reconcile_log(self) -> rewrites.Reconciled:
        """Bring the Delta log in line with the files (``rewrites.reconcile_log``; handle lock and
        DB lock, shared, held).  Its ``ok``: whether superseded files may be deleted (also when
        the DB keeps no log: an older schema)."""
        if not self.writable_schema:
            return rewrites.Reconciled(True, [])
        rec = rewrites.reconcile_log(self.records_dir, self._view.live_parquet(self.records_dir),
                                     self._view.superseded, clean_temps=self._refreshes <= 1)
        if rec.removed:
            self._view.superseded = [*self._view.superseded, *rec.removed]
            self._relist = True
        return rec

    # ------------------------------------------------------------- journals
    def _fold_abandoned_journals(self, strict: bool = False) -> None:
        """Fold the journals of writers that are gone (``Journals.fold_abandoned``; handle lock
        held); an older schema's (or a read-only handle's) journals are read in place."""
        if not self.writable_schema or self.read_only:
            return
        self._journals.fold_abandoned(self._due.part_published, strict=strict)

    def _fold_journals(self) -> None:
        """Fold this handle's journal and abandoned ones, so a rewrite sees their records.
        OSError when one cannot be written (a full disk); a read-only DB folds nothing."""
        with self._lock:
            self._journals.fold_own(self._due.part_published)
            self._fold_abandoned_journals(strict=True)  # (none for an older schema: read in place)

    # ------------------------------------------------------------ committing
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """Validate and durably write ``records`` (Records or a ``RecordBatch``); returns how
        many were new.

        Records whose record_id this handle already holds are skipped (idempotent
        re-commit).  Raises ValueError naming the field and the record when any record
        is invalid; then nothing of the commit is written.  ValueError (nothing written) when
        the DB has an older schema (see module docstring).
        """
        self._check_writable()
        if type(records) is Record and self._journals.open_here():
            return self._commit_one(records)  # a tuner's commit: the same steps, without the array set-up
        c = commits.prepare(records, self.SMALL_COMMIT)
        if not len(c.rh):
            return 0
        c.group()
        with self._lock:
            keep = self._rereading(self._view.fresh_mask, c.rh, c.tkeys, c.codes)  # (before anything is written)
            n_new = int(keep.sum())
            if not n_new:
                return 0
            committed = parts.now_us()
            if n_new > self.SMALL_COMMIT or c.foreign():
                self._after_commit(self._repairing(self._commit_large, *c.kept_table(keep, n_new), committed))
                return n_new
            recs = c.kept_records(keep, n_new)
            pending = self._repairing(self._commit_small, recs, committed)
            refreshes = self._refreshes
            if pending is None:
                self._after_commit(c.tkeys)
                return n_new
        # a journal append: written and fsync'ed outside the handle lock, so that threads
        # committing at the same time share one write and one fsync (``JournalWriter``); raises
        # when it failed, and then nothing of this commit is durable
        journal, ticket = pending
        journal.wait(ticket)
        with self._lock:
            self._view.overlay_add(recs, recheck=refreshes != self._refreshes)
            self._after_commit(c.tkeys)
        return n_new

    def _repairing(self, write, *args: Any) -> Any:
        """``write(*args)`` (a commit that logs its files: all-or-nothing), once more after
        repairing the Delta log when it met an unreadable version (``rewrites.sync_outside``)."""
        try:
            return write(*args)
        except deltalog.CorruptLogError:
            self._sync_outside(can_wait=True)
            return write(*args)

    def _commit_one(self, r: Record) -> int:
        """``commit`` of one Record while this handle's journal is open (see ``commit``)."""
        r.validate()
        h = rid_hash(r.record_id)
        with self._lock:
            if not self._rereading(self._is_fresh, r.target_key, h):  # (before anything is written)
                return 0
            self._view.remember_targets([r])
            journal, ticket = self._journals.enqueue([r], parts.now_us())
            refreshes = self._refreshes
        journal.wait(ticket)  # outside the handle lock: see commit
        with self._lock:
            self._view.overlay_add([r], recheck=refreshes != self._refreshes)
            self._after_commit([r.target_key])
        return 1

    def _is_fresh(self, tkey: str, h: int) -> bool:
        """Whether this handle holds no record of rid hash ``h`` in target ``tkey``'s partition
        (handle lock held; FileNotFoundError: see ``_rereading``)."""
        return bool(self._view.indexed(tkey).fresh_mask(np.array([h], np.int64))[0])

    def _commit_small(self, recs: list[Record], committed: int) -> tuple | None:
        """Write ``recs`` to one file per target and keep them in the overlay; or, up to
        ``JOURNAL_MAX`` records, queue them on the journal and return (journal, ticket) for the
        caller to wait on outside the handle lock (see ``commit``).  Handle lock held."""
        self._view.remember_targets(recs)
        if len(recs) <= self.JOURNAL_MAX and self._journals.writable():
            return self._journals.enqueue(recs, committed)
        for path in commits.publish_records(self.records_dir, recs, committed):
            self._due.part_published(path)
        self._view.overlay_add(recs)
        return None

    def _commit_large(self, table: pa.Table, tkeys: list[str], codes: np.ndarray, target_meta: dict,
                      committed: int) -> list[str]:
        """Write ``table`` (one file per target, durably) and index its files lazily (next
        query); returns ``tkeys``.  Handle lock held."""
        written = parts.write_targets(self.records_dir, table, tkeys, codes, target_meta, committed)
        for _, path, _ in written:
            self._due.part_published(path)
        self._view.add_written(written, target_meta)
        return tkeys

    def _after_commit(self, tkeys: list[str]) -> None:
        """Upkeep after a commit (under the handle lock): fold a full journal, compact a partition
        that has more than ``AUTO_COMPACT_FILES`` files (without waiting for the DB lock; no
        refresh: the handle's arrays still hold the same records, and a row whose file was merged
        away is found again by the refresh-and-retry of the queries), rebuild a large overlay.
        The records are durable already: nothing here makes the commit raise."""
        self._journals.fold_own_if_full(self.JOURNAL_FOLD, self._due.part_published)
        for d in self._due.take():  # after the in-memory state is updated
            try:
                n = parts.count_parts(d)
                if n is not None and n > self.AUTO_COMPACT_FILES:
                    self._rewrite_partitions([d], keep=None, blocking=False, small_only=True, refresh=False)
            except (OSError, ValueError):
                pass  # (a full disk, an outside change to adopt: tried again later, or by compact())
        if any(len(self._view.part(tk).overlay_rids) > self.OVERLAY_LIMIT for tk in tkeys):
            self.refresh()

    # ----------------------------------------------------------- rewriting
    def _rewrite_partitions(self, dirs: list[Path], keep: rewrites.Keep, *, refresh: bool = True,
                            **options: Any) -> dict:
        """``rewrites.rewrite_partitions`` of ``dirs`` (under the DB lock, exclusive; ``options``:
        blocking, min_files, small_only, operation, atomic), then a refresh unless not ``refresh``."""
        stats = rewrites.rewrite_partitions(self.records_dir, self.path / "_lock", dirs, keep,
                                            small_bytes=self.AUTO_COMPACT_MAX_BYTES,
                                            written=lambda p: self._due.count(p.parent, "cpart"), **options)
        if refresh:
            self.refresh()
        return stats

    def _partition_dirs_of(self, target: Any) -> list[Path]:
        tkey = self._target_key(target)
        return [p for p in parts.partition_dirs(self.records_dir) if p.name.endswith(tkey[:16])]

    def compact(self) -> dict:
        """Merge the files of every partition into one (under the DB lock).  Returns counts.
        OSError (e.g. ENOSPC) when it cannot write: then what it had not finished is as it
        was (each partition's rewrite is all-or-nothing) and nothing is lost."""
        self._check_writable()
        self._fold_journals()
        return self._rewrite_partitions(parts.partition_dirs(self.records_dir), keep=None)

    def dedup(self) -> dict:
        """Remove repeated identical measurements: same (target, workload, config), status
        and costs; the earliest is kept.  Returns counts (``removed``)."""
        self._check_writable()
        self._fold_journals()
        st = self._rewrite_partitions(parts.partition_dirs(self.records_dir), keep=dedup_mask,
                                      operation="DELETE", atomic=True)
        st["removed"] = st["rows_before"] - st["rows_after"]
        return st

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        """Retention.  ``target``: drop that target's records (all of them unless other options
        are given, which then apply to that target only).  ``keep_top``: per (target, workload)
        keep the k best ``ok`` records (failed measurements are kept: they stop retries).
        ``older_than_days``: drop records measured longer ago than that."""
        self._check_writable()
        self._fold_journals()
        check_forget_options(keep_top, older_than_days, target)
        dirs = self._partition_dirs_of(target) if target is not None else parts.partition_dirs(self.records_dir)
        if target is not None and not dirs:
            raise ValueError(f"unknown target {target!r}")
        drop_all = target is not None and keep_top is None and older_than_days is None
        keep = rewrites.forget_keep(keep_top, older_than_days, drop_all)
        st = self._rewrite_partitions(dirs, keep=keep, min_files=1, operation="DELETE", atomic=True)
        st["removed"] = st["rows_before"] - st["rows_after"]
        return st

    def snapshot_files(self) -> list[Path]:
        """The Parquet files that hold this DB's records now, for other engines: each live
        record in exactly one listed file (superseded files and temp files are left out),
        e.g. ``pyarrow.dataset.dataset(db.snapshot_files(), partitioning=None)`` or DuckDB's
        ``read_parquet([...])``.  Folds this handle's journal and abandoned ones first (where
        the DB is writable; OSError when it cannot be written, e.g. ENOSPC), so every record
        committed by a process that is gone is included; records still in a live writer's
        journal are not (they are not Parquet yet).  The files are immutable; a later
        compaction may delete them, so take a new snapshot rather than keep an old one.
        Identical records committed by two processes are two rows: count distinct record_id
        to match ``len(db)`` exactly."""
        self._fold_journals()
        self.refresh()
        with self._lock:
            return [Path(f) for f in self._view.live_parquet(self.records_dir)]

    # ------------------------------------------------------- marks and runs
    def invalidate(self, target: Any) -> str:
        """Mark ``target`` stale (e.g. after a toolchain upgrade): its records committed until
        now no longer answer ``lookup``/``best``; later measurements do.  Returns its key."""
        self._check_writable()
        tkey = self._target_key(target)
        meta = self._view.target_meta
        if tkey not in meta and not self._partition_dirs_of(tkey):
            raise ValueError(f"unknown target {target!r}")
        append_invalidation(self.inval_dir, tkey, meta.get(tkey, ("", ""))[0])
        self.refresh()
        return tkey

    def mark(self, verdicts_: dict[str, str]) -> int:
        """Store a verdict per record_id (``verdicts/``; see ``RecordStore.mark``)."""
        from tunedb.index.contract.checks import check_verdicts

        check_verdicts(verdicts_)
        self._check_writable()  # (an older schema's DB is read-only)
        if not verdicts_:
            return 0
        rids = list(verdicts_)
        with self._lock:
            unknown = self._rereading(self._view.first_unknown, rids)
            if unknown is not None:
                raise ValueError(f"verdict for record {unknown}: the store holds no such record")
            verdicts.append(self.verdict_dir, dict(verdicts_))
        self.refresh()
        return len(verdicts_)

    def verdicts(self) -> dict[str, str]:
        """record_id -> latest verdict (as of the last refresh or own ``mark``)."""
        with self._lock:
            return dict(self._view.verdicts)

    def add_run(self, summary: Mapping[str, Any]) -> str:
        """Store a tuning-run summary as ``runs/<run_id>.json`` (see ``RecordStore.add_run`` and
        ``tunedb.index.parquet.runs``): ValueError (nothing written) for a bad summary or a DB
        of an older schema (the same line ``commit`` gives); OSError when it cannot be written
        (then the run's earlier summary, if any, stays).  Durable when it returns."""
        self._check_writable()
        run_id, _, _, text = prepare_run(summary)
        runfiles.write(self.runs_dir, run_id, text)
        return run_id

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """The run summaries of ``runs/`` (read from disk on every call, so other processes'
        runs are seen at once), as ``RecordStore.runs`` orders and limits them; an unreadable
        file is skipped with a ``RunWarning``."""
        check_runs_query(kind, limit)
        return select_runs(runfiles.load(self.runs_dir), kind, limit)

    # --------------------------------------------------------------- queries
    def _target_key(self, target: Any) -> str:
        """Key of a target given as a dict, a Record, a target_key or a target_name."""
        return self._queries.target_key(target)

    def _workload_key(self, workload: Any) -> str:
        """Key of a workload given as a dict, a Record or a workload_key."""
        return self._queries.workload_key(workload)

    def _rereading(self, op: Callable[..., Any], *args: Any) -> Any:
        """``op(*args)``, an operation that reads record files as this handle listed them.  A
        concurrent ``compact``/``dedup``/``forget`` (another process or handle) deletes the files
        it merged, so ``op`` may meet one that is gone (FileNotFoundError): then the directory
        is listed again (``refresh``) and ``op`` run again from the start, up to
        ``REREAD_TRIES`` times in all; the last try lists and runs under the DB lock, shared
        (it waits for a running rewrite, and none deletes a file meanwhile).  ``op`` must be
        safe to run again after a FileNotFoundError: it reads, and writes nothing before its
        reads are done (``commit`` runs only its duplicate check through here).  Callable with
        or without the handle lock held.  ``VanishedFileError`` (an OSError, one line) when even
        the last try meets a missing file: something outside tunedb deletes them."""
        for _attempt in range(self.REREAD_TRIES - 1):
            try:
                return op(*args)
            except FileNotFoundError:
                self.refresh()
        with self._lock, file_lock(self.path / "_lock", shared=True):  # (handle lock first, as refresh)
            self._refresh(can_wait=False)
            try:
                return op(*args)
            except FileNotFoundError as e:
                raise VanishedFileError(f"{self.path}: a record file vanished while it was read "
                                        f"{self.REREAD_TRIES} times, the last with no rewrite running; "
                                        f"is something outside tunedb deleting files? ({e})".replace("\n", " ")
                                        ) from None

    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The cached measurement of (target, workload, config), or None (see ``Queries.lookup``)."""
        return self._rereading(self._queries.lookup, target, workload, config)

    def lookup_many(self, target: Any, workload: Any, configs: Iterable[Any]) -> list[Record | None]:
        """:meth:`lookup` of each config of one (target, workload), in order (see ``lookup_batch``)."""
        return list(self.lookup_batch(target, workload, configs))

    def lookup_batch(self, target: Any, workload: Any, configs: Iterable[Any]) -> Lookups:
        """The answers of a population of configs of one (target, workload) (see
        ``RecordStore.lookup_batch``; how: ``Queries.lookup_batch``)."""
        return self._rereading(self._queries.lookup_batch, target, workload, list(configs), self.lookup)

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list:
        """``RecordStore.best_costs``, computed from the partition's decoded columns: only the
        ``k`` representative records are built as Records (the contract's definition through
        ``estimate.rank_arrays``, which ``estimate.rank`` uses too)."""
        if k <= 0:
            return []
        return self._rereading(self._queries.best_costs, target, workload, k)

    def best_costs_many(self, pairs: Iterable[tuple[Any, Any]], k: int = 1) -> list[list]:
        """``RecordStore.best_costs_many``: the same answers as :meth:`best_costs` one by one,
        from the same kept per-entry answers, under one hold of the handle lock with the entries
        of a target ranked together (``Queries.best_costs_many``)."""
        pairs = list(pairs)
        if k <= 0:
            return [[] for _ in pairs]
        return self._rereading(self._queries.best_costs_many, pairs, k)

    def best(self, target: Any, workload: Any, k: int = 1) -> list[Record]:
        """``RecordStore.best``: the records of :meth:`best_costs`, from the same kept per-entry
        answers (``Queries.ranked``: a repeated query reads memory only)."""
        if k <= 0:
            return []
        try:  # (the common case without the wrapper: a kept answer)
            return self._queries.ranked(target, workload, k)[1][:k]
        except FileNotFoundError:  # (a file merged away: list again and ask again)
            return self._rereading(self._queries.best, target, workload, k)

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """Every live, ok, unrefuted record of (target, workload) (see ``RecordStore``)."""
        return self._rereading(self._queries.entry_records, target, workload)

    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """All records (optionally of one target and/or workload) as a new pyarrow Table,
        de-duplicated by record_id, with the columns of ``tunedb.index.model.schema.RECORD_SCHEMA``.
        With a ``target``, only that target's files are read.  ``columns`` (see
        ``RecordStore.records``): only those columns are read from the files (Parquet column
        projection) and from the journals' rows, plus the few the filters and the
        de-duplication need (``rid_hash``; ``target_key``/``workload_key`` to filter;
        ``committed`` for the stale filter), which are dropped again before returning."""
        cols = check_columns(columns)
        tkey = self._target_key(target) if target is not None else None
        wkey = self._workload_key(workload) if workload is not None else None
        return queries.read_records(self._view, self._read_live, tkey, wkey, include_stale, cols)

    def _read_live(self, prefix: str | None, columns: list[str] | None = None) -> pa.Table:
        """``queries.read_live``: the rows of every live file and journal (or of one target-key
        prefix's), under the DB lock, shared; this handle's pending commits refreshed in first."""
        return queries.read_live(self._view, self._lock, self.path / "_lock", prefix, columns,
                                 lambda: self._refresh(can_wait=False))

    def entries(self) -> pa.Table:
        """One row per (target_key, workload_key): target_key, target_name, target, workload_key,
        family, workload, records, ok_records, best_cost (seconds; null when none ok).  Reads only
        the columns it summarises; remembered until the DB changes (``change_token``), in memory
        and as ``derived/entries-<token>.parquet`` for the next process (rebuildable)."""
        token = self.change_token()
        memo = self._entries_memo
        if memo is not None and memo[0] == token:
            return memo[1]
        # ("entries2": best_cost is the estimator's, not the fastest record's as in "entries-*" files)
        cached = self.derived_dir / f"entries2-{token[1]}.parquet" if token[0] == 0 else None
        out = queries.entries_table(cached, self._view.index_cache is not None, self._read_live, self._view)
        self._entries_memo = (token, out)
        return out

    def targets(self) -> list[dict]:
        """Every target holding records: target_key, target_name, target (dict), records (every
        stored record, stale ones included, as ``records()`` and the other backends count)."""
        return self._rereading(self._queries.targets)

    def find_target(self, name_or_key: str) -> dict | None:
        """Target dict of a target in this DB, by target_name or target_key (or a unique key prefix)."""
        return self._queries.find_target(name_or_key)

    def __len__(self) -> int:
        return self._rereading(self._count)

    def _count(self) -> int:
        """Records, stale ones included (FileNotFoundError: see ``_rereading``)."""
        with self._lock:
            return sum(p.count() for p in self._view.all_loaded())

    def stats(self) -> StoreStats:
        """records, targets, workloads, entries, files, size_bytes, stale_targets, and this
        session's lookups, hits and hit_rate."""
        with self._lock:
            if any(p.overlay for p in self._view.parts.values()):
                self.refresh()
            live_ek, files, tkeys = self._rereading(self._view.index_stats)
        size = tree_bytes(self.records_dir, self.journal_dir)
        n_work = 0
        if len(live_ek):
            t = self.records(include_stale=False)
            n_work = len(pc.unique(t.column("workload_key")))
        return StoreStats(records=len(self), targets=len(tkeys), workloads=n_work, entries=int(len(np.unique(live_ek))),
                          files=len(files), size_bytes=int(size), stale_targets=sorted(self._view.invalidated),
                          lookups=self.lookups, hits=self.hits, location=str(self.path))

    def size_bytes(self) -> int:
        """Bytes of the record and journal files (``stats().size_bytes``, without reading a record)."""
        return int(tree_bytes(self.records_dir, self.journal_dir))

    def stale_targets(self) -> list[str]:
        """The invalidated target keys, sorted, read from the invalidation files (so another
        process's invalidations count before a :meth:`refresh`; no record is read)."""
        return sorted(load_invalidations(self.inval_dir))

    # ------------------------------------------------------------- derived data
    def cache_dir(self) -> Path:
        """``<db>/derived``: rebuildable caches (the vector index)."""
        return self.derived_dir

    def change_token(self) -> tuple:
        """Changes whenever the records may have: the names of the record, invalidation and
        verdict files, the journals' sizes and this handle's own uncommitted-to-Parquet records
        (no partition is loaded to compute it; see ``queries.change_token``)."""
        with self._lock:
            own = self._view.own_records()
        return queries.change_token(self.path, (self.records_dir, self.inval_dir, self.verdict_dir),
                                    self.journal_dir, own)

    @property
    def location(self) -> str:
        return str(self.path)
