"""One target's part of a store handle's in-memory state, built only when a query needs it.

A DB's records are partitioned by target (``records/target_slug=<name>-<16 hex of the key>/``)
and every query names its target, so a handle keeps one ``Partition`` per target-key prefix
(the 16 hex digits in the directory name; the journal rows of that target belong to it too).
Opening a DB only lists the files of each partition; a partition's index -- the
``memindex.INDEX_COLUMNS`` of its files, de-duplicated and sorted (``memindex.build``) -- is read
the first time a query, commit or count touches that target (``load``).  So opening, and what a
process holds in memory, grow with the targets it asks about, not with the whole DB.

A partition holds:

* ``keys``: its chunk keys -- the paths of its published part files and the
  ``<journal>::<target_key>`` keys of its journal rows -- and ``live``, those not superseded by a
  compacted file (sorted; known whether or not the partition is loaded);
* when loaded: ``chunks`` (the index columns of each live key), ``arrays`` and ``files`` (the
  live keys in the arrays' file-index order), the lookup answers among them (``memindex.Arrays``);
* the handle's own commits since the last refresh: ``overlay`` (small commits, as Records, by
  lookup key and by entry key) and ``pending_rids`` (the sorted rid hashes of large commits
  whose files are indexed at the next query, ``dirty``);
* ``ranked``: the kept ``best`` answers of its entries (``tunedb.index.parquet.queries.RankedEntries``),
  valid for its current ``arrays`` only: dropped when they are rebuilt (``load``), when a large
  commit adds files (``add_file``) or the refresh folds its own commits in (``clear_own``),
  and per entry when this handle commits to one (``overlay_add``).

Record identity is per target: a ``record_id`` is a measurement of one target, so
de-duplication (commits, reads) looks only at that target's partition.

Not thread-safe: the store calls it under its handle lock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import Record
from tunedb.index.parquet import indexcache, memindex
from tunedb.index.parquet.memindex import Chunk


class Partition:
    """The state of one target-key prefix (see module docstring)."""

    __slots__ = ("prefix", "target_key", "keys", "live", "superseded", "loaded", "chunks", "arrays",
                 "files", "overlay", "overlay_entries", "overlay_rids", "pending_rids",
                 "dirty", "built_with", "ranked")

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.target_key = ""  # the full key, once a file, journal row or commit named it
        self.keys: set[str] = set()
        self.live: list[str] = []
        self.superseded: list[str] = []
        self.loaded = False
        self.chunks: dict[str, Chunk] = {}
        self.arrays: memindex.Arrays = memindex.build([], {})
        self.files: list[str] = []
        self.overlay: dict[int, Record] = {}
        self.overlay_entries: dict[int, list[Record]] = {}
        self.overlay_rids: set[int] = set()
        self.pending_rids: list[np.ndarray] = []
        self.dirty = False
        self.built_with: object = None  # the invalidation time the arrays were built with
        #: the ranked answers of its entries (``queries.RankedEntries``), valid for ``arrays``
        #: alone: dropped whenever the arrays are rebuilt or a commit adds rows outside them
        self.ranked: Any = None

    # ------------------------------------------------------------------ files
    def set_keys(self, keys: set[str], supersedes: Callable[[str], list[str]]) -> bool:
        """Take ``keys`` as the partition's chunk keys; ``supersedes(key)`` names the files a
        compacted file supersedes.  Returns whether the live set changed."""
        sup: set[str] = set()
        files = [k for k in keys if "::" not in k]
        for k in files if len(files) > 1 else ():  # (a lone compacted file supersedes nothing here)
            if os.path.basename(k).startswith("cpart-"):
                d = os.path.dirname(k)
                sup.update(os.path.join(d, n) for n in supersedes(k))
        live = sorted(k for k in keys if k not in sup)
        changed = live != self.live
        self.keys, self.live, self.superseded = set(keys), live, sorted(sup & keys)
        return changed

    def forget_key(self, key: str) -> None:
        self.keys.discard(key)
        self.chunks.pop(key, None)
        if key in self.live:
            self.live.remove(key)
        if key in self.superseded:
            self.superseded.remove(key)

    # ------------------------------------------------------------------ index
    def invalidated_at(self, invalidated: Mapping[str, int]) -> int | None:
        """When this partition's target was invalidated (microseconds), or None."""
        if self.target_key:
            return invalidated.get(self.target_key)
        return next((v for k, v in invalidated.items() if k.startswith(self.prefix)), None)

    def load(self, read: Callable[[str], Chunk], invalidated: Mapping[str, int], cache: Path | None = None) -> None:
        """(Re)build the index from the live keys: chunks not held yet are ``read(key)``,
        chunks of keys gone are dropped; pending large commits are in it then (the overlay of
        small commits stays until ``clear_own``).  ``cache``: the DB's ``derived/`` directory,
        where the built index is looked up first and stored (``tunedb.index.parquet.indexcache``)."""
        live = set(self.live)
        for k in list(self.chunks):
            if k not in live:
                del self.chunks[k]
        inv = self.invalidated_at(invalidated)
        sig = indexcache.signature(self.live, inv) if cache is not None and self.live else None
        if sig is not None:
            hit = indexcache.load(cache, self.prefix, sig, len(self.live))
            if hit is not None:
                self.target_key = self.target_key or hit[1]
                self._built(hit[0], inv)
                return
        for k in self.live:
            if k not in self.chunks:
                self.chunks[k] = read(k)
                if not self.target_key and self.chunks[k].target_key:
                    self.target_key = self.chunks[k].target_key
        self._built(memindex.build([self.chunks[k] for k in self.live], invalidated), inv)
        if sig is not None:
            indexcache.save(cache, self.prefix, sig, self.arrays, self.target_key)

    def _built(self, arrays: memindex.Arrays, inv: int | None) -> None:
        self.files = list(self.live)
        self.arrays = arrays
        self.ranked = None  # (answers of the arrays replaced)
        self.built_with = inv
        self.loaded = True
        self.dirty = False
        self.pending_rids = []

    def clear_own(self) -> None:
        """Forget the handle's own commits (a refresh re-read the files and journals holding them)."""
        if self.overlay:  # (the arrays are rebuilt with them: answers computed with the overlay go)
            self.ranked = None
        self.overlay.clear()
        self.overlay_entries.clear()
        self.overlay_rids.clear()

    def add_file(self, key: str, chunk: Chunk) -> None:
        """A file this handle just wrote (a large commit): indexed at the next query (``dirty``)."""
        self.keys.add(key)
        self.live = sorted(set(self.live) | {key})
        self.chunks[key] = chunk
        self.pending_rids.append(np.sort(chunk.cols["rid_hash"]))
        self.ranked = None  # (its rows change every entry's answer it holds)
        if chunk.target_key:
            self.target_key = chunk.target_key
        self.dirty = True

    def last_row_of(self, lk: int) -> int | None:
        """(file index << 32 | row) of the latest live row with lookup_key ``lk``."""
        return memindex.last_row(self.arrays, lk)

    def fresh_mask(self, rh: np.ndarray) -> np.ndarray:
        """True for each rid hash of ``rh`` this partition does not hold (first of repeats)."""
        if len(self.pending_rids) > 1:
            self.pending_rids = [np.sort(np.concatenate(self.pending_rids))]
        return memindex.fresh_mask(rh, [self.arrays.rid_sorted, *self.pending_rids], self.overlay_rids)

    def overlay_add(self, recs: list[Record]) -> None:
        """Keep ``recs`` (this handle's small commits) outside the arrays; the ranked answers
        of their entries are dropped (``ranked.forget``)."""
        for r in recs:
            self.overlay[r.lookup_key] = r
            self.overlay_entries.setdefault(r.entry_key, []).append(r)
            if self.ranked is not None:
                self.ranked.forget((r.target_key, r.workload_key))
        self.overlay_rids.update(rid_hash(r.record_id) for r in recs)
        if recs and not self.target_key:
            self.target_key = recs[0].target_key

    def live_count(self) -> int:
        """Live (not stale) records, own commits included (the partition must be loaded and synced).
        Own commits count by record id: the overlay answers look-ups by triple, and a triple
        measured again (a re-measurement) is a new record, not a replacement."""
        return int(self.arrays.a["live"].sum()) + len(self.overlay_rids)

    def count(self) -> int:
        """Records, stale ones included (loaded and synced; own commits by record id)."""
        return int(len(self.arrays.a["lookup_key"])) + len(self.overlay_rids)
