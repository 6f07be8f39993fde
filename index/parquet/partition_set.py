"""A store handle's in-memory view of its DB: every partition, and what their queries read.

``tunedb.index.parquet.target_index`` is one target's state (its chunk keys, index arrays and the
handle's own commits); ``PartitionSet`` is the whole handle's:

* ``parts``: target-key prefix (16 hex) -> ``Partition``, for every target with files or journal
  rows; ``superseded``: the files compacted files supersede (to delete, see
  ``rewrites.remove_superseded``) and ``supersedes``: what each compacted file read so far names;
* what rows are built from: ``tables`` (decoded file rows, ``rowcache.TableCache``) and ``mem``
  (each journal chunk's rows: journals are not Parquet; chunk key ``<journal>::<target_key>``);
* ``target_meta`` (target_key -> (name, canonical JSON)), ``invalidated`` (target_key -> when, in
  microseconds), ``verdicts`` (record_id -> latest) and the refuted record ids and rid hashes.

A refresh lists the directory and hands the listing to ``apply_listing``, the journals' scan to
``apply_journals``, the invalidation and verdict files to ``load_marks``; partitions are loaded
(their index built) only when a query, commit or count first needs them (``loaded``).

Locking: not thread-safe.  Every method expects the store's handle lock held (the store's
``_lock``); none takes the DB's file lock.  FileNotFoundError from a read means a compaction
merged a file away: the caller refreshes and retries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.model.keys import rid_hash, rid_hashes
from tunedb.index.model.record import Record
from tunedb.index.parquet import invalidations, memindex, parts, verdicts
from tunedb.index.parquet.memindex import Chunk
from tunedb.index.parquet.rowcache import TableCache
from tunedb.index.parquet.target_index import Partition


def prefix_of_file(path: str) -> str:
    """The target-key prefix of a part file's partition (``.../target_slug=<name>-<prefix>/f``)."""
    return os.path.basename(os.path.dirname(path)).rsplit("-", 1)[-1]


