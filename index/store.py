"""The record store: a directory of Parquet files, hive-partitioned by target.

Layout of a DB directory::

    tunedb.json                         marker (format, schema version)
    records/target_slug=<slug>/part-<ns>-<id>.parquet    one file per commit and target
    records/target_slug=<slug>/cpart-<ns>-<id>.parquet   compacted files (list what they supersede)
    invalidations/part-*.parquet        (target_key, invalidated_at): stale-marking, append-only
    derived/                            rebuildable caches (vector index, ...)
    _lock                               advisory lock held by compaction and other rewrites

Contract
--------
* ``commit`` validates every record first (ValueError naming field and record; nothing
  written), then writes one new file per target under a name readers ignore (``_tmp-``),
  fsyncs it, renames it into place and fsyncs the directory: durable when it returns.
  Writers never modify a published file, so any number of processes may append to one
  DB without a lock.  A commit spanning several targets is published target by target.
* Readers de-duplicate by ``record_id``.  A compacted file names the files it supersedes in
  its Parquet metadata; readers ignore superseded files, so a crash in the middle of a
  compaction never double-counts.
* A handle sees its own commits at once and other processes' commits after ``refresh()``
  (or a new ``open``).  Returned Records are immutable; returned tables are fresh copies.
* Thread safety: one handle may be shared by threads (an internal lock guards its state).
* Costs and times are seconds; timestamps UTC.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .fsutil import atomic_write_bytes, file_lock, fsync_dir, publish, temp_name, temp_owner_alive
from .keys import canonical_json, hash64, key_of_text
from .record import STATUSES, Record
from .schema import INDEX_COLUMNS, RECORD_SCHEMA
from .version import SCHEMA_VERSION, TUNEDB_VERSION

MARKER = "tunedb.json"
META_SUPERSEDES = b"tunedb.supersedes"
META_TARGET_KEY = b"tunedb.target_key"
META_TARGET = b"tunedb.target"
META_TARGET_NAME = b"tunedb.target_name"
INVAL_SCHEMA = pa.schema([("target_key", pa.string()), ("target_name", pa.string()),
                          ("invalidated_at", pa.timestamp("us", tz="UTC"))])
_PART_RE = re.compile(r"^c?part-\d+-[0-9a-f]+\.parquet$")
_STATUS_OK = STATUSES.index("ok")
_US = np.int64(1)


def _slug(target_name: str, target_key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._]+", "_", target_name).strip("._")[:48] or "target"
    return f"{safe}-{target_key[:16]}"


def _now_us() -> int:
    return time.time_ns() // 1000


def _rid_hash(rid: str) -> int:
    v = int(rid[:16], 16)
    return v - (1 << 64) if v >= (1 << 63) else v


class _Chunk:
    """Index columns of one immutable Parquet file."""

    __slots__ = ("path", "target_key", "n", "cols", "supersedes")

    def __init__(self, path: Path, target_key: str, cols: dict, supersedes: list[str]):
        self.path = path
        self.target_key = target_key
        self.cols = cols
        self.n = len(cols["lookup_key"])
        self.supersedes = supersedes


class TuningDB:
    """A tuning-record database in one directory (see module docstring for the contract)."""

    AUTO_COMPACT_FILES = 64      # files in one partition that trigger an automatic compaction
    TABLE_CACHE_ROWS = 4_000_000  # rows of full file tables kept in memory for materialising records
    OVERLAY_LIMIT = 200_000       # own-commit records kept outside the sorted arrays before a rebuild

    # ------------------------------------------------------------------ opening
    def __init__(self, path: Path):
        self.path = Path(path)
        self.records_dir = self.path / "records"
        self.inval_dir = self.path / "invalidations"
        self.derived_dir = self.path / "derived"
        self.session = uuid.uuid4().hex[:16]
        self._lock = threading.RLock()
        self._chunks: dict[str, _Chunk] = {}
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._table_rows = 0
        self._json_cache: dict[str, dict] = {}
        self.lookups = 0
        self.hits = 0
        self._invalidated: dict[str, int] = {}
        self._target_meta: dict[str, tuple[str, str]] = {}  # target_key -> (name, json)
        self._overlay: dict[int, Record] = {}
        self._overlay_entries: dict[int, list[Record]] = {}
        self._overlay_rids: set[int] = set()
        self._commits_since_scan: dict[str, int] = {}
        self._text_keys: dict[str, str] = {}
        self._compact_due: set = set()
        self._last_pos: dict[int, int] | None = None
        self._rid_sorted = np.zeros(0, np.int64)

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = True) -> "TuningDB":
        """Open the DB at ``path`` (created when missing and ``create``)."""
        p = Path(path)
        if not p.exists():
            if not create:
                raise FileNotFoundError(f"no tunedb database at {p}")
            p.mkdir(parents=True, exist_ok=True)
        elif not p.is_dir():
            raise NotADirectoryError(f"{p} is not a directory")
        marker = p / MARKER
        if marker.exists():
            try:
                info = json.loads(marker.read_text())
            except (OSError, json.JSONDecodeError):
                info = {}
            if info.get("format") != "tunedb":
                raise ValueError(f"{p} is not a tunedb database ({MARKER} is not ours)")
            if int(info.get("schema_version", 0)) > SCHEMA_VERSION:
                raise ValueError(f"{p} has schema version {info['schema_version']}, newer than this tunedb "
                                 f"({SCHEMA_VERSION})")
        else:
            if any(p.iterdir()) and not (p / "records").is_dir():
                raise ValueError(f"{p} is a non-empty directory that is not a tunedb database")
            atomic_write_bytes(marker, json.dumps({"format": "tunedb", "schema_version": SCHEMA_VERSION,
                                                   "created_by": TUNEDB_VERSION}).encode())
        for d in ("records", "invalidations", "derived"):
            (p / d).mkdir(exist_ok=True)
        db = cls(p)
        db.refresh()
        return db

    def close(self) -> None:
        with self._lock:
            self._tables.clear()
            self._table_rows = 0

    def __enter__(self) -> "TuningDB":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------- scanning
    def _scan_files(self) -> tuple[dict[str, list[Path]], list[Path]]:
        """Published part files per partition dir, and leftover temp files."""
        parts: dict[str, list[Path]] = {}
        temps: list[Path] = []
        with os.scandir(self.records_dir) as it:
            dirs = [e.path for e in it if e.is_dir() and e.name.startswith("target_slug=")]
        for d in dirs:
            files = []
            try:
                with os.scandir(d) as it:
                    for e in it:
                        if e.name.startswith("_tmp-"):
                            temps.append(Path(e.path))
                        elif _PART_RE.match(e.name):
                            files.append(Path(e.path))
            except FileNotFoundError:
                continue
            parts[d] = sorted(files)
        return parts, temps

    def _read_chunk(self, path: Path) -> _Chunk:
        pf = pq.ParquetFile(path, memory_map=True)
        md = pf.schema_arrow.metadata or {}
        tkey = md.get(META_TARGET_KEY, b"").decode()
        sup = json.loads(md[META_SUPERSEDES].decode()) if META_SUPERSEDES in md else []
        if tkey and tkey not in self._target_meta and META_TARGET in md:
            self._target_meta[tkey] = (md.get(META_TARGET_NAME, b"").decode(), md[META_TARGET].decode())
        t = pf.read(columns=INDEX_COLUMNS, use_threads=pf.metadata.num_rows > 50_000)
        cols = {
            "lookup_key": t.column("lookup_key").to_numpy(),
            "entry_key": t.column("entry_key").to_numpy(),
            "cost": t.column("cost").to_numpy(zero_copy_only=False).astype(np.float64),
            "ok": pc.equal(t.column("status"), "ok").to_numpy(zero_copy_only=False).astype(bool),
            "rid_hash": t.column("rid_hash").to_numpy(),
            "committed": t.column("committed").cast(pa.int64()).to_numpy(),
            "timestamp": t.column("timestamp").cast(pa.int64()).to_numpy(),
        }
        cols["cost"] = np.where(np.isnan(cols["cost"]), np.inf, cols["cost"])
        return _Chunk(path, tkey, cols, sup)

    def _load_invalidations(self) -> None:
        inv: dict[str, int] = {}
        for f in sorted(self.inval_dir.glob("part-*.parquet")):
            try:
                t = pq.read_table(f)
            except (OSError, pa.ArrowInvalid):
                continue
            for k, ts in zip(t.column("target_key").to_pylist(),
                             t.column("invalidated_at").cast(pa.int64()).to_pylist()):
                inv[k] = max(inv.get(k, 0), ts)
        self._invalidated = inv

    def refresh(self) -> None:
        """Re-scan the directory: pick up other processes' commits and compactions."""
        with self._lock:
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
            if self._superseded:
                self._try_remove_superseded()

    def _refresh_once(self) -> None:
        parts, temps = self._scan_files()
        for t in temps:
            if not temp_owner_alive(t.name, 3600.0, t):
                try:
                    t.unlink()
                except OSError:
                    pass
        seen = set()
        for files in parts.values():
            for f in files:
                key = str(f)
                seen.add(key)
                if key not in self._chunks:
                    self._chunks[key] = self._read_chunk(f)
        for key in list(self._chunks):
            if key not in seen:
                del self._chunks[key]
                self._drop_table(key)
        superseded = set()
        for key, ch in self._chunks.items():
            d = os.path.dirname(key)
            for name in ch.supersedes:
                superseded.add(os.path.join(d, name))
        self._live_files = sorted(k for k in self._chunks if k not in superseded)
        self._superseded = sorted(superseded & set(self._chunks))
        self._partitions = {d: [str(f) for f in files] for d, files in parts.items()}
        self._load_invalidations()
        self._rebuild_arrays()
        self._overlay.clear()
        self._overlay_entries.clear()
        self._overlay_rids.clear()
        self._commits_since_scan.clear()

    def _rebuild_arrays(self) -> None:
        files = self._live_files
        chunks = [self._chunks[f] for f in files]
        n = sum(c.n for c in chunks)
        if n == 0:
            z = np.zeros(0, np.int64)
            self._a = {"lookup_key": z, "entry_key": z, "cost": np.zeros(0), "ok": np.zeros(0, bool),
                       "rid_hash": z, "committed": z, "timestamp": z, "file": np.zeros(0, np.int32),
                       "row": np.zeros(0, np.int32)}
        else:
            a = {k: np.concatenate([c.cols[k] for c in chunks]) for k in chunks[0].cols}
            a["file"] = np.repeat(np.arange(len(chunks), dtype=np.int32), [c.n for c in chunks])
            a["row"] = np.concatenate([np.arange(c.n, dtype=np.int32) for c in chunks])
            # de-duplicate by record_id (first occurrence wins)
            _, first = np.unique(a["rid_hash"], return_index=True)
            if len(first) != n:
                first.sort()
                a = {k: v[first] for k, v in a.items()}
            self._a = a
        a = self._a
        # stale rows: their target was invalidated after they were committed
        live = np.ones(len(a["lookup_key"]), bool)
        if self._invalidated:
            tk = np.array([self._chunks[f].target_key for f in files], dtype=object)
            inv_by_file = np.array([self._invalidated.get(k, -1) for k in tk], dtype=np.int64) if len(tk) else \
                np.zeros(0, np.int64)
            if len(inv_by_file):
                live = a["committed"] > inv_by_file[a["file"]]
        a["live"] = live
        # lookup: sorted by (lookup_key, committed, timestamp)
        self._by_lookup = np.lexsort((a["timestamp"], a["committed"], a["lookup_key"]))
        self._lookup_sorted = a["lookup_key"][self._by_lookup]
        self._last_pos = None
        # best: live ok rows sorted by (entry_key, cost)
        okrows = np.flatnonzero(a["ok"] & live)
        order = np.lexsort((a["cost"][okrows], a["entry_key"][okrows]))
        self._by_entry = okrows[order]
        self._entry_sorted = a["entry_key"][self._by_entry]
        self._file_list = files
        self._rid_sorted = np.sort(a["rid_hash"])

    def _try_remove_superseded(self) -> None:
        lock = self.path / "_lock"
        with file_lock(lock, blocking=False) as held:
            if not held:
                return
            for f in self._superseded:
                try:
                    os.unlink(f)
                except FileNotFoundError:
                    pass

    # ------------------------------------------------------------ committing
    def commit(self, records: Record | Iterable[Record]) -> int:
        """Validate and durably write ``records``; returns how many were new.

        Records whose record_id this handle already holds are skipped (idempotent
        re-commit).  Raises ValueError naming the field and the record when any record
        is invalid; then nothing of the commit is written.
        """
        recs = [records] if isinstance(records, Record) else list(records)
        for r in recs:
            if not isinstance(r, Record):
                raise TypeError(f"commit takes Record objects, got {type(r).__name__}")
            r.validate()
        if not recs:
            return 0
        with self._lock:
            known = self._rid_sorted
            rh = np.fromiter((_rid_hash(r.record_id) for r in recs), np.int64, len(recs))
            pos = np.minimum(np.searchsorted(known, rh), max(len(known) - 1, 0))
            fresh = (known[pos] != rh) if len(known) else np.ones(len(rh), bool)
            seen: set[int] = set(self._overlay_rids)
            keep = []
            for r, h, f in zip(recs, rh.tolist(), fresh.tolist()):
                if f and h not in seen:
                    seen.add(h)
                    keep.append(r)
            if not keep:
                return 0
            committed = _now_us()
            by_target: dict[str, list[Record]] = {}
            for r in keep:
                by_target.setdefault(r.target_key, []).append(r)
            for tkey, group in by_target.items():
                self._write_group(tkey, group, committed)
            for r in keep:
                self._overlay[r.lookup_key] = r
                self._overlay_entries.setdefault(r.entry_key, []).append(r)
            self._overlay_rids.update(_rid_hash(r.record_id) for r in keep)
            due, self._compact_due = self._compact_due, set()
            for d in due:  # after the overlay is updated: a compaction refreshes the arrays
                self._maybe_auto_compact(d)
            if len(self._overlay) > self.OVERLAY_LIMIT:
                self.refresh()
            return len(keep)

    def _records_to_table(self, recs: list[Record], slug: str, committed_us: int) -> pa.Table:
        n = len(recs)
        cols: dict[str, Any] = {
            "record_id": [r.record_id for r in recs],
            "target_key": [r.target_key for r in recs],
            "target_name": [r.target_name for r in recs],
            "target": [r.target_json for r in recs],
            "workload_key": [r.workload_key for r in recs],
            "family": [r.workload["family"] for r in recs],
            "workload": [r.workload_json for r in recs],
            "config_key": [r.config_key for r in recs],
            "config": [r.config_json for r in recs],
            "costs": [list(r.costs) for r in recs],
            "cost": [r.cost for r in recs],
            "status": [r.status for r in recs],
            "error": [r.error for r in recs],
            "compile_s": [r.compile_s for r in recs],
            "wall_s": [r.wall_s for r in recs],
            "timestamp": pa.array([int(r.timestamp.timestamp() * 1_000_000) for r in recs], pa.int64())
            .cast(pa.timestamp("us", tz="UTC")),
            "source": [r.source for r in recs],
            "session": [r.session or self.session for r in recs],
            "meta": [r.meta_json or "{}" for r in recs],
            "lookup_key": [r.lookup_key for r in recs],
            "entry_key": [r.entry_key for r in recs],
            "tunedb_version": pa.array([TUNEDB_VERSION] * n),
            "schema_version": pa.array(np.full(n, SCHEMA_VERSION, np.int32)),
            "target_slug": pa.array([slug] * n),
            "rid_hash": [_rid_hash(r.record_id) for r in recs],
            "committed": pa.array(np.full(n, committed_us, np.int64)).cast(pa.timestamp("us", tz="UTC")),
        }
        arrays = [pa.array(cols[f.name], f.type) if not isinstance(cols[f.name], (pa.Array, pa.ChunkedArray))
                  else cols[f.name] for f in RECORD_SCHEMA]
        return pa.Table.from_arrays(arrays, schema=RECORD_SCHEMA)

    def _write_group(self, tkey: str, group: list[Record], committed_us: int) -> Path:
        first = group[0]
        slug = _slug(first.target_name, tkey)
        table = self._records_to_table(group, slug, committed_us)
        meta = {META_TARGET_KEY: tkey.encode(), META_TARGET: first.target_json.encode(),
                META_TARGET_NAME: first.target_name.encode()}
        self._target_meta.setdefault(tkey, (first.target_name, first.target_json))
        return self._write_table(slug, table, meta, prefix="part")

    def _write_table(self, slug: str, table: pa.Table, meta: dict, prefix: str) -> Path:
        d = self.records_dir / f"target_slug={slug}"
        new_dir = not d.exists()
        d.mkdir(parents=True, exist_ok=True)
        if new_dir:
            fsync_dir(self.records_dir)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        tmp = d / temp_name()
        final = d / f"{prefix}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        try:
            small = table.num_rows < 1000
            pq.write_table(table, tmp, compression="zstd", row_group_size=256 * 1024,
                           write_statistics=not small, use_dictionary=not small or prefix == "cpart")
            publish(tmp, final)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
        self._commits_since_scan[str(d)] = self._commits_since_scan.get(str(d), 0) + 1
        if prefix == "part" and self._commits_since_scan[str(d)] % 16 == 0:
            self._compact_due.add(d)
        return final

    def _maybe_auto_compact(self, d: Path) -> None:
        try:
            n = sum(1 for n in os.listdir(d) if _PART_RE.match(n))
        except FileNotFoundError:
            return
        if n > self.AUTO_COMPACT_FILES:
            self._rewrite_partitions([d], keep=None, blocking=False, small_only=True)

    # ----------------------------------------------------------- rewriting
    AUTO_COMPACT_MAX_BYTES = 1 << 20  # automatic compaction merges only files smaller than this

    def _rewrite_partitions(self, dirs: list[Path], keep, *, blocking: bool = True,
                            min_files: int = 2, small_only: bool = False) -> dict:
        """Rewrite each partition into one compacted file, keeping rows where ``keep(table)``
        is true (all rows when None).  Runs under the DB lock; concurrent appends are never
        touched (only files listed at the start are merged)."""
        stats = {"partitions": 0, "files_before": 0, "files_after": 0, "rows_before": 0, "rows_after": 0}
        with file_lock(self.path / "_lock", blocking=blocking) as held:
            if not held:
                return stats
            for d in dirs:
                d = Path(d)
                try:
                    names = sorted(n for n in os.listdir(d) if _PART_RE.match(n))
                except FileNotFoundError:
                    continue
                # drop files already superseded by a compacted file (crash leftovers)
                sup: set[str] = set()
                for n in names:
                    if n.startswith("cpart-"):
                        md = pq.read_schema(d / n).metadata or {}
                        if META_SUPERSEDES in md:
                            sup.update(json.loads(md[META_SUPERSEDES].decode()))
                for n in sup & set(names):
                    try:
                        os.unlink(d / n)
                    except FileNotFoundError:
                        pass
                names = [n for n in names if n not in sup]
                if small_only:  # tiered: big compacted files are not rewritten again and again
                    names = [n for n in names if (d / n).stat().st_size < self.AUTO_COMPACT_MAX_BYTES]
                if not names or (keep is None and len(names) < min_files):
                    continue
                tables = [pq.ParquetFile(d / n).read(use_threads=False) for n in names]
                md = tables[0].schema.metadata or {}
                table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
                rows_before = table.num_rows
                # de-duplicate by record_id
                rid = table.column("rid_hash").to_numpy()
                _, first = np.unique(rid, return_index=True)
                if len(first) != len(rid):
                    table = table.take(pa.array(np.sort(first)))
                if keep is not None:
                    mask = keep(table)
                    table = table.filter(pa.array(mask))
                stats["partitions"] += 1
                stats["files_before"] += len(names)
                stats["rows_before"] += rows_before
                stats["rows_after"] += table.num_rows
                if table.num_rows:
                    order = np.lexsort((table.column("cost").to_numpy(zero_copy_only=False),
                                        table.column("entry_key").to_numpy()))
                    table = table.take(pa.array(order))
                    meta = {k: v for k, v in md.items() if k in (META_TARGET_KEY, META_TARGET, META_TARGET_NAME)}
                    meta[META_SUPERSEDES] = json.dumps(names).encode()
                    slug = d.name.split("=", 1)[1]
                    self._write_table(slug, table, meta, prefix="cpart")
                    stats["files_after"] += 1
                for n in names:
                    try:
                        os.unlink(d / n)
                    except FileNotFoundError:
                        pass
                fsync_dir(d)
                if not any(_PART_RE.match(n) for n in os.listdir(d)):
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
        self.refresh()
        return stats

    def _all_partition_dirs(self) -> list[Path]:
        return sorted(p for p in self.records_dir.iterdir() if p.is_dir() and p.name.startswith("target_slug="))

    def _partition_dirs_of(self, target: Any) -> list[Path]:
        tkey = self._target_key(target)
        return [p for p in self._all_partition_dirs() if p.name.endswith(tkey[:16])]

    def compact(self) -> dict:
        """Merge the files of every partition into one (under the DB lock).  Returns counts."""
        return self._rewrite_partitions(self._all_partition_dirs(), keep=None)

    def dedup(self) -> dict:
        """Remove repeated identical measurements: same (target, workload, config), status
        and costs; the earliest is kept.  Returns counts (``removed``)."""
        def keep(t: pa.Table) -> np.ndarray:
            key = [f"{a}|{b}|{c}" for a, b, c in zip(t.column("lookup_key").to_pylist(),
                                                    t.column("status").to_pylist(),
                                                    t.column("costs").to_pylist())]
            ts = t.column("timestamp").cast(pa.int64()).to_numpy()
            order = np.argsort(ts, kind="stable")
            mask = np.zeros(t.num_rows, bool)
            seen = set()
            for i in order:
                if key[i] not in seen:
                    seen.add(key[i])
                    mask[i] = True
            return mask
        st = self._rewrite_partitions(self._all_partition_dirs(), keep=keep)
        st["removed"] = st["rows_before"] - st["rows_after"]
        return st

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        """Retention.  ``target``: drop that target's records (all of them unless other options
        are given, which then apply to that target only).  ``keep_top``: per (target, workload)
        keep the k best ``ok`` records (failed measurements are kept: they stop retries).
        ``older_than_days``: drop records measured longer ago than that."""
        if keep_top is None and older_than_days is None and target is None:
            raise ValueError("forget needs keep_top, older_than_days or target")
        if keep_top is not None and keep_top < 0:
            raise ValueError("keep_top must be >= 0")
        dirs = self._partition_dirs_of(target) if target is not None else self._all_partition_dirs()
        if target is not None and not dirs:
            raise ValueError(f"unknown target {target!r}")
        cutoff = None
        if older_than_days is not None:
            cutoff = _now_us() - int(older_than_days * 86400e6)

        def keep(t: pa.Table) -> np.ndarray:
            n = t.num_rows
            if target is not None and keep_top is None and older_than_days is None:
                return np.zeros(n, bool)
            mask = np.ones(n, bool)
            if cutoff is not None:
                mask &= t.column("timestamp").cast(pa.int64()).to_numpy() >= cutoff
            if keep_top is not None:
                ok = pc.equal(t.column("status"), "ok").to_numpy(zero_copy_only=False)
                ek = t.column("entry_key").to_numpy()
                cost = np.nan_to_num(t.column("cost").to_numpy(zero_copy_only=False), nan=np.inf)
                idx = np.flatnonzero(ok)
                order = idx[np.lexsort((cost[idx], ek[idx]))]
                eks = ek[order]
                starts = np.r_[0, np.flatnonzero(np.diff(eks)) + 1]
                rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
                drop = order[rank >= keep_top]
                mask[drop] = False
            return mask
        st = self._rewrite_partitions(dirs, keep=keep, min_files=1)
        st["removed"] = st["rows_before"] - st["rows_after"]
        return st

    def invalidate(self, target: Any) -> str:
        """Mark ``target`` stale (e.g. after a toolchain upgrade): its records committed until
        now no longer answer ``lookup``/``best``; later measurements do.  Returns its key."""
        tkey = self._target_key(target)
        if tkey not in self._target_meta and not self._partition_dirs_of(tkey):
            raise ValueError(f"unknown target {target!r}")
        name = self._target_meta.get(tkey, ("", ""))[0]
        t = pa.Table.from_pylist([{"target_key": tkey, "target_name": name,
                                   "invalidated_at": _dt.datetime.now(_dt.timezone.utc)}], schema=INVAL_SCHEMA)
        tmp = self.inval_dir / temp_name()
        pq.write_table(t, tmp)
        publish(tmp, self.inval_dir / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet")
        self.refresh()
        return tkey

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
        return self._canon(target, "target")[1]

    def _workload_key(self, workload: Any) -> str:
        """Key of a workload given as a dict, a Record or a workload_key."""
        if isinstance(workload, str) and re.fullmatch(r"[0-9a-f]{32}", workload):
            return workload
        return self._canon(workload, "workload")[1]

    _ROW_COLUMNS = ("record_id", "target_key", "target_name", "target", "workload_key", "workload",
                    "config_key", "config", "costs", "status", "error", "compile_s", "wall_s", "timestamp",
                    "source", "session", "meta")

    _DICT_COLUMNS = ("status", "error", "source", "session", "meta", "target_name")

    def _file_table(self, fidx: int) -> dict:
        """Row columns of one live file, decoded for fast single-row access (LRU by rows):
        low-cardinality strings as (numpy codes, Python values), numbers as numpy arrays,
        costs as (offsets, values)."""
        path = self._file_list[fidx]
        t = self._tables.get(path)
        if t is not None:
            self._tables.move_to_end(path)
            return t
        tab = pq.read_table(path, columns=list(self._ROW_COLUMNS), memory_map=True)
        t = {c: tab.column(c).combine_chunks() for c in self._ROW_COLUMNS}
        t["_dicts"] = []
        for c in self._DICT_COLUMNS:
            enc = pc.dictionary_encode(t[c])
            t["_dicts"].append((c, enc.indices.to_pylist(), enc.dictionary.to_pylist()))
        for c in ("compile_s", "wall_s"):
            t["_np_" + c] = t[c].to_numpy(zero_copy_only=False).astype(np.float64)
        costs = t["costs"]
        t["_costs_off"] = costs.offsets.to_numpy()
        t["_costs_val"] = costs.values.to_numpy(zero_copy_only=False)
        t["_n"] = tab.num_rows
        self._tables[path] = t
        self._table_rows += tab.num_rows
        while self._table_rows > self.TABLE_CACHE_ROWS and len(self._tables) > 1:
            _, old = self._tables.popitem(last=False)
            self._table_rows -= old["_n"]
        return t

    def _drop_table(self, path: str) -> None:
        t = self._tables.pop(path, None)
        if t is not None:
            self._table_rows -= t["_n"]

    def _json(self, text: str) -> dict:
        d = self._json_cache.get(text)
        if d is None:
            d = json.loads(text)
            if len(self._json_cache) < 100_000:
                self._json_cache[text] = d
        return d

    def _materialise(self, i: int, known: tuple | None = None) -> Record:
        """Record of row ``i`` of the in-memory arrays (read from its file's table).

        ``known`` = (target, workload, config, their canonical JSON texts and keys) when the
        caller already holds them (a lookup hit): those columns are then not read back."""
        a = self._a
        fidx, row = int(a["file"][i]), int(a["row"][i])
        for attempt in range(3):
            try:
                t = self._file_table(fidx)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
                self.refresh()
        v: dict[str, Any] = {c: vals[codes[row]] for c, codes, vals in t["_dicts"]}
        v["record_id"] = t["record_id"][row].as_py()
        for c in ("compile_s", "wall_s"):
            x = t["_np_" + c][row]
            v[c] = None if x != x else float(x)
        off = t["_costs_off"]
        v["costs"] = tuple(t["_costs_val"][off[row]:off[row + 1]].tolist())
        v["timestamp"] = _dt.datetime.fromtimestamp(int(a["timestamp"][i]) / 1e6, _dt.timezone.utc)
        if known is None:
            tj, wj, cj = (t[c][row].as_py() for c in ("target", "workload", "config"))
            known = (self._json(tj), self._json(wj), json.loads(cj), tj, wj, cj,
                     t["target_key"][row].as_py(), t["workload_key"][row].as_py(), t["config_key"][row].as_py())
        tdict, wdict, cdict, tj, wj, cj, tk, wk, ck = known
        meta = v.pop("meta")
        v["error"] = v["error"] or ""
        v["session"] = v["session"] or ""
        v["target_name"] = v["target_name"] or ""
        return Record._trusted(target=tdict, workload=wdict, config=cdict, target_json=tj, workload_json=wj,
                               config_json=cj, target_key=tk, workload_key=wk, config_key=ck,
                               meta=json.loads(meta) if meta and meta != "{}" else {}, meta_json=meta or "{}", **v)

    def _text_key(self, text: str) -> str:
        k = self._text_keys.get(text)
        if k is None:
            if len(self._text_keys) > 10_000:
                self._text_keys.clear()
            k = self._text_keys[text] = key_of_text(text)
        return k

    def _canon(self, obj: Any, what: str) -> tuple[str, str]:
        """(canonical JSON, key) of a target/workload/config given as a dict or Record field."""
        if isinstance(obj, Record):
            return (obj.target_json, obj.target_key) if what == "target" else (obj.workload_json, obj.workload_key)
        if hasattr(obj, "to_json_dict"):
            obj = obj.to_json_dict()
        if not isinstance(obj, Mapping):
            raise TypeError(f"{what} must be a dict, a Record or a {what}_key, not {type(obj).__name__}")
        text = canonical_json(obj)
        return text, self._text_key(text)

    def _last_row_of(self, lk: int) -> int | None:
        """Position in the lookup order of the latest row with lookup_key ``lk`` (built lazily)."""
        if self._last_pos is None:
            ks = self._lookup_sorted
            if len(ks):
                last = np.flatnonzero(np.r_[ks[1:] != ks[:-1], True])
                self._last_pos = dict(zip(ks[last].tolist(), last.tolist()))
            else:
                self._last_pos = {}
        return self._last_pos.get(lk)

    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The cached measurement of (target, workload, config), or None.

        Failed measurements are returned too (so they are never retried).  When a triple
        was measured more than once the latest measurement answers.  Records of an
        invalidated target committed before its invalidation never answer."""
        if isinstance(target, str):
            tj, tkey = None, self._target_key(target)
        else:
            tj, tkey = self._canon(target, "target")
        if isinstance(workload, str):
            wj, wkey = None, self._workload_key(workload)
        else:
            wj, wkey = self._canon(workload, "workload")
        if isinstance(config, str):
            cj, ckey = None, config
        else:
            cj = canonical_json(config)
            ckey = key_of_text(cj)
        lk = hash64(tkey, wkey, ckey)
        with self._lock:
            self.lookups += 1
            r = self._overlay.get(lk)
            if r is not None:
                self.hits += 1
                return r
            j = self._last_row_of(lk)
            if j is None:
                return None
            ks, live, order = self._lookup_sorted, self._a["live"], self._by_lookup
            while j >= 0 and ks[j] == lk:
                i = int(order[j])
                if live[i]:
                    self.hits += 1
                    known = None
                    if tj is not None and wj is not None and cj is not None:
                        known = (self._json(tj), self._json(wj), json.loads(cj), tj, wj, cj, tkey, wkey, ckey)
                    return self._materialise(i, known)
                j -= 1
            return None

    def best(self, target: Any, workload: Any, k: int = 1) -> list[Record]:
        """The ``k`` best ``ok`` records of (target, workload), ascending cost, one per config
        (its fastest measurement)."""
        if k <= 0:
            return []
        ek = hash64(self._target_key(target), self._workload_key(workload))
        with self._lock:
            es = self._entry_sorted
            lo = int(np.searchsorted(es, ek, "left"))
            hi = int(np.searchsorted(es, ek, "right"))
            cands: list[tuple[float, Record]] = []
            seen_cfg: set[int] = set()
            lks = self._a["lookup_key"]
            for j in range(lo, hi):
                i = int(self._by_entry[j])
                if int(lks[i]) in seen_cfg:
                    continue
                seen_cfg.add(int(lks[i]))
                cands.append((float(self._a["cost"][i]), i))
                if len(cands) >= k:
                    break
            out = [(c, self._materialise(i)) for c, i in cands]
            for r in self._overlay_entries.get(ek, ()):
                if r.ok:
                    out.append((r.cost, r))
        out.sort(key=lambda cr: cr[0])
        res, cfgs = [], set()
        for _, r in out:
            if r.config_key in cfgs:
                continue
            cfgs.add(r.config_key)
            res.append(r)
            if len(res) == k:
                break
        return res

    def _live_paths(self) -> list[str]:
        with self._lock:
            overlay_pending = bool(self._overlay)
        if overlay_pending:
            self.refresh()
        return list(self._live_files)

    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True) -> pa.Table:
        """All records (optionally of one target and/or workload) as a new pyarrow Table,
        de-duplicated by record_id, with the columns of ``index.schema.RECORD_SCHEMA``."""
        with file_lock(self.path / "_lock", shared=True):
            for _attempt in range(20):
                paths = self._live_paths()
                try:
                    tables = [pq.read_table(p) for p in paths]
                    break
                except FileNotFoundError:
                    self.refresh()
            else:
                raise RuntimeError("DB kept changing while reading")
        if not tables:
            return RECORD_SCHEMA.empty_table()
        t = pa.concat_tables([x.replace_schema_metadata(None) for x in tables], promote_options="default")
        if target is not None:
            t = t.filter(pc.equal(t.column("target_key"), self._target_key(target)))
        if workload is not None:
            t = t.filter(pc.equal(t.column("workload_key"), self._workload_key(workload)))
        rid = t.column("rid_hash").to_numpy()
        _, first = np.unique(rid, return_index=True)
        if len(first) != len(rid):
            t = t.take(pa.array(np.sort(first)))
        if not include_stale and self._invalidated:
            inv = pa.array([self._invalidated.get(k, -1) for k in t.column("target_key").to_pylist()], pa.int64())
            t = t.filter(pc.greater(t.column("committed").cast(pa.int64()), inv))
        return t

    def iter_records(self, target: Any = None, workload: Any = None) -> Iterable[Record]:
        for row in self.records(target, workload).to_pylist():
            yield Record._from_table_row(row)

    def entries(self) -> pa.Table:
        """One row per (target_key, workload_key): target_key, target_name, target, workload_key,
        family, workload, records, ok_records, best_cost (seconds; null when none ok)."""
        t = self.records(include_stale=False)
        cols = ["target_key", "target_name", "target", "workload_key", "family", "workload"]
        if t.num_rows == 0:
            return pa.table({c: pa.array([], pa.string()) for c in cols} |
                            {"records": pa.array([], pa.int64()), "ok_records": pa.array([], pa.int64()),
                             "best_cost": pa.array([], pa.float64())})
        ok = pc.equal(t.column("status"), "ok")
        t2 = t.select(cols).append_column("ok", pc.cast(ok, pa.int64())).append_column(
            "okcost", pc.if_else(ok, t.column("cost"), pa.scalar(None, pa.float64())))
        g = t2.group_by(["target_key", "workload_key"], use_threads=False).aggregate([
            ("target_name", "first"), ("target", "first"), ("family", "first"), ("workload", "first"),
            ("ok", "count"), ("ok", "sum"), ("okcost", "min")])
        g = g.rename_columns([{"target_name_first": "target_name", "target_first": "target",
                              "family_first": "family", "workload_first": "workload", "ok_count": "records",
                              "ok_sum": "ok_records", "okcost_min": "best_cost"}
                              .get(c, c) for c in g.column_names])
        return g.select(cols + ["records", "ok_records", "best_cost"]).sort_by(
            [("target_name", "ascending"), ("workload_key", "ascending")])

    def targets(self) -> list[dict]:
        """Every target holding live records: target_key, target_name, target (dict), records."""
        with self._lock:
            a = self._a
            counts: dict[str, int] = {}
            if len(a["file"]):
                per_file = np.bincount(a["file"][a["live"]], minlength=len(self._file_list))
                for f, c in zip(self._file_list, per_file.tolist()):
                    tk = self._chunks[f].target_key
                    counts[tk] = counts.get(tk, 0) + c
            for r in self._overlay.values():
                counts[r.target_key] = counts.get(r.target_key, 0) + 1
            out = []
            for tk, c in counts.items():
                if c == 0:
                    continue
                name, tj = self._target_meta.get(tk, ("", "{}"))
                out.append({"target_key": tk, "target_name": name, "target": json.loads(tj), "records": c})
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def find_target(self, name_or_key: str) -> dict | None:
        """Target dict of a target in this DB, by target_name or target_key (or a unique key prefix)."""
        with self._lock:
            meta = dict(self._target_meta)
            for r in self._overlay.values():
                meta.setdefault(r.target_key, (r.target_name, r.target_json))
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
            return int(len(self._a["lookup_key"]) + len(self._overlay))

    def stats(self) -> dict:
        """records, targets, workloads, entries, files, size_bytes, stale_targets, and this
        session's lookups, hits and hit_rate."""
        with self._lock:
            if self._overlay:
                self.refresh()
            a = self._a
            live_ek = a["entry_key"][a["live"]]
            files = list(self._live_files)
            tkeys = {self._chunks[f].target_key for f, c in zip(files, np.bincount(
                a["file"][a["live"]], minlength=len(files)).tolist()) if c} if len(a["file"]) else set()
        size = 0
        for root, _, names in os.walk(self.records_dir):
            for n in names:
                try:
                    size += os.path.getsize(os.path.join(root, n))
                except OSError:
                    pass
        n_work = 0
        if len(live_ek):
            t = self.records(include_stale=False)
            n_work = len(pc.unique(t.column("workload_key")))
        return {
            "records": len(self),
            "live_records": int(len(live_ek)),
            "targets": len(tkeys),
            "workloads": n_work,
            "entries": int(len(np.unique(live_ek))),
            "files": len(files),
            "size_bytes": int(size),
            "stale_targets": sorted(self._invalidated),
            "lookups": self.lookups,
            "hits": self.hits,
            "hit_rate": (self.hits / self.lookups) if self.lookups else 0.0,
            "path": str(self.path),
        }

    def nearest(self, *args: Any, **kwargs: Any):
        """Nearest historical entries (see ``index.retrieval.nearest``)."""
        from .retrieval import nearest

        return nearest(self, *args, **kwargs)

