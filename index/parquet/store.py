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
  A ``RecordBatch`` (tunedb.index.batch) is the columnar bulk form; large commits are indexed in
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

This module is the handle (opening, refreshing, committing, maintenance and queries); the
pieces it is built from each have their own module: ``tunedb.index.parquet.parts`` (part files: naming,
durable publishing, compression layouts, partition rewrites), ``tunedb.index.parquet.journal`` and
``tunedb.index.parquet.journal_fold`` (write-ahead journals: file format; reading and folding),
``tunedb.index.parquet.memindex`` (the in-memory index arrays), ``tunedb.index.parquet.rowcache`` (decoded rows for
building Records), ``tunedb.index.retention`` (what dedup and forget keep) and
``tunedb.index.parquet.invalidations`` (stale-marking).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index import tables
from tunedb.index.base import RecordStore, StoreStats
from tunedb.index.batch import RecordBatch
from tunedb.index.checks import check_columns, check_forget_options, check_runs_query
from tunedb.index.keys import (
    canonical_json,
    canonical_json_flat,
    canonical_json_flat_many,
    hash64,
    key_of_text,
    rid_hash,
    rid_hashes,
)
from tunedb.index.lookups import Lookups
from tunedb.index.parquet import deltalog, invalidations, journal_fold, layout, memindex, parts, verdicts
from tunedb.index.parquet import runs as runfiles
from tunedb.index.parquet.fsutil import file_lock, fsync_dir, remove_dead_temp, replace_derived, tree_bytes
from tunedb.index.parquet.invalidations import INVAL_SCHEMA as INVAL_SCHEMA
from tunedb.index.parquet.journal import JournalWarning, JournalWriter
from tunedb.index.parquet.journal_fold import journal_row, journal_table
from tunedb.index.parquet.layout import MARKER as MARKER
from tunedb.index.parquet.memindex import Chunk
from tunedb.index.parquet.partition import Partition
from tunedb.index.parquet.parts import META_SUPERSEDES as META_SUPERSEDES
from tunedb.index.parquet.parts import META_TARGET as META_TARGET
from tunedb.index.parquet.parts import META_TARGET_KEY as META_TARGET_KEY
from tunedb.index.parquet.parts import META_TARGET_NAME as META_TARGET_NAME
from tunedb.index.parquet.parts import target_slug as _slug
from tunedb.index.parquet.querykeys import KeyMemo
from tunedb.index.parquet.rowcache import TableCache, record_at
from tunedb.index.record import Record
from tunedb.index.retention import dedup_mask, retention_mask
from tunedb.index.runs_codec import prepare_run, select_runs
from tunedb.index.schema import conform, empty_records
from tunedb.index.version import SCHEMA_VERSION, TUNEDB_VERSION

_OPEN_HANDLES: weakref.WeakSet = weakref.WeakSet()


def _meta_flags(meta: str, confirm_origins: tuple[str, ...]) -> tuple[bool, bool]:
    """(a confirmation re-measurement, said to be noisy) of a record's meta JSON text."""
    if not meta or ('"origin"' not in meta and '"noisy"' not in meta):  # (most metas: no JSON parse)
        return False, False
    d = json.loads(meta)
    return d.get("origin") in confirm_origins, bool(d.get("noisy"))


def _read_file(path: str, columns: list[str] | None) -> pa.Table:
    """One record file, every column or only ``columns`` (those the file has: a schema-1 file
    lacks ``host`` and ``origin``; ``schema.conform`` fills them in)."""
    f = pq.ParquetFile(path)  # (not read_table: that imports pyarrow.dataset and pandas, 0.3 s)
    if not columns:
        return f.read(use_threads=False)
    present = set(f.schema_arrow.names)
    return f.read(columns=[c for c in columns if c in present], use_threads=False)


#: files read at once by one records read (pyarrow decodes without the GIL)
READ_THREADS = 4