class PartitionSet:
    """Every partition of one handle, and the state their queries share (see module docstring)."""

    def __init__(self, index_cache: Path | None, table_rows: int):
        #: where built partition indexes are cached (``derived/``; None: not cached)
        self.index_cache = index_cache
        #: rows of decoded file tables kept in memory (``ParquetStore.TABLE_CACHE_ROWS``)
        self.table_rows = table_rows
        self.parts: dict[str, Partition] = {}
        self.supersedes: dict[str, list[str]] = {}  # compacted file -> the names it supersedes
        self.superseded: list[str] = []
        self.tables = TableCache()
        self.mem: dict[str, pa.Table] = {}  # journal chunk key -> its rows
        self.target_meta: dict[str, tuple[str, str]] = {}  # target_key -> (name, json)
        self.invalidated: dict[str, int] = {}
        self.verdicts: dict[str, str] = {}  # record_id -> latest verdict
        self.refuted: set[str] = set()
        self.refuted_hashes: set[int] = set()

    # ------------------------------------------------------------------ chunks
    def read_chunk(self, key: str) -> Chunk:
        """The index columns of chunk ``key``: a journal's rows of one target (in memory) or a
        Parquet file (FileNotFoundError when it was merged away: the caller refreshes)."""
        mem = self.mem.get(key)
        if mem is not None:
            return Chunk(Path(key), key.rsplit("::", 1)[1], memindex.index_cols(mem), [])
        ch, target = memindex.read_chunk(Path(key))
        if target is not None and ch.target_key and ch.target_key not in self.target_meta:
            self.target_meta[ch.target_key] = target
        if ch.supersedes:
            self.supersedes[key] = ch.supersedes
        return ch

    def supersedes_of(self, key: str) -> list[str]:
        """Names that compacted file ``key`` supersedes (its footer, read once: files are immutable)."""
        sup = self.supersedes.get(key)
        if sup is None:
            sup = self.supersedes[key] = parts.meta_supersedes(pq.read_schema(key).metadata)
        return sup

    def table(self, key: str) -> dict:
        """The decoded rows of chunk ``key`` (``rowcache.TableCache``; FileNotFoundError: merged away)."""
        return self.tables.get(key, self.mem, self.table_rows)

    # ------------------------------------------------------------------ partitions
    def part(self, tkey: str) -> Partition:
        """The partition of target key ``tkey`` (created empty when new)."""
        prefix = tkey[:16]
        p = self.parts.get(prefix)
        if p is None:
            p = self.parts[prefix] = Partition(prefix)
        if not p.target_key and len(tkey) == 32:
            p.target_key = tkey
        return p

    def loaded(self, p: Partition) -> Partition:
        """``p`` with its index built and its large commits indexed (see ``Partition.load``)."""
        if not p.loaded or p.dirty:
            p.load(self.read_chunk, self.invalidated, self.index_cache)
        return p

    def indexed(self, tkey: str) -> Partition:
        """The partition of ``tkey`` with its index built (for identity checks: a pending large
        commit is in its ``pending_rids``, so it is not indexed first)."""
        p = self.part(tkey)
        if not p.loaded:
            p.load(self.read_chunk, self.invalidated, self.index_cache)
        return p

    def all_loaded(self) -> list[Partition]:
        """Every partition, loaded (whole-DB queries: counts, targets, stats)."""
        return [self.loaded(p) for p in list(self.parts.values())]

    def selected(self, prefix: str | None) -> list[Partition]:
        """Every partition, or the one of target-key prefix ``prefix`` (none when it has none)."""
        if prefix is None:
            return list(self.parts.values())
        return [self.parts[prefix]] if prefix in self.parts else []

    def live_parquet(self, records_dir: Path) -> list[str]:
        """The live Parquet files of every partition (not journal chunks), as listed last."""
        root = str(records_dir) + os.sep
        return [f for p in self.parts.values() for f in p.live if f.startswith(root) and f.endswith(".parquet")]

    def index_stats(self) -> tuple[np.ndarray, list[str], set[str]]:
        """(entry key of every live indexed row, live chunk keys in the indexes, target keys with
        live rows), every partition loaded."""
        ps = self.all_loaded()
        live_ek = np.concatenate([p.arrays.a["entry_key"][p.arrays.a["live"]] for p in ps]) if ps else \
            np.zeros(0, np.int64)
        files = [f for p in ps for f in p.files]
        tkeys = {p.target_key for p in ps if int(p.arrays.a["live"].sum())}
        return live_ek, files, tkeys

    def first_unknown(self, rids: list[str]) -> str | None:
        """The first of ``rids`` that no partition holds (a record_id alone does not name its
        target, so every partition is loaded), or None."""
        rh = rid_hashes(rids)
        fresh = np.ones(len(rh), bool)
        for p in self.all_loaded():
            fresh &= p.fresh_mask(rh)
        return rids[int(np.flatnonzero(fresh)[0])] if fresh.any() else None

    def own_records(self) -> int:
        """How many records this handle committed to overlays since the last refresh."""
        return sum(len(p.overlay_rids) for p in self.parts.values())

    # ------------------------------------------------------------------ refreshing
    def apply_journals(self, stale: list[str], fresh: list[tuple[str, str, pa.Table]],
                       live: set[str]) -> tuple[list[tuple[str, str]], set[str]]:
        """Take a journal scan (``Journals.scan``): drop the ``stale`` chunks, keep the ``fresh``
        rows in ``mem`` (and their target's metadata), forget folded journals.  Returns
        (chunk key, target_key) of every live journal chunk, and the target-key prefixes whose
        journal rows changed."""
        rewritten = set()
        for k in stale:
            prefix = k.rsplit("::", 1)[1][:16]
            self.tables.drop(k)
            self.mem.pop(k, None)
            rewritten.add(prefix)
            p = self.parts.get(prefix)
            if p is not None:
                p.chunks.pop(k, None)  # its rows changed: read again
        for k, tkey, group in fresh:
            rewritten.add(tkey[:16])
            md = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
            self.target_meta.setdefault(tkey, md)
            self.mem[k] = group
        for k in [k for k in self.mem if k not in live]:  # folded journals
            del self.mem[k]
        return [(k, k.rsplit("::", 1)[1]) for k in sorted(live)], rewritten

    def load_marks(self, inval_dir: Path, verdict_dir: Path) -> None:
        """Read the invalidation and verdict files again (``invalidations``, ``verdicts``)."""
        self.invalidated = invalidations.load(inval_dir)
        self.verdicts = verdicts.load(verdict_dir)
        refuted = {r for r, v in self.verdicts.items() if v == "refuted"}
        if refuted == self.refuted:
            # (the same set objects: the partitions' ranked answers are valid for these sets, by
            # identity, and stay valid across a refresh that brought no new refutation)
            return
        self.refuted = refuted
        self.refuted_hashes = {int(h) for h in rid_hashes(sorted(refuted))} if refuted else set()

    def apply_listing(self, files_by_dir: Mapping[str, list[Path]], journal_keys: list[tuple[str, str]],
                      rewritten: set[str]) -> None:
        """Take ``files_by_dir`` (``parts.scan_partitions``: partition directory -> its files)
        and ``journal_keys`` (``apply_journals``) as what the DB holds now: the handle's own
        commits are dropped from the overlays (the listing has them), loaded partitions that
        changed (or whose journal rows did: ``rewritten``) are re-indexed, empty ones dropped,
        and ``superseded`` is what the compacted files now supersede."""
        keys: dict[str, set[str]] = {}
        for d, files in files_by_dir.items():
            keys.setdefault(os.path.basename(d).rsplit("-", 1)[-1], set()).update(str(f) for f in files)
        for k, tkey in journal_keys:
            keys.setdefault(tkey[:16], set()).add(k)
            self.part(tkey)
        superseded: list[str] = []
        for prefix in set(self.parts) | set(keys):
            p = self.parts.get(prefix) or self.part(prefix)
            ks = keys.get(prefix, set())
            gone = p.keys - ks
            for k in gone:
                self.tables.drop(k)
                self.supersedes.pop(k, None)
            changed = p.set_keys(ks, self.supersedes_of) or bool(gone) or prefix in rewritten
            superseded.extend(p.superseded)
            had_own = bool(p.overlay) or p.dirty
            p.clear_own()
            if p.loaded and (changed or had_own or p.built_with != p.invalidated_at(self.invalidated)):
                p.load(self.read_chunk, self.invalidated, self.index_cache)
            if not p.keys:
                del self.parts[prefix]
        self.superseded = superseded

    def drop_file(self, path: str) -> None:
        """Forget file ``path`` (deleted): its decoded rows and its place in its partition."""
        self.tables.drop(path)
        p = self.parts.get(prefix_of_file(path))
        if p is not None:
            p.forget_key(path)

    # ------------------------------------------------------------------ commits
    def fresh_mask(self, rh: np.ndarray, tkeys: list[str], codes: np.ndarray) -> np.ndarray:
        """True for each rid hash (of a record of target ``tkeys[codes[i]]``) that this handle
        does not hold yet, and the first of repeats within ``rh``.  Looks only at the records'
        own targets (record identity is per target; see ``tunedb.index.parquet.target_index``)."""
        if len(tkeys) == 1:
            return self.indexed(tkeys[0]).fresh_mask(rh)
        keep = np.zeros(len(rh), bool)
        for c, tk in enumerate(tkeys):
            idx = np.flatnonzero(codes == c)
            keep[idx] = self.indexed(tk).fresh_mask(rh[idx])
        return keep

    def overlay_add(self, recs: list[Record], recheck: bool = False) -> None:
        """Keep ``recs`` (just committed) in their partitions' overlays.  ``recheck``: a refresh
        ran since the commit began (a journal append outside the handle lock) and may have
        indexed them already; those are left out."""
        by_target: dict[str, list[Record]] = {}
        for r in recs:
            by_target.setdefault(r.target_key, []).append(r)
        for tk, group in by_target.items():
            p = self.part(tk)
            if recheck and p.loaded:
                rh = np.fromiter((rid_hash(r.record_id) for r in group), np.int64, len(group))
                group = [r for r, new in zip(group, p.fresh_mask(rh).tolist()) if new]
            p.overlay_add(group)

    def add_written(self, written: list[tuple[str, Path, pa.Table]], target_meta: Mapping[str, tuple[str, str]]
                    ) -> None:
        """Index the files of a large commit lazily (``parts.write_targets``' (target_key, path,
        rows written)): each partition is marked dirty and indexes them at its next query."""
        for tkey, path, full in written:
            self.target_meta.setdefault(tkey, target_meta[tkey])
            self.part(tkey).add_file(str(path), Chunk(path, tkey, memindex.index_cols(full), []))

    def remember_targets(self, recs: list[Record]) -> None:
        """Note the target metadata of ``recs`` (being committed) where not known yet."""
        for r in recs:
            self.target_meta.setdefault(r.target_key, (r.target_name, r.target_json))

    # ------------------------------------------------------------------ targets
    def all_target_meta(self) -> dict[str, tuple[str, str]]:
        """target_key -> (name, canonical JSON) of every target with records: from the files and
        journals read so far, and one file footer of each partition not read yet."""
        for p in list(self.parts.values()):
            if p.target_key and p.target_key in self.target_meta:
                continue
            for k in p.live:
                if "::" in k:
                    continue
                try:
                    tk, target = parts.meta_target(pq.read_schema(k).metadata)
                except FileNotFoundError:
                    continue
                if tk and target is not None:
                    self.target_meta.setdefault(tk, target)
                    p.target_key = p.target_key or tk
                    break
        meta = dict(self.target_meta)
        for p in self.parts.values():
            for r in p.overlay.values():
                meta.setdefault(r.target_key, (r.target_name, r.target_json))
        return meta
