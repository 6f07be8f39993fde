"""Rewrites of a DB's part files: compaction, dedup and retention, and the clean-up after them.

A rewrite replaces the files of a partition by one compacted file (``parts.rewrite_partition``:
the output names the files it supersedes, is logged in the Delta log in one version with their
removal, and only then are the inputs deleted).  This module holds the store's side of it as
plain functions over explicit state:

* ``CompactionDue`` counts the files a handle publishes and says when a partition is due for
  an automatic compaction;
* ``rewrite_partitions`` rewrites a list of partition directories under the DB lock
  (exclusive), each partition as one log version, or all of them as one (``atomic``);
* ``forget_keep`` is the row filter of ``forget`` (``tunedb.index.contract.retention``);
* ``reconcile_log`` brings the Delta log in line with the files an opener found (a writer or
  a rewrite killed half-way), and ``remove_superseded`` deletes the inputs a killed rewrite
  left behind -- never a file an outside Delta writer removed from the log;
* ``sync_outside`` repairs an unreadable log and adopts outside Delta writers' changes
  (``tunedb.index.parquet.outside``); every rewrite does it first, under its lock.

Durability: every output is durable (fsync'ed, renamed, directory fsync'ed) before its inputs
are removed from the log, and they are removed from the log before they are deleted, so a
crash at any point loses no record and double-counts none, for tunedb and for outside readers.

Locking: ``rewrite_partitions`` takes the DB lock (the ``_lock`` file) exclusively itself;
``remove_superseded`` expects the caller to hold it shared (no rewrite runs meanwhile).  None of
these touches a handle's in-memory state: the store refreshes afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from tunedb.index.contract.retention import retention_mask
from tunedb.index.parquet import deltalog, outside, parts
from tunedb.index.support.fsutil import file_lock, fsync_dir

#: the row filter of a rewrite: True for each row to keep (None: keep every row)
Keep = Callable[[pa.Table], np.ndarray] | None


class CompactionDue:
    """Which partitions are due for an automatic-compaction check: every ``EVERY``-th part file
    a handle publishes in a partition makes it due (compacted files are counted, never due).
    Not thread-safe: the store calls it under its handle lock."""

    EVERY = 16

    def __init__(self) -> None:
        self.published: dict[str, int] = {}  # partition directory -> files this handle published there
        self.due: set[Path] = set()

    def count(self, d: Path, prefix: str) -> None:
        """A file of kind ``prefix`` (``part``, ``cpart``) was published in partition ``d``."""
        self.published[str(d)] = self.published.get(str(d), 0) + 1
        if prefix == "part" and self.published[str(d)] % self.EVERY == 0:
            self.due.add(d)

    def part_published(self, path: Path) -> None:
        """Part file ``path`` was published (a commit, a journal fold)."""
        self.count(path.parent, "part")

    def take(self) -> set[Path]:
        """The partitions due now (and none from then on until counted again)."""
        due, self.due = self.due, set()
        return due


def rewrite_partitions(records_dir: Path, db_lock: Path, dirs: Iterable[Path], keep: Keep, *,
                       written: Callable[[Path], None], blocking: bool = True, min_files: int = 2,
                       small_only: bool = False, small_bytes: int = 1 << 20, operation: str = "OPTIMIZE",
                       atomic: bool = False) -> dict:
    """Rewrite each partition directory of ``dirs`` into one compacted file, keeping rows where
    ``keep(table)`` is true (all rows when None); ``written(path)`` is called for each file
    published.  Runs under the DB lock ``db_lock`` (exclusive; without ``blocking`` nothing is
    done when another process holds it).  Concurrent appends are never touched (only files
    listed at the start are merged; see ``parts.rewrite_partition``).  Each partition is one
    Delta log version (``operation``), or with ``atomic`` the whole rewrite is one, and
    all-or-nothing (a failure in any partition undoes the others).  Returns counts: partitions,
    files_before, files_after, rows_before, rows_after.  OSError when it cannot write."""
    stats = {"partitions": 0, "files_before": 0, "files_after": 0, "rows_before": 0, "rows_after": 0}
    with file_lock(db_lock, blocking=blocking) as held:
        if not held:
            return stats
        _sync_held(records_dir)  # (an outside writer's changes first: its removed files are not merged back)
        deferred: list[parts.Rewrite] | None = [] if atomic else None
        try:
            for d in dirs:
                st = parts.rewrite_partition(records_dir, Path(d), keep, min_files=min_files,
                                             small_only=small_only, small_bytes=small_bytes,
                                             written=written, operation=operation, deferred=deferred)
                if st is not None:
                    for k in stats:
                        stats[k] += st[k]
        except BaseException:
            if deferred:
                parts.abandon_rewrites(deferred)
            raise
        if deferred:
            parts.finish_rewrites(records_dir, deferred, operation)
    return stats


def forget_keep(keep_top: int | None, older_than_days: float | None, drop_all: bool) -> Keep:
    """The row filter of ``forget`` (checked options; see ``tunedb.index.contract.retention``): the
    ``keep_top`` best ok records per (target, workload), those measured within
    ``older_than_days`` days, or none (``drop_all``)."""
    cutoff = None
    if older_than_days is not None:
        cutoff = parts.now_us() - int(older_than_days * 86400e6)

    def keep(t: pa.Table) -> np.ndarray:
        return retention_mask(t, keep_top=keep_top, cutoff_us=cutoff, drop_all=drop_all)
    return keep


class Reconciled(NamedTuple):
    """What ``reconcile_log`` did: ``ok`` -- superseded files may be deleted (the log no longer
    lists them); ``removed`` -- live files a tunedb version removed from the log (superseded from
    now on); ``keep`` -- superseded files an outside writer removed from the log (never deleted
    by tunedb); ``outside`` -- the log holds outside changes to adopt first (``sync_outside``:
    nothing was logged or may be deleted); ``corrupt`` -- the log cannot be read (the same)."""

    ok: bool
    removed: list[str]
    keep: frozenset[str] = frozenset()
    outside: bool = False
    corrupt: deltalog.CorruptLogError | None = None


def reconcile_log(records_dir: Path, live: list[str], superseded: list[str], *, clean_temps: bool) -> Reconciled:
    """Bring the Delta log in line with the files (``deltalog.reconcile``): ``live`` files it
    lacks are added, ``superseded`` ones removed.  A live file a tunedb version has removed
    already (a rewrite killed after logging, before deleting its inputs) counts as superseded
    from now on.  When the log holds an outside writer's changes (``outside.pending``) or cannot
    be read, nothing is done and the result says so: the caller adopts or repairs under the DB
    lock, exclusive (``sync_outside``), and reconciles again.  A log that cannot be written (a
    full disk, a read-only medium) is left for a later refresh, and so are the files."""
    try:
        st = deltalog.read_state(records_dir)
        if outside.pending(records_dir, st, live, superseded):
            return Reconciled(False, [], outside=True)
        rel = {f: deltalog.relative(records_dir, f) for f in (*live, *superseded)}
        removed = [f for f in live if rel[f] in st.own_removed and rel[f] not in st.live]
        keep = frozenset(f for f in superseded if st.foreign_removed(rel[f]))
        gone = set(removed)
        deltalog.reconcile(records_dir, [f for f in live if f not in gone], [*superseded, *removed],
                           clean_temps=clean_temps)
    except deltalog.CorruptLogError as e:
        return Reconciled(False, [], corrupt=e)
    except OSError:
        return Reconciled(False, [])
    return Reconciled(True, removed, keep)


def sync_outside(records_dir: Path, db_lock: Path, *, blocking: bool = True) -> list[Path] | None:
    """Under the DB lock (exclusive; taken here): move unreadable log versions aside
    (``deltalog.repair``) and adopt outside writers' changes (``outside.adopt``), so that the
    next ``reconcile_log`` finds a log it can follow.  Returns where repaired versions went, or
    None when not ``blocking`` and another holder has the lock (nothing done).  ValueError (one
    line) for an outside file tunedb cannot adopt; OSError when it cannot write."""
    with file_lock(db_lock, blocking=blocking) as held:
        if not held:
            return None
        return _sync_held(records_dir)


def _sync_held(records_dir: Path) -> list[Path]:
    moved = deltalog.repair(records_dir) if deltalog.log_dir(records_dir).is_dir() else []
    outside.adopt(records_dir)
    return moved


def remove_superseded(superseded: list[str], removed: Callable[[str], None]) -> list[str]:
    """Delete the files of ``superseded`` (compacted files supersede them: left by a compaction
    killed between publishing its output and deleting its inputs), calling ``removed(path)``
    for each one that is gone; returns those that are still there.  The caller holds the DB
    lock shared: no compaction runs, and every tunedb reader ignores these files already (one
    that still reads one refreshes and retries).  Where the DB is read-only they stay."""
    any_removed = False
    for f in superseded:
        try:
            os.unlink(f)
            any_removed = True
        except FileNotFoundError:
            any_removed = True
        except OSError:
            continue
        removed(f)
    if not any_removed:
        return superseded
    for d in {os.path.dirname(f) for f in superseded}:
        try:
            fsync_dir(Path(d))
        except OSError:
            pass
    return [f for f in superseded if os.path.exists(f)]