def _read_files(paths: list[str], columns: list[str] | None) -> list[pa.Table]:
    """:func:`_read_file` of each of ``paths``, in order; several at once when there are many.
    ``FileNotFoundError`` when one is gone (a compaction replaced it: the caller refreshes)."""
    if len(paths) < 2 * READ_THREADS:
        return [_read_file(p, columns) for p in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tunedb-read") as ex:
        return list(ex.map(lambda p: _read_file(p, columns), paths))


@atexit.register
def _fold_at_exit() -> None:
    """Fold the journals of handles still open at interpreter exit (best effort: a journal
    left behind is folded by the next process that opens the DB)."""
    for db in list(_OPEN_HANDLES):
        try:
            db.close()
        except Exception:
            pass


class ParquetStore(RecordStore):
    """A tuning-record database in one directory: the Parquet backend of
    ``tunedb.index.base.RecordStore`` (see the module docstring for its layout)."""

    # tunables (class attributes: a test or a caller may override them per handle)
    JOURNAL_MAX = 64      # records: a commit up to this size is appended to the handle's journal
    JOURNAL_FOLD = 1_000  # records: a journal this long is folded into Parquet part files
    SMALL_COMMIT = 2_000  # records: a commit up to this size goes to the overlay, a larger one is indexed lazily
    AUTO_COMPACT_FILES = 64      # files in one partition that trigger an automatic compaction
    AUTO_COMPACT_MAX_BYTES = 1 << 20  # automatic compaction merges only files smaller than this
    TABLE_CACHE_ROWS = 2_000_000  # rows of decoded file tables kept in memory (~600 bytes a row)
    OVERLAY_LIMIT = 200_000       # own-commit records kept outside the sorted arrays before a rebuild

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
        # built partition indexes are cached in derived/ (not for an older schema: read-only)
        self._index_cache = self.derived_dir if schema_version >= SCHEMA_VERSION else None
        self._journal: JournalWriter | None = None
        self._mem: dict[str, pa.Table] = {}  # journal chunk key -> its rows (journals are not Parquet)
        self._journal_state: journal_fold.JournalState = {}  # journal path -> (size read, chunk keys)
        self.session = uuid.uuid4().hex[:16]
        self._lock = threading.RLock()
        self._parts: dict[str, Partition] = {}  # target-key prefix (16 hex) -> its state
        self._supersedes: dict[str, list[str]] = {}  # compacted file -> the names it supersedes
        self._superseded: list[str] = []
        self._tables = TableCache()  # decoded rows of files, by path
        self.lookups = 0
        self.hits = 0
        self._invalidated: dict[str, int] = {}
        self._verdicts: dict[str, str] = {}  # record_id -> latest verdict
        self._refuted: set[str] = set()
        self._refuted_hashes: set[int] = set()
        self._target_meta: dict[str, tuple[str, str]] = {}  # target_key -> (name, json)
        self._commits_since_scan: dict[str, int] = {}
        self._keys = KeyMemo()  # canonical JSON and keys of query arguments, parsed JSON
        self._entries_memo: tuple | None = None  # (change_token, entries table)
        self._refreshes = 0
        self._relist = False
        self._compact_due: set = set()
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
                self._fold_own_journal()
            except OSError as e:
                warnings.warn(f"could not fold the journal of {self.path} ({e}); it stays and the next open "
                              f"folds it", JournalWarning, stacklevel=2)
            finally:
                self._tables.clear()

    def __del__(self) -> None:
        # a handle dropped without close() still folds its journal (like a file flushing)
        try:
            if getattr(self, "_journal", None) is not None:
                self._fold_own_journal()
        except Exception:
            pass

    def __enter__(self) -> "ParquetStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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

    # ------------------------------------------------------------- scanning
    def _read_chunk(self, key: str) -> Chunk:
        """The index columns of chunk ``key``: a journal's rows of one target (in memory) or a
        Parquet file (FileNotFoundError when it was merged away: the caller refreshes)."""
        mem = self._mem.get(key)
        if mem is not None:
            return Chunk(Path(key), key.rsplit("::", 1)[1], memindex.index_cols(mem), [])
        ch, target = memindex.read_chunk(Path(key))
        if target is not None and ch.target_key and ch.target_key not in self._target_meta:
            self._target_meta[ch.target_key] = target
        if ch.supersedes:
            self._supersedes[key] = ch.supersedes
        return ch

    def _supersedes_of(self, key: str) -> list[str]:
        """Names that compacted file ``key`` supersedes (its footer, read once: files are immutable)."""
        sup = self._supersedes.get(key)
        if sup is None:
            sup = self._supersedes[key] = parts.meta_supersedes(pq.read_schema(key).metadata)
        return sup

    def _part(self, tkey: str) -> Partition:
        """The partition of target key ``tkey`` (created empty when new)."""
        prefix = tkey[:16]
        p = self._parts.get(prefix)
        if p is None:
            p = self._parts[prefix] = Partition(prefix)
        if not p.target_key and len(tkey) == 32:
            p.target_key = tkey
        return p

    def _loaded(self, p: Partition) -> Partition:
        """``p`` with its index built and its large commits indexed (see ``Partition.load``)."""
        if not p.loaded or p.dirty:
            p.load(self._read_chunk, self._invalidated, self._index_cache)
        return p

    def _indexed(self, tkey: str) -> Partition:
        """The partition of ``tkey`` with its index built (for identity checks: a pending large
        commit is in its ``pending_rids``, so it is not indexed first)."""
        p = self._part(tkey)
        if not p.loaded:
            p.load(self._read_chunk, self._invalidated, self._index_cache)
        return p

    def _all_loaded(self) -> list[Partition]:
        """Every partition, loaded (whole-DB queries: counts, targets, stats)."""
        return [self._loaded(p) for p in list(self._parts.values())]

    def refresh(self) -> None:
        """Re-scan the directory: pick up other processes' commits and compactions, fold the
        journals of writers that are gone and delete the files a killed compaction left
        superseded (where the directory is writable).  Lists files only: the partitions this
        handle has loaded are re-indexed where they changed, the others when first queried."""
        with self._lock:
            self._fold_abandoned_journals()
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
                if not self.read_only and self._reconcile_log() and self._superseded:
                    self._remove_superseded()
                if self._relist:  # files the index held were deleted: list and index again
                    self._relist = False
                    self._refresh_once()

    def _refresh_once(self) -> None:
        self._refreshes += 1
        files_by_dir, temps = parts.scan_partitions(self.records_dir)
        for t in temps if not self.read_only else ():
            remove_dead_temp(t)
        keys: dict[str, set[str]] = {}
        for d, files in files_by_dir.items():
            prefix = os.path.basename(d).rsplit("-", 1)[-1]
            keys.setdefault(prefix, set()).update(str(f) for f in files)
        journal_keys, rewritten = self._scan_journals()
        for k, tkey in journal_keys:
            keys.setdefault(tkey[:16], set()).add(k)
            self._part(tkey)
        self._invalidated = invalidations.load(self.inval_dir)
        self._verdicts = verdicts.load(self.verdict_dir)
        self._refuted = {r for r, v in self._verdicts.items() if v == "refuted"}
        self._refuted_hashes = {int(h) for h in rid_hashes(sorted(self._refuted))} if self._refuted else set()
        superseded: list[str] = []
        for prefix in set(self._parts) | set(keys):
            p = self._parts.get(prefix) or self._part(prefix)
            ks = keys.get(prefix, set())
            gone = p.keys - ks
            for k in gone:
                self._tables.drop(k)
                self._supersedes.pop(k, None)
            changed = p.set_keys(ks, self._supersedes_of) or bool(gone) or prefix in rewritten
            superseded.extend(p.superseded)
            had_own = bool(p.overlay) or p.dirty
            p.clear_own()
            if p.loaded and (changed or had_own or p.built_with != p.invalidated_at(self._invalidated)):
                p.load(self._read_chunk, self._invalidated, self._index_cache)
            if not p.keys:
                del self._parts[prefix]
        self._superseded = superseded

    # ------------------------------------------------------------- journals
    def _scan_journals(self) -> tuple[list[tuple[str, str]], set[str]]:
        """(Re)read every journal that changed since the last scan; its rows become one
        in-memory table per target (``_mem``).  Returns (chunk key, target_key) of all journals,
        and the target-key prefixes whose journal rows changed."""
        # FileNotFoundError: a journal was folded meanwhile; the refresh retries
        state, stale, fresh = journal_fold.scan_journals(self.journal_dir, self._journal_state)
        rewritten = set()
        for k in stale:
            self._tables.drop(k)
            self._mem.pop(k, None)
            rewritten.add(k.rsplit("::", 1)[1][:16])
            p = self._parts.get(k.rsplit("::", 1)[1][:16])
            if p is not None:
                p.chunks.pop(k, None)  # its rows changed: read again
        for k, tkey, group in fresh:
            rewritten.add(tkey[:16])
            md = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
            self._target_meta.setdefault(tkey, md)
            self._mem[k] = group
        self._journal_state = state
        live = {k for _, keys in state.values() for k in keys}
        for k in [k for k in self._mem if k not in live]:  # folded journals
            del self._mem[k]
        return [(k, k.rsplit("::", 1)[1]) for k in sorted(live)], rewritten

    def _journal_enqueue(self, recs: list[Record], committed: int) -> tuple:
        """Queue ``recs`` on this handle's journal (opened on first use; a new one after an
        append that could not be undone); returns (journal, ticket) for ``JournalWriter.wait``."""
        j = self._journal
        if j is not None and j.broken and j.pid == os.getpid():
            self._journal = None
            j.close()  # retired: folded by whoever finds it abandoned
            j = None
        if j is None or j.pid != os.getpid():  # (a forked child never appends to its parent's)
            j = self._journal = JournalWriter(self.journal_dir)
        return j, j.enqueue([journal_row(r, committed) for r in recs])

    def _maybe_fold_own_journal(self) -> None:
        """Fold this handle's journal once it holds ``JOURNAL_FOLD`` records.  Its records are
        durable already, so a failure (a full disk) is not the commit's: the journal, closed,
        stays for a later fold by whoever finds it abandoned."""
        j = self._journal
        if j is not None and j.records >= self.JOURNAL_FOLD:
            try:
                self._fold_own_journal()
            except OSError:
                pass

    def _fold(self, path: Path, recovering: bool = False) -> None:
        """Fold journal ``path`` into Parquet part files, then delete it (see ``fold_journal``).
        ``recovering`` (a journal whose writer is gone): under the DB lock, shared, so that a
        re-fold after an interrupted fold and a compaction never interleave."""
        if recovering:
            with file_lock(self.path / "_lock", shared=True):
                written = journal_fold.fold_journal(path, self.records_dir, recovering=True)
        else:
            written = journal_fold.fold_journal(path, self.records_dir)
        for f in written:
            self._count_commit(f.parent, "part")

    def _fold_own_journal(self) -> None:
        j, self._journal = self._journal, None
        if j is None:
            return
        try:
            if j.pid == os.getpid():
                j.flush()  # appends queued by threads still waiting are in the file before it is folded
                self._fold(j.path)
        finally:
            j.close()

    def _fold_abandoned_journals(self, strict: bool = False) -> None:
        """Fold the journals of writers that are gone (``strict``: raise OSError when one cannot
        be written, else warn and leave it; see ``journal_fold.fold_abandoned``)."""
        if not self.writable_schema or self.read_only:
            return  # an older schema's (or a read-only handle's) journals are read in place
        own = self._journal.path if self._journal is not None else None
        journal_fold.fold_abandoned(self.journal_dir, own, lambda p: self._fold(p, recovering=True), strict=strict)

    def _reconcile_log(self) -> bool:
        """Bring the Delta log in line with the files (``deltalog.reconcile``): live files it
        lacks are added, superseded ones removed.  A live file the log has removed already (a
        rewrite killed after logging, before deleting its inputs) counts as superseded from now
        on.  Returns whether superseded files may be deleted: the log no longer lists them (or
        the DB keeps no log: an older schema).  A log that cannot be written (a full disk, a
        read-only medium) is left for a later refresh, and so are the files."""
        if not self.writable_schema:
            return True
        root = str(self.records_dir) + os.sep
        live = [f for p in self._parts.values() for f in p.live if f.startswith(root) and f.endswith(".parquet")]
        try:
            st = deltalog.read_state(self.records_dir)
            removed = [f for f in live if deltalog.relative(self.records_dir, f) in st.removed]
            gone = set(removed)
            deltalog.reconcile(self.records_dir, [f for f in live if f not in gone], [*self._superseded, *removed],
                               clean_temps=self._refreshes <= 1)
        except OSError:
            return False
        if removed:
            self._superseded = [*self._superseded, *removed]
            self._relist = True
        return True

    # ------------------------------------------------------- in-memory index
    def _remove_superseded(self) -> None:
        """Delete the files that compacted files supersede (left by a compaction killed between
        publishing its output and deleting its inputs).  The caller holds the DB lock shared:
        no compaction runs, and every tunedb reader ignores these files already (one that still
        reads one refreshes and retries).  Where the DB is read-only they stay."""
        removed = False
        for f in self._superseded:
            try:
                os.unlink(f)
                removed = True
            except FileNotFoundError:
                removed = True
            except OSError:
                continue
            self._tables.drop(f)
            p = self._parts.get(os.path.basename(os.path.dirname(f)).rsplit("-", 1)[-1])
            if p is not None:
                p.forget_key(f)
        if removed:
            for d in {os.path.dirname(f) for f in self._superseded}:
                try:
                    fsync_dir(Path(d))
                except OSError:
                    pass
            self._superseded = [f for f in self._superseded if os.path.exists(f)]

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
        if type(records) is Record and self._journal is not None and not self._journal.broken \
                and self._journal.pid == os.getpid():
            return self._commit_one(records)  # a tuner's commit: the same steps, without the array set-up
        if isinstance(records, RecordBatch):
            batch: RecordBatch | None = records
            batch.check()
            recs: list[Record] = []
            rh = batch.table.column("rid_hash").to_numpy()
        else:
            batch = None
            recs = [records] if isinstance(records, Record) else list(records)
            for r in recs:
                if not isinstance(r, Record):
                    raise TypeError(f"commit takes Record objects or a RecordBatch, got {type(r).__name__}")
            if len(recs) > self.SMALL_COMMIT:  # validated vectorised, with the same messages
                batch = RecordBatch.from_records(recs)
                rh = batch.table.column("rid_hash").to_numpy()
            else:
                for r in recs:
                    r.validate()
                rh = np.fromiter((rid_hash(r.record_id) for r in recs), np.int64, len(recs))
        if not len(rh):
            return 0
        if batch is not None:
            tkeys, codes = batch.target_groups()
        else:
            order: dict[str, int] = {}
            codes = np.fromiter((order.setdefault(r.target_key, len(order)) for r in recs), np.int64, len(recs))
            tkeys = list(order)
        with self._lock:
            keep = self._fresh_mask(rh, tkeys, codes)
            n_new = int(keep.sum())
            if not n_new:
                return 0
            committed = parts.now_us()
            # a batch of records written by another tunedb version (a copy) keeps its version
            # columns only through the file path: Records carry no version
            foreign = batch is not None and not recs and pc.any(pc.not_equal(
                batch.table.column("tunedb_version"), TUNEDB_VERSION)).as_py()
            if n_new <= self.SMALL_COMMIT and not foreign:
                if batch is not None and not recs:
                    recs = batch.table.filter(pa.array(keep)) if n_new < len(keep) else batch.table
                    recs = RecordBatch(recs, batch.target_meta).to_records()
                else:
                    recs = [r for r, k in zip(recs, keep.tolist()) if k]
                pending = self._commit_small(recs, committed)
                refreshes = self._refreshes
            else:
                pending = None
                if batch is None:
                    batch = RecordBatch.from_records(recs)
                    tkeys, codes = batch.target_groups()
                table = batch.table
                if n_new < len(keep):
                    table, codes = table.filter(pa.array(keep)), codes[keep]
                self._commit_large(table, tkeys, codes, batch.target_meta, committed)
            if pending is None:
                self._after_commit(tkeys)
                return n_new
        # a journal append: written and fsync'ed outside the handle lock, so that threads
        # committing at the same time share one write and one fsync (``JournalWriter``); raises
        # when it failed, and then nothing of this commit is durable
        journal, ticket = pending
        journal.wait(ticket)
        with self._lock:
            self._overlay_add(recs, refreshes)
            self._after_commit(tkeys)
        return n_new

    def _commit_one(self, r: Record) -> int:
        """``commit`` of one Record while this handle's journal is open (see ``commit``)."""
        r.validate()
        h = rid_hash(r.record_id)
        with self._lock:
            if not self._indexed(r.target_key).fresh_mask(np.array([h], np.int64))[0]:
                return 0
            self._target_meta.setdefault(r.target_key, (r.target_name, r.target_json))
            journal, ticket = self._journal_enqueue([r], parts.now_us())
            refreshes = self._refreshes
        journal.wait(ticket)  # outside the handle lock: see commit
        with self._lock:
            self._overlay_add([r], refreshes)
            self._after_commit([r.target_key])
        return 1

    def _after_commit(self, tkeys: list[str]) -> None:
        """Upkeep after a commit (under the handle lock).  The records are durable already:
        nothing here makes the commit raise."""
        self._maybe_fold_own_journal()
        due, self._compact_due = self._compact_due, set()
        for d in due:  # after the in-memory state is updated: a compaction refreshes it
            try:
                self._maybe_auto_compact(d)
            except OSError:
                pass  # (a full disk: tried again after later commits, or by compact())
        if any(len(self._part(tk).overlay_rids) > self.OVERLAY_LIMIT for tk in tkeys):
            self.refresh()

    def _fresh_mask(self, rh: np.ndarray, tkeys: list[str], codes: np.ndarray) -> np.ndarray:
        """True for each rid hash (of a record of target ``tkeys[codes[i]]``) that this handle
        does not hold yet, and the first of repeats within ``rh``.  Looks only at the records'
        own targets (record identity is per target; see ``tunedb.index.parquet.partition``)."""
        if len(tkeys) == 1:
            return self._indexed(tkeys[0]).fresh_mask(rh)
        keep = np.zeros(len(rh), bool)
        for c, tk in enumerate(tkeys):
            idx = np.flatnonzero(codes == c)
            keep[idx] = self._indexed(tk).fresh_mask(rh[idx])
        return keep

    def _commit_small(self, recs: list[Record], committed: int) -> tuple | None:
        """Write ``recs`` to one file per target and keep them in the overlay; or, up to
        ``JOURNAL_MAX`` records, queue them on the journal and return (journal, ticket) for the
        caller to wait on outside the handle lock (see ``commit``)."""
        for r in recs:
            self._target_meta.setdefault(r.target_key, (r.target_name, r.target_json))
        if len(recs) <= self.JOURNAL_MAX and self._journal_writable():
            return self._journal_enqueue(recs, committed)
        by_target: dict[str, list[Record]] = {}
        for r in recs:
            by_target.setdefault(r.target_key, []).append(r)
        specs = []
        for tkey, group in by_target.items():
            first = group[0]
            # one C++ conversion of the rows (27 per-column conversions cost more for a few rows)
            table = journal_table([journal_row(r, committed) for r in group])
            specs.append(parts.PartSpec(_slug(first.target_name, tkey), table,
                                        parts.target_file_meta(tkey, first.target_name, first.target_json)))
        for path in parts.publish_parts(self.records_dir, specs):  # all targets or none
            assert path is not None
            self._count_commit(path.parent, "part")
        self._overlay_add(recs)
        return None

    def _journal_writable(self) -> bool:
        if self._journal is not None:
            return True
        return self.journal_dir.is_dir() and os.access(self.journal_dir, os.W_OK)

    def _overlay_add(self, recs: list[Record], refreshes: int | None = None) -> None:
        """Keep ``recs`` (just committed) in their partitions' overlays.  ``refreshes``: the
        refresh count when a journal append began outside the handle lock; a refresh since then
        may have indexed them already, and those are left out."""
        by_target: dict[str, list[Record]] = {}
        for r in recs:
            by_target.setdefault(r.target_key, []).append(r)
        for tk, group in by_target.items():
            p = self._part(tk)
            if refreshes is not None and refreshes != self._refreshes and p.loaded:
                rh = np.fromiter((rid_hash(r.record_id) for r in group), np.int64, len(group))
                group = [r for r, new in zip(group, p.fresh_mask(rh).tolist()) if new]
            p.overlay_add(group)

    def _commit_large(self, table: pa.Table, tkeys: list[str], codes: np.ndarray, target_meta: dict,
                      committed: int) -> None:
        """Write ``table`` (one file per target) and index its files lazily (next query)."""
        written = parts.write_targets(self.records_dir, table, tkeys, codes, target_meta, committed)
        for tkey, path, full in written:
            self._target_meta.setdefault(tkey, target_meta[tkey])
            self._count_commit(path.parent, "part")
            self._part(tkey).add_file(str(path), Chunk(path, tkey, memindex.index_cols(full), []))

    def _count_commit(self, d: Path, prefix: str) -> None:
        self._commits_since_scan[str(d)] = self._commits_since_scan.get(str(d), 0) + 1
        if prefix == "part" and self._commits_since_scan[str(d)] % 16 == 0:
            self._compact_due.add(d)

    def _maybe_auto_compact(self, d: Path) -> None:
        n = parts.count_parts(d)
        if n is not None and n > self.AUTO_COMPACT_FILES:
            # no refresh: the handle's arrays still hold the same records; a row whose file
            # was merged away is found again by the refresh-and-retry of lookup/best
            self._rewrite_partitions([d], keep=None, blocking=False, small_only=True, refresh=False)

    # ----------------------------------------------------------- rewriting
    def _rewrite_partitions(self, dirs: list[Path], keep, *, blocking: bool = True,
                            min_files: int = 2, small_only: bool = False, refresh: bool = True,
                            operation: str = "OPTIMIZE", atomic: bool = False) -> dict:
        """Rewrite each partition into one compacted file, keeping rows where ``keep(table)``
        is true (all rows when None).  Runs under the DB lock; concurrent appends are never
        touched (only files listed at the start are merged; see ``parts.rewrite_partition``).
        Each partition is one Delta log version (``operation``), or with ``atomic`` the whole
        rewrite is one, and all-or-nothing (a failure in any partition undoes the others)."""
        stats = {"partitions": 0, "files_before": 0, "files_after": 0, "rows_before": 0, "rows_after": 0}
        with file_lock(self.path / "_lock", blocking=blocking) as held:
            if not held:
                return stats
            deferred: list[parts.Rewrite] | None = [] if atomic else None
            try:
                for d in dirs:
                    st = parts.rewrite_partition(self.records_dir, Path(d), keep, min_files=min_files,
                                                 small_only=small_only, small_bytes=self.AUTO_COMPACT_MAX_BYTES,
                                                 written=lambda p: self._count_commit(p.parent, "cpart"),
                                                 operation=operation, deferred=deferred)
                    if st is not None:
                        for k in stats:
                            stats[k] += st[k]
            except BaseException:
                if deferred:
                    parts.abandon_rewrites(deferred)
                raise
            if deferred:
                parts.finish_rewrites(self.records_dir, deferred, operation)
        if refresh:
            self.refresh()
        return stats

    def _fold_journals(self) -> None:
        """Fold this handle's journal and abandoned ones, so a rewrite sees their records.
        OSError when one cannot be written (a full disk); a read-only DB folds nothing."""
        with self._lock:
            self._fold_own_journal()
            self._fold_abandoned_journals(strict=True)  # (none for an older schema: read in place)

    def _all_partition_dirs(self) -> list[Path]:
        return parts.partition_dirs(self.records_dir)

    def _partition_dirs_of(self, target: Any) -> list[Path]:
        tkey = self._target_key(target)
        return [p for p in self._all_partition_dirs() if p.name.endswith(tkey[:16])]

    def compact(self) -> dict:
        """Merge the files of every partition into one (under the DB lock).  Returns counts.
        OSError (e.g. ENOSPC) when it cannot write: then what it had not finished is as it
        was (each partition's rewrite is all-or-nothing) and nothing is lost."""
        self._check_writable()
        self._fold_journals()
        return self._rewrite_partitions(self._all_partition_dirs(), keep=None)

    def dedup(self) -> dict:
        """Remove repeated identical measurements: same (target, workload, config), status
        and costs; the earliest is kept.  Returns counts (``removed``)."""
        self._check_writable()
        self._fold_journals()
        st = self._rewrite_partitions(self._all_partition_dirs(), keep=dedup_mask, operation="DELETE", atomic=True)
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
        dirs = self._partition_dirs_of(target) if target is not None else self._all_partition_dirs()
        if target is not None and not dirs:
            raise ValueError(f"unknown target {target!r}")
        cutoff = None
        if older_than_days is not None:
            cutoff = parts.now_us() - int(older_than_days * 86400e6)
        drop_all = target is not None and keep_top is None and older_than_days is None

        def keep(t: pa.Table) -> np.ndarray:
            return retention_mask(t, keep_top=keep_top, cutoff_us=cutoff, drop_all=drop_all)
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
            root = str(self.records_dir) + os.sep
            return [Path(f) for p in self._parts.values() for f in p.live
                    if f.startswith(root) and f.endswith(".parquet")]

    def invalidate(self, target: Any) -> str:
        """Mark ``target`` stale (e.g. after a toolchain upgrade): its records committed until
        now no longer answer ``lookup``/``best``; later measurements do.  Returns its key."""
        self._check_writable()
        tkey = self._target_key(target)
        if tkey not in self._target_meta and not self._partition_dirs_of(tkey):
            raise ValueError(f"unknown target {target!r}")
        invalidations.append(self.inval_dir, tkey, self._target_meta.get(tkey, ("", ""))[0])
        self.refresh()
        return tkey

    def mark(self, verdicts_: dict[str, str]) -> int:
        """Store a verdict per record_id (``verdicts/``; see ``RecordStore.mark``)."""
        from tunedb.index.checks import check_verdicts

        check_verdicts(verdicts_)
        self._check_writable()  # (an older schema's DB is read-only)
        if not verdicts_:
            return 0
        rids = list(verdicts_)
        with self._lock:
            rh = rid_hashes(rids)
            fresh = np.ones(len(rh), bool)
            for p in self._all_loaded():  # (a record_id alone does not name its target)
                fresh &= p.fresh_mask(rh)
            if fresh.any():
                raise ValueError(f"verdict for record {rids[int(np.flatnonzero(fresh)[0])]}: "
                                 "the store holds no such record")
            verdicts.append(self.verdict_dir, dict(verdicts_))
        self.refresh()
        return len(verdicts_)

    def verdicts(self) -> dict[str, str]:
        """record_id -> latest verdict (as of the last refresh or own ``mark``)."""
        with self._lock:
            return dict(self._verdicts)

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
        if isinstance(target, str):
            if re.fullmatch(r"[0-9a-f]{32}", target):
                return target
            found = self.find_target(target)
            if found is None:
                raise ValueError(f"unknown target {target!r}")
            return key_of_text(canonical_json(found))
        return self._keys.canon(target, "target")[1]

    def _workload_key(self, workload: Any) -> str:
        """Key of a workload given as a dict, a Record or a workload_key."""
        if isinstance(workload, str) and re.fullmatch(r"[0-9a-f]{32}", workload):
            return workload
        return self._keys.canon(workload, "workload")[1]

    def _materialise(self, p: Partition, i: int, tw: tuple | None = None) -> Record:
        """Record of row ``i`` of partition ``p``'s arrays; ``tw``: its target and workload when
        the caller knows them (see ``rowcache.record_at``)."""
        a = p.arrays.a
        t = self._tables.get(p.files[a["file"].item(i)], self._mem, self.TABLE_CACHE_ROWS)
        return record_at(t, a["row"].item(i), a["lookup_key"].item(i), None, self._keys.json, tw)

    def _materialise_at(self, p: Partition, fidx: int, row: int, lk: int, known: tuple | None = None) -> Record:
        """Record of ``row`` of live file ``fidx`` of partition ``p`` (its decoded table; see
        ``rowcache.record_at`` for ``known``).  FileNotFoundError: the file was merged away; the
        caller refreshes and retries."""
        t = self._tables.get(p.files[fidx], self._mem, self.TABLE_CACHE_ROWS)
        return record_at(t, row, lk, known, self._keys.json)

    def _entry_of(self, target: Any, workload: Any) -> tuple:
        """(target JSON, workload JSON, target_key, workload_key, BLAKE2b state of the lookup-key
        prefix, target dict, workload dict) of a (target, workload).  Each side is memoised by
        value, the prefix by the key pair (see ``tunedb.index.parquet.querykeys``).  JSON texts and dicts are
        None when given as keys or names."""
        keys = self._keys
        if isinstance(target, str):
            tj, tkey, tdict = None, self._target_key(target), None
        else:
            tj, tkey = keys.canon(target, "target")
            tdict = keys.json(tj)
        if isinstance(workload, str):
            wj, wkey, wdict = None, self._workload_key(workload), None
        else:
            wj, wkey = keys.canon(workload, "workload")
            wdict = keys.json(wj)
        prefix = keys.prefix(tkey, wkey)
        return tj, wj, tkey, wkey, prefix, tdict, wdict

    def _retrying(self, query, *args: Any) -> Any:
        """``query(*args)``, refreshed and repeated when a compaction merged away a file one of
        its rows lived in (FileNotFoundError), up to three times."""
        for _attempt in range(3):
            try:
                return query(*args)
            except FileNotFoundError:
                self.refresh()
        return query(*args)

    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The cached measurement of (target, workload, config), or None (see ``_lookup``)."""
        return self._retrying(self._lookup, target, workload, config)

    def _lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The cached measurement of (target, workload, config), or None.

        Failed measurements are returned too (so they are never retried).  When a triple
        was measured more than once the latest measurement answers.  Records of an
        invalidated target committed before its invalidation never answer."""
        tj, wj, tkey, wkey, prefix, tdict, wdict = self._entry_of(target, workload)
        if isinstance(config, str):
            cj, ckey = None, config
        else:
            # a flat dict of plain scalars is its own normal form: a copy of it is the Record's
            # config (no parsing of cj)
            cj, flat = canonical_json_flat(config)
            ckey = key_of_text(cj)
        h = prefix.copy()  # == hash64(tkey, wkey, ckey), without re-hashing the two fixed keys
        h.update(ckey.encode())
        lk = int.from_bytes(h.digest(), "little", signed=True)
        with self._lock:
            p = self._parts.get(tkey[:16])
            self.lookups += 1
            if p is None:
                return None
            self._loaded(p)
            r = p.overlay.get(lk)
            if r is not None:
                if r.record_id in self._refuted:
                    return None
                self.hits += 1
                return r
            pos = p.last_row_of(lk)
            if pos is None:
                return None
            self.hits += 1
            known = None
            if tj is not None and wj is not None and cj is not None:
                known = (tdict, wdict, dict(config) if flat else json.loads(cj), tj, wj, cj, tkey, wkey, ckey)
            rec = self._materialise_at(p, pos >> 32, pos & 0xFFFFFFFF, lk, known)
            if self._refuted and rec.record_id in self._refuted:
                self.hits -= 1
                return None
            return rec

    def lookup_many(self, target: Any, workload: Any, configs: Iterable[Any]) -> list[Record | None]:
        """:meth:`lookup` of each config of one (target, workload), in order (see ``lookup_batch``)."""
        return list(self.lookup_batch(target, workload, configs))

    def lookup_batch(self, target: Any, workload: Any, configs: Iterable[Any]) -> Lookups:
        """The answers of a population of configs of one (target, workload) (see
        ``RecordStore.lookup_batch``): the entry's key prefix is hashed once, the configs' lookup
        keys are searched in the partition's sorted key array in one ``searchsorted``, and an
        answering Record is built only when it is read (from the file that held it at the time of
        the look-up; one merged away since is looked up again)."""
        return self._retrying(self._lookup_batch, target, workload, list(configs))

    def _lookup_batch(self, target: Any, workload: Any, configs: list) -> Lookups:
        tj, wj, tkey, wkey, prefix, tdict, wdict = self._entry_of(target, workload)
        n = len(configs)
        texts: list = canonical_json_flat_many([{} if isinstance(c, str) else c for c in configs])
        lk_list = []
        copy, from_bytes = prefix.copy, int.from_bytes
        for i, config in enumerate(configs):
            if isinstance(config, str):
                ckey = config
                texts[i] = None
            else:
                ckey = key_of_text(texts[i][0])
            h = copy()
            h.update(ckey.encode())
            lk_list.append(from_bytes(h.digest(), "little", signed=True))
        lks = np.array(lk_list, np.int64)
        with self._lock:
            p = self._parts.get(tkey[:16])
            self.lookups += n
            if p is None or not n:
                return Lookups(np.zeros(n, bool), lambda i: None)
            ar = self._loaded(p).arrays
            ks = ar.last_keys
            if len(ks):
                at = ks.searchsorted(lks)
                at[at == len(ks)] = len(ks) - 1
                found = ks[at] == lks
                packed = ar.last_packed[at]
            else:
                found, packed = np.zeros(n, bool), np.zeros(n, np.int64)
            overlay = {i: r for i, lk in enumerate(lk_list) if (r := p.overlay.get(lk)) is not None} \
                if p.overlay else {}
            for i in overlay:
                found[i] = True
            files = list(p.files)

            def fetch(i: int) -> Record | None:
                if i in overlay:
                    rec = overlay[i]
                else:
                    known = None
                    if tj is not None and wj is not None and texts[i] is not None:
                        cj, flat = texts[i]
                        known = (tdict, wdict, dict(configs[i]) if flat else json.loads(cj), tj, wj, cj, tkey, wkey,
                                 key_of_text(cj))
                    pos = int(packed[i])
                    try:
                        with self._lock:
                            t = self._tables.get(files[pos >> 32], self._mem, self.TABLE_CACHE_ROWS)
                            rec = record_at(t, pos & 0xFFFFFFFF, int(lks[i]), known, self._keys.json)
                    except FileNotFoundError:  # merged away since: the answer is the same record
                        return self.lookup(target, workload, configs[i])
                return None if rec.record_id in self._refuted else rec

            if self._refuted:  # (rare) a refuted answer is no answer: build the hits now to know
                built = {i: fetch(i) for i in np.flatnonzero(found).tolist()}
                found = np.array([built.get(i) is not None for i in range(n)], bool)
                lookups = Lookups(found, built.__getitem__)
            else:
                lookups = Lookups(found, fetch)
            self.hits += lookups.hits
            return lookups

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list:
        """``RecordStore.best_costs``, computed from the partition's decoded columns: only the
        ``k`` representative records are built as Records (the contract's definition through
        ``estimate.rank_arrays``, which ``estimate.rank`` uses too)."""
        if k <= 0:
            return []
        return self._retrying(self._best_costs, target, workload, k)

    def _entry_query(self, target: Any, workload: Any) -> tuple[str, int, tuple | None]:
        """(target_key, entry key, ``tw``) of a (target, workload) query: ``tw`` is its target and
        workload as ``rowcache.record_at`` takes them (the rows' own are the query's: not read
        back, their config is), None when given as keys or names."""
        tj, wj, tkey, wkey, _, tdict, wdict = self._entry_of(target, workload)
        tw = (tdict, wdict, tj, wj, tkey, wkey) if tj is not None and wj is not None else None
        return tkey, hash64(tkey, wkey), tw

    def _best_costs(self, target: Any, workload: Any, k: int) -> list:
        from tunedb.index.estimate import CONFIRM_ORIGINS, ConfigCost, rank, rank_arrays

        tkey, ek, tw = self._entry_query(target, workload)
        with self._lock:
            p = self._parts.get(tkey[:16])
            if p is None:
                return []
            if p.overlay_entries.get(ek):  # this handle's small commits, not in the arrays yet
                return rank(self._entry_records(target, workload), k)
            ar = self._loaded(p).arrays
            rows = np.asarray(memindex.entry_rows(ar.a, ar.by_entry, ar.entry_sorted, ek, self._refuted_hashes),
                              np.int64)
            if not len(rows):
                return []
            files, frows = ar.a["file"][rows], ar.a["row"][rows]
            n = len(rows)
            ckeys = np.empty(n, "S32")
            starts = np.zeros(n, np.int64)
            lengths = np.zeros(n, np.int64)
            ts = np.zeros(n, np.int64)
            confirm = np.zeros(n, bool)
            noisy = np.zeros(n, bool)
            values, base = [], 0
            for f in np.unique(files):
                t = self._tables.get(p.files[int(f)], self._mem, self.TABLE_CACHE_ROWS)
                at = np.flatnonzero(files == f)
                r = frows[at]
                ckeys[at] = t["_cfg_key"][r]
                off = t["_cost_off"]
                starts[at] = base + off[r]
                lengths[at] = off[r + 1] - off[r]
                ts[at] = t["_ts"][r]
                values.append(t["_cost_val"])
                base += len(t["_cost_val"])
                # the confirmation and noise flags of each distinct meta text, then per row
                combos = t["_combos"]
                if combos is not None:
                    texts, codes = [c[5] for c in combos], t["_combo"][r]
                else:
                    codes_all, texts = t["_combo"][5]
                    codes = codes_all[r]
                flags = np.array([_meta_flags(m, CONFIRM_ORIGINS) for m in texts], bool).reshape(-1, 2)
                confirm[at], noisy[at] = flags[codes, 0], flags[codes, 1]
            sel = np.flatnonzero(lengths > 0)
            uniq, group = np.unique(ckeys, return_inverse=True)
            keys = [u.decode() for u in uniq.tolist()]
            ln = lengths[sel]
            idx = np.repeat(starts[sel] - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln) + np.arange(int(ln.sum()))
            flat = np.concatenate(values)[idx] if len(values) else np.zeros(0)
            ranked = rank_arrays(flat, ln, keys, group[sel], confirm[sel], noisy[sel], ts[sel], k)
            out = []
            for gi, est, j in ranked:
                rec = self._materialise(p, int(rows[sel[j]]), tw)
                if self._refuted and rec.record_id in self._refuted:  # (a rid-hash collision: rare)
                    return rank(self._entry_records(target, workload), k)
                out.append(ConfigCost(config_key=keys[gi], config=rec.config, estimate=est, record=rec))
        return out

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """Every live, ok, unrefuted record of (target, workload) (see ``RecordStore``)."""
        return self._retrying(self._entry_records, target, workload)

    def _entry_records(self, target: Any, workload: Any) -> list[Record]:
        tkey, ek, tw = self._entry_query(target, workload)
        with self._lock:
            p = self._parts.get(tkey[:16])
            if p is None:
                return []
            ar = self._loaded(p).arrays
            rows = memindex.entry_rows(ar.a, ar.by_entry, ar.entry_sorted, ek, self._refuted_hashes)
            out = [self._materialise(p, i, tw) for i in rows]
            seen = {r.record_id for r in out}
            out.extend(r for r in p.overlay_entries.get(ek, ()) if r.ok and r.record_id not in seen)
            if self._refuted:
                out = [r for r in out if r.record_id not in self._refuted]
        return out

    def _live_paths(self, prefix: str | None = None) -> list[str]:
        """Live chunk keys (files, journal rows) of every partition, or of one target-key prefix;
        this handle's own pending commits are folded in first (a refresh)."""
        def selected() -> list[Partition]:
            if prefix is None:
                return list(self._parts.values())
            return [self._parts[prefix]] if prefix in self._parts else []
        with self._lock:
            pending = any(p.overlay or p.dirty for p in selected())
        if pending:
            self.refresh()
        with self._lock:
            return [k for p in selected() for k in p.live]

    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """All records (optionally of one target and/or workload) as a new pyarrow Table,
        de-duplicated by record_id, with the columns of ``tunedb.index.schema.RECORD_SCHEMA``.
        With a ``target``, only that target's files are read.  ``columns`` (see
        ``RecordStore.records``): only those columns are read from the files (Parquet column
        projection) and from the journals' rows, plus the few the filters and the
        de-duplication need (``rid_hash``; ``target_key``/``workload_key`` to filter;
        ``committed`` for the stale filter), which are dropped again before returning."""
        cols = check_columns(columns)
        tkey = self._target_key(target) if target is not None else None
        wkey = self._workload_key(workload) if workload is not None else None
        stale_cols = ["target_key", "committed"]
        while True:
            read_cols = None
            if cols is not None:
                need = ["rid_hash"] + (["target_key"] if tkey is not None else []) + \
                    (["workload_key"] if wkey is not None else []) + \
                    (stale_cols if not include_stale and self._invalidated else [])
                read_cols = cols + [c for c in dict.fromkeys(need) if c not in cols]
            t = self._read_live(tkey[:16] if tkey else None, read_cols)
            if include_stale or not self._invalidated or all(c in t.column_names for c in stale_cols):
                break
            # (a refresh while reading brought the first invalidation: read again with its columns)
        if tkey is not None:
            t = t.filter(pc.equal(t.column("target_key"), tkey))
        if wkey is not None:
            t = t.filter(pc.equal(t.column("workload_key"), wkey))
        if t.num_rows > 1:
            rh = np.sort(t.column("rid_hash").to_numpy())
            if (rh[1:] == rh[:-1]).any():  # (a plain sort first: repeats are rare, first_by_record_id's is slower)
                t = tables.first_by_record_id(t)
        if not include_stale:
            t = tables.drop_stale(t, self._invalidated)
        return t if cols is None else t.select(cols)

    def _read_live(self, prefix: str | None, columns: list[str] | None = None) -> pa.Table:
        """The rows (not de-duplicated) of every live file and journal, or of one target-key
        prefix's; ``columns``: only those (else every ``RECORD_SCHEMA`` column), in that order,
        with their ``RECORD_SCHEMA`` types (a schema-1 file's missing ``host``/``origin`` read
        as ``""``, as in :func:`~tunedb.index.schema.conform`)."""
        with file_lock(self.path / "_lock", shared=True):
            for _attempt in range(20):
                paths = self._live_paths(prefix)
                try:
                    files = _read_files([p for p in paths if p not in self._mem], columns)
                    got = iter(files)
                    read = [self._mem[p].select([c for c in columns if c in self._mem[p].column_names])
                            if columns and p in self._mem else
                            self._mem[p] if p in self._mem else next(got) for p in paths]
                    break
                except FileNotFoundError:
                    self.refresh()
            else:
                raise RuntimeError("DB kept changing while reading")
        read = [conform(x, columns or None) for x in read]
        if not read:
            return empty_records(columns or None)
        return pa.concat_tables([x.replace_schema_metadata(None) for x in read], promote_options="default")

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
        out = None
        if cached is not None:
            try:
                out = pq.ParquetFile(cached).read(use_threads=False)
            except (OSError, pa.ArrowInvalid):
                out = None
        if out is None:
            t = self._read_live(None, tables.ENTRY_COLUMNS + tables.ESTIMATE_COLUMNS + ["rid_hash", "committed"])
            out = tables.entries(tables.drop_stale(tables.first_by_record_id(t), self._invalidated))
            if cached is not None and self._index_cache is not None:
                replace_derived(cached, lambda tmp: pq.write_table(out, tmp), "entries*-*.parquet")
        self._entries_memo = (token, out)
        return out

    def targets(self) -> list[dict]:
        """Every target holding records: target_key, target_name, target (dict), records (every
        stored record, stale ones included, as ``records()`` and the other backends count)."""
        with self._lock:
            counts: dict[str, int] = {}
            for p in self._all_loaded():  # (one target per partition)
                counts[p.target_key] = counts.get(p.target_key, 0) + p.count()
            out = []
            for tk, c in counts.items():
                if c == 0:
                    continue
                name, tj = self._target_meta.get(tk, ("", "{}"))
                out.append({"target_key": tk, "target_name": name, "target": json.loads(tj), "records": c})
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def _all_target_meta(self) -> dict[str, tuple[str, str]]:
        """target_key -> (name, canonical JSON) of every target with records: from the files and
        journals read so far, and one file footer of each partition not read yet."""
        with self._lock:
            for p in list(self._parts.values()):
                if p.target_key and p.target_key in self._target_meta:
                    continue
                for k in p.live:
                    if "::" in k:
                        continue
                    try:
                        tk, target = parts.meta_target(pq.read_schema(k).metadata)
                    except FileNotFoundError:
                        continue
                    if tk and target is not None:
                        self._target_meta.setdefault(tk, target)
                        p.target_key = p.target_key or tk
                        break
            meta = dict(self._target_meta)
            for p in self._parts.values():
                for r in p.overlay.values():
                    meta.setdefault(r.target_key, (r.target_name, r.target_json))
        return meta

    def find_target(self, name_or_key: str) -> dict | None:
        """Target dict of a target in this DB, by target_name or target_key (or a unique key prefix)."""
        meta = self._all_target_meta()
        if name_or_key in meta:
            return json.loads(meta[name_or_key][1])
        by_name = [tj for tk, (n, tj) in meta.items() if n == name_or_key]
        if len(by_name) >= 1:
            return json.loads(by_name[-1])
        if len(name_or_key) >= 6:
            pref = [tj for tk, (n, tj) in meta.items() if tk.startswith(name_or_key)]
            if len(pref) == 1:
                return json.loads(pref[0])
        return None

    def __len__(self) -> int:
        with self._lock:
            return sum(p.count() for p in self._all_loaded())

    def stats(self) -> StoreStats:
        """records, targets, workloads, entries, files, size_bytes, stale_targets, and this
        session's lookups, hits and hit_rate."""
        with self._lock:
            if any(p.overlay for p in self._parts.values()):
                self.refresh()
            ps = self._all_loaded()
            live_ek = np.concatenate([p.arrays.a["entry_key"][p.arrays.a["live"]] for p in ps]) if ps else \
                np.zeros(0, np.int64)
            files = [f for p in ps for f in p.files]
            tkeys = {p.target_key for p in ps if int(p.arrays.a["live"].sum())}
        size = tree_bytes(self.records_dir, self.journal_dir)
        n_work = 0
        if len(live_ek):
            t = self.records(include_stale=False)
            n_work = len(pc.unique(t.column("workload_key")))
        return StoreStats(records=len(self), targets=len(tkeys), workloads=n_work, entries=int(len(np.unique(live_ek))),
                          files=len(files), size_bytes=int(size), stale_targets=sorted(self._invalidated),
                          lookups=self.lookups, hits=self.hits, location=str(self.path))

    # ------------------------------------------------------------- derived data
    def cache_dir(self) -> Path:
        """``<db>/derived``: rebuildable caches (the vector index)."""
        return self.derived_dir

    def change_token(self) -> tuple:
        """Changes whenever the records may have: the names of the record, invalidation and
        verdict files, the journals' sizes and this handle's own uncommitted-to-Parquet records
        (no partition is loaded to compute it)."""
        names: list[str] = []
        for base in (self.records_dir, self.inval_dir, self.verdict_dir):
            for root, _, files in os.walk(base):  # (relative: a copy of the DB has the same token)
                rel = os.path.relpath(root, self.path)
                names.extend(os.path.join(rel, f) for f in files if not f.startswith("_"))
        with self._lock:
            own = sum(len(p.overlay_rids) for p in self._parts.values())
        try:  # journaled commits: the journals' sizes on disk
            jsig = sorted((e.name, e.stat().st_size) for e in os.scandir(self.journal_dir))
        except FileNotFoundError:
            jsig = []
        text = "\n".join(sorted(names) + [f"{k}\0{v}" for k, v in jsig])
        # (a stable digest, not hash(): a token may be stored and compared by another process)
        return (own, hashlib.blake2b(text.encode(), digest_size=16).hexdigest())

    @property
    def location(self) -> str:
        return str(self.path)


#: The Parquet backend's former name, kept so that existing code keeps working.
TuningDB = ParquetStore
