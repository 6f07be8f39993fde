"""The record store: a directory of Parquet files, hive-partitioned by target.

Layout of a DB directory::

    tunedb.json                         marker (format, schema version)
    records/target_slug=<slug>/part-<ns>-<id>.parquet    one file per commit and target
    records/target_slug=<slug>/cpart-<ns>-<id>.parquet   compacted files (list what they supersede)
    journal/<host>-<pid>-<id>.jsonl     write-ahead journals of small commits (see index.journal)
    invalidations/part-*.parquet        (target_key, invalidated_at): stale-marking, append-only
    derived/                            rebuildable caches (vector index, ...)
    _lock                               advisory lock held by compaction and other rewrites

Contract
--------
* ``commit`` validates every record first (ValueError naming field and record; nothing
  written).  Up to ``JOURNAL_MAX`` records are appended to the handle's journal and fsync'ed;
  more are written as one new file per target under a name readers ignore (``_tmp-``),
  fsynced, renamed into place, directory fsynced.  Either way durable when it returns.
  A ``RecordBatch`` (index.batch) is the columnar bulk form; large commits are indexed in
  memory at the next query rather than in ``commit``.
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

import atexit
import datetime as _dt
import hashlib
import json
import os
import re
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .batch import RecordBatch
from .fsutil import atomic_write_bytes, file_lock, fsync_dir, publish, temp_name, temp_owner_alive
from .journal import SUFFIX as _JSUFFIX
from .journal import JournalWriter, read_rows, try_lock_abandoned
from .keys import canonical_json, canonical_json_flat, hash64, key_of_text, rid_hash
from .record import Record
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
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


_TS_TYPE = pa.timestamp("us", tz="UTC")


def _index_cols(t: pa.Table) -> dict:
    """The in-memory index columns (numpy) of a record table."""
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
    return cols


_JOURNAL_SCHEMA = pa.schema([pa.field(f.name, pa.int64()) if f.name in ("timestamp", "committed") else f
                             for f in RECORD_SCHEMA])


def _journal_table(rows: list[dict]) -> pa.Table:
    """Journal rows as a RECORD_SCHEMA table (timestamps are integer microseconds there)."""
    t = pa.Table.from_pylist(rows, schema=_JOURNAL_SCHEMA)
    return t.cast(RECORD_SCHEMA)


def _split_by_target(table: pa.Table) -> list[tuple[str, pa.Table]]:
    if table.num_rows == 0:
        return []
    enc = pc.dictionary_encode(table.column("target_key")).combine_chunks()
    keys = enc.dictionary.to_pylist()
    if len(keys) == 1:
        return [(keys[0], table)]
    codes = enc.indices.to_numpy()
    return [(k, table.filter(pa.array(codes == i))) for i, k in enumerate(keys)]


_OPEN_HANDLES: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _fold_at_exit() -> None:
    """Fold the journals of handles still open at interpreter exit (best effort: a journal
    left behind is folded by the next process that opens the DB)."""
    for db in list(_OPEN_HANDLES):
        try:
            db.close()
        except Exception:
            pass


def _slug(target_name: str, target_key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._]+", "_", target_name).strip("._")[:48] or "target"
    return f"{safe}-{target_key[:16]}"


def _now_us() -> int:
    return time.time_ns() // 1000


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
    TABLE_CACHE_ROWS = 2_000_000  # rows of decoded file tables kept in memory (~600 bytes a row)
    OVERLAY_LIMIT = 200_000       # own-commit records kept outside the sorted arrays before a rebuild

    # ------------------------------------------------------------------ opening
    def __init__(self, path: Path):
        self.path = Path(path)
        self.records_dir = self.path / "records"
        self.inval_dir = self.path / "invalidations"
        self.derived_dir = self.path / "derived"
        self.journal_dir = self.path / "journal"
        self._journal: JournalWriter | None = None
        self._mem: dict[str, pa.Table] = {}  # journal chunk key -> its rows (journals are not Parquet)
        self._journal_state: dict[str, tuple[int, list[str]]] = {}  # journal path -> (size read, chunk keys)
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
        self._canon_cache: dict[tuple, tuple[str, str]] = {}
        self._prefix_cache: dict[tuple[str, str], Any] = {}  # (target_key, workload_key) -> BLAKE2b state
        self._compact_due: set = set()
        self._last_pos: dict[int, int] | None = None
        self._rid_sorted = np.zeros(0, np.int64)
        self._pending_rids: list[np.ndarray] = []  # sorted rid hashes of large commits not yet indexed
        self._dirty = False  # large commits wait to be indexed (see _sync)

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
        for d in ("records", "invalidations", "derived", "journal"):
            try:
                (p / d).mkdir(exist_ok=True)
            except OSError:
                if d != "journal":  # a read-only DB of an older layout has none
                    raise
        db = cls(p)
        db.refresh()
        _OPEN_HANDLES.add(db)
        return db

    def close(self) -> None:
        """Fold this handle's journal into Parquet and drop caches (the handle stays usable)."""
        with self._lock:
            self._fold_own_journal()
            self._tables.clear()
            self._table_rows = 0

    def __del__(self) -> None:
        # a handle dropped without close() still folds its journal (like a file flushing)
        try:
            if getattr(self, "_journal", None) is not None:
                self._fold_own_journal()
        except Exception:
            pass

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
        cols = _index_cols(t)
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
        """Re-scan the directory: pick up other processes' commits and compactions (and fold
        the journals of writers that are gone)."""
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
        seen.update(self._scan_journals())
        for key in list(self._chunks):
            if key not in seen:
                del self._chunks[key]
                self._drop_table(key)
                self._mem.pop(key, None)
        self._set_live_files()
        self._load_invalidations()
        self._rebuild_arrays()
        self._dirty = False
        self._overlay.clear()
        self._overlay_entries.clear()
        self._overlay_rids.clear()
        self._commits_since_scan.clear()

    # ------------------------------------------------------------- journals
    JOURNAL_MAX = 64      # records: a commit up to this size is appended to the handle's journal
    JOURNAL_FOLD = 1_000  # records: a journal this long is folded into Parquet part files

    def _journal_files(self) -> list[Path]:
        try:
            with os.scandir(self.journal_dir) as it:
                names = [e.name for e in it]
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            p = self.journal_dir / n
            if n.startswith("_tmp-"):
                if not temp_owner_alive(n, 3600.0, p):
                    try:
                        p.unlink()
                    except OSError:
                        pass
            elif n.endswith(_JSUFFIX):
                out.append(p)
        return sorted(out)

    def _scan_journals(self) -> list[str]:
        """(Re)read every journal that changed since the last scan; its rows become one
        in-memory chunk per target.  Returns the chunk keys of all journals."""
        keys: list[str] = []
        state: dict[str, tuple[int, list[str]]] = {}
        for jp in self._journal_files():
            size = jp.stat().st_size  # FileNotFoundError: folded meanwhile; the refresh retries
            old = self._journal_state.get(str(jp))
            if old is not None and old[0] == size:
                state[str(jp)] = old
                keys.extend(old[1])
                continue
            if old is not None:
                for k in old[1]:
                    self._chunks.pop(k, None)
                    self._drop_table(k)
                    self._mem.pop(k, None)
            ck = []
            table = _journal_table(read_rows(jp))
            for tkey, group in _split_by_target(table):
                k = f"{jp}::{tkey}"
                md = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
                self._target_meta.setdefault(tkey, md)
                self._mem[k] = group
                self._chunks[k] = _Chunk(Path(k), tkey, _index_cols(group), [])
                ck.append(k)
            state[str(jp)] = (size, ck)
            keys.extend(ck)
        self._journal_state = state
        return keys

    def _journal_append(self, recs: list[Record], committed: int) -> None:
        j = self._journal
        if j is None or j.pid != os.getpid():  # (a forked child never appends to its parent's)
            j = self._journal = JournalWriter(self.journal_dir)
        j.append([self._journal_row(r, committed) for r in recs])
        if j.records >= self.JOURNAL_FOLD:
            self._fold_own_journal()

    def _journal_row(self, r: Record, committed: int) -> dict:
        """``Record.to_row`` plus what the store adds, JSON-ready (times in integer microseconds)."""
        row = r.to_row()
        row.update(timestamp=(r.timestamp - _EPOCH) // _dt.timedelta(microseconds=1),
                   session=r.session or self.session, target_slug=_slug(r.target_name, r.target_key),
                   rid_hash=rid_hash(r.record_id), committed=committed)
        return row

    def _fold(self, path: Path) -> None:
        """Write the rows of journal ``path`` as Parquet part files, then delete it (a crash
        in between leaves both; readers de-duplicate by record_id)."""
        table = _journal_table(read_rows(path))
        for tkey, group in _split_by_target(table):
            name, tj = group.column("target_name")[0].as_py(), group.column("target")[0].as_py()
            out = self._publish_table(_slug(name, tkey), group, self._target_file_meta(tkey, name, tj), "part")
            self._count_commit(out.parent, "part")
        path.unlink()
        fsync_dir(path.parent)

    def _fold_own_journal(self) -> None:
        j, self._journal = self._journal, None
        if j is None:
            return
        try:
            if j.pid == os.getpid():
                self._fold(j.path)
        finally:
            j.close()

    def _fold_abandoned_journals(self) -> None:
        own = self._journal.path if self._journal is not None else None
        for jp in self._journal_files():
            if jp == own:
                continue
            fd = try_lock_abandoned(jp)
            if fd is None:
                continue
            try:
                self._fold(jp)
            except OSError:
                pass  # a read-only DB: the journal is read as it is
            finally:
                os.close(fd)

    def _set_live_files(self) -> None:
        superseded = set()
        for key, ch in self._chunks.items():
            d = os.path.dirname(key)
            for name in ch.supersedes:
                superseded.add(os.path.join(d, name))
        self._live_files = sorted(k for k in self._chunks if k not in superseded)
        self._superseded = sorted(superseded & set(self._chunks))

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
            # de-duplicate by record_id (first occurrence wins); a plain sort finds out whether
            # there is anything to do (10x cheaper than the argsort of np.unique)
            srt = np.sort(a["rid_hash"])
            if (srt[1:] == srt[:-1]).any():
                _, first = np.unique(a["rid_hash"], return_index=True)
                first.sort()
                a = {k: v[first] for k, v in a.items()}
                srt = np.sort(a["rid_hash"])
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
        self._rid_sorted = srt if n else np.zeros(0, np.int64)
        self._pending_rids = []

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
    SMALL_COMMIT = 2_000  # records: a commit up to this size goes to the overlay, a larger one is indexed lazily

    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """Validate and durably write ``records`` (Records or a ``RecordBatch``); returns how
        many were new.

        Records whose record_id this handle already holds are skipped (idempotent
        re-commit).  Raises ValueError naming the field and the record when any record
        is invalid; then nothing of the commit is written.
        """
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
        with self._lock:
            keep = self._fresh_mask(rh)
            n_new = int(keep.sum())
            if not n_new:
                return 0
            committed = _now_us()
            if n_new <= self.SMALL_COMMIT:
                if batch is not None and not recs:
                    recs = batch.table.filter(pa.array(keep)) if n_new < len(keep) else batch.table
                    recs = RecordBatch(recs, batch.target_meta).to_records()
                else:
                    recs = [r for r, k in zip(recs, keep.tolist()) if k]
                self._commit_small(recs, committed)
            else:
                if batch is None:
                    batch = RecordBatch.from_records(recs)
                tkeys, codes = batch.target_groups()
                table = batch.table
                if n_new < len(keep):
                    table, codes = table.filter(pa.array(keep)), codes[keep]
                self._commit_large(table, tkeys, codes, batch.target_meta, committed)
            due, self._compact_due = self._compact_due, set()
            for d in due:  # after the in-memory state is updated: a compaction refreshes it
                self._maybe_auto_compact(d)
            if len(self._overlay) > self.OVERLAY_LIMIT:
                self.refresh()
            return n_new

    def _fresh_mask(self, rh: np.ndarray) -> np.ndarray:
        """True for each rid hash this handle does not hold yet (first occurrence within ``rh``)."""
        keep = np.ones(len(rh), bool)
        if len(rh) > 1:
            srt = np.sort(rh)
            if (srt[1:] == srt[:-1]).any():  # repeated ids within the commit: keep the first
                keep[:] = False
                keep[np.unique(rh, return_index=True)[1]] = True
        if len(self._pending_rids) > 1:  # one sorted array to search, not one per large commit
            self._pending_rids = [np.sort(np.concatenate(self._pending_rids))]
        for known in [self._rid_sorted, *self._pending_rids]:
            if len(known):
                pos = np.minimum(np.searchsorted(known, rh), len(known) - 1)
                keep &= known[pos] != rh
        if self._overlay_rids:
            if len(rh) <= 64:
                ov = self._overlay_rids
                keep &= np.array([h not in ov for h in rh.tolist()], bool)
            else:
                keep &= ~np.isin(rh, np.fromiter(self._overlay_rids, np.int64, len(self._overlay_rids)))
        return keep

    def _commit_small(self, recs: list[Record], committed: int) -> None:
        """Write ``recs`` (to the journal, or one file per target) and keep them in the overlay."""
        for r in recs:
            self._target_meta.setdefault(r.target_key, (r.target_name, r.target_json))
        if len(recs) <= self.JOURNAL_MAX and self._journal_writable():
            self._journal_append(recs, committed)
            self._overlay_add(recs)
            return
        by_target: dict[str, list[Record]] = {}
        for r in recs:
            by_target.setdefault(r.target_key, []).append(r)
        for tkey, group in by_target.items():
            first = group[0]
            # one C++ conversion of the rows (27 per-column conversions cost more for a few rows)
            table = _journal_table([self._journal_row(r, committed) for r in group])
            self._write_table(_slug(first.target_name, tkey), table,
                              self._target_file_meta(tkey, first.target_name, first.target_json), "part")
        self._overlay_add(recs)

    def _journal_writable(self) -> bool:
        if self._journal is not None:
            return True
        return self.journal_dir.is_dir() and os.access(self.journal_dir, os.W_OK)

    def _overlay_add(self, recs: list[Record]) -> None:
        for r in recs:
            self._overlay[r.lookup_key] = r
            self._overlay_entries.setdefault(r.entry_key, []).append(r)
        self._overlay_rids.update(rid_hash(r.record_id) for r in recs)

    def _commit_large(self, table: pa.Table, tkeys: list[str], codes: np.ndarray, target_meta: dict,
                      committed: int) -> None:
        """Write ``table`` (one file per target) and index its files lazily (next query)."""
        order = np.argsort(codes, kind="stable") if len(tkeys) > 1 else None
        bounds = np.searchsorted(codes[order], np.arange(len(tkeys) + 1)) if order is not None else [0, len(codes)]

        def write(g: int) -> tuple[str, Path, pa.Table]:
            tkey = tkeys[g]
            group = table if order is None else table.take(pa.array(order[bounds[g]:bounds[g + 1]]))
            name, tj = target_meta[tkey]
            full = self._stamp(group, _slug(name, tkey), committed)
            path = self._publish_table(_slug(name, tkey), full, self._target_file_meta(tkey, name, tj), "part")
            return tkey, path, full

        # targets are written in parallel (Arrow's take and Parquet encoding release the GIL)
        if len(tkeys) > 1 and table.num_rows >= 20_000:
            with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
                written = list(ex.map(write, range(len(tkeys))))
        else:
            written = [write(g) for g in range(len(tkeys))]
        for tkey, path, full in written:
            self._target_meta.setdefault(tkey, target_meta[tkey])
            self._count_commit(path.parent, "part")
            self._chunks[str(path)] = _Chunk(path, tkey, _index_cols(full), [])
            self._pending_rids.append(np.sort(full.column("rid_hash").to_numpy()))
        self._dirty = True

    def _sync(self) -> None:
        """Index the files of large commits (deferred from ``commit`` to the next query)."""
        if self._dirty:
            self._dirty = False
            self._set_live_files()
            self._rebuild_arrays()

    @staticmethod
    def _stamp(table: pa.Table, slug: str, committed_us: int) -> pa.Table:
        """A batch-layout table with the store's ``target_slug`` and ``committed`` columns added."""
        n = table.num_rows
        table = table.add_column(RECORD_SCHEMA.get_field_index("target_slug"), RECORD_SCHEMA.field("target_slug"),
                                 pa.repeat(pa.scalar(slug), n))
        return table.append_column(RECORD_SCHEMA.field("committed"), pa.repeat(pa.scalar(committed_us, _TS_TYPE), n))

    @staticmethod
    def _target_file_meta(tkey: str, target_name: str, target_json: str) -> dict:
        return {META_TARGET_KEY: tkey.encode(), META_TARGET: target_json.encode(),
                META_TARGET_NAME: target_name.encode()}

    def _write_table(self, slug: str, table: pa.Table, meta: dict, prefix: str) -> Path:
        path = self._publish_table(slug, table, meta, prefix)
        self._count_commit(path.parent, prefix)
        return path

    def _count_commit(self, d: Path, prefix: str) -> None:
        self._commits_since_scan[str(d)] = self._commits_since_scan.get(str(d), 0) + 1
        if prefix == "part" and self._commits_since_scan[str(d)] % 16 == 0:
            self._compact_due.add(d)

    def _publish_table(self, slug: str, table: pa.Table, meta: dict, prefix: str) -> Path:
        """Write ``table`` durably as a new file of partition ``slug`` (write-then-rename with
        fsync of file and directory).  Thread-safe: touches no handle state."""
        d = self.records_dir / f"target_slug={slug}"
        if not d.exists():
            d.mkdir(parents=True, exist_ok=True)
            fsync_dir(self.records_dir)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        tmp = d / temp_name()
        final = d / f"{prefix}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        compacted = prefix == "cpart"
        buf = pa.BufferOutputStream()
        # commit files: no dictionaries or statistics (cheaper to write; zstd alone keeps them
        # small); compacted files: dictionaries and statistics for readers that filter
        pq.write_table(table, buf, compression="zstd" if compacted else "lz4", row_group_size=256 * 1024,
                       write_statistics=compacted, use_dictionary=compacted)
        data = buf.getvalue()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
            fsync_dir(d)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
        return final

    def _maybe_auto_compact(self, d: Path) -> None:
        try:
            n = sum(1 for n in os.listdir(d) if _PART_RE.match(n))
        except FileNotFoundError:
            return
        if n > self.AUTO_COMPACT_FILES:
            # no refresh: the handle's arrays still hold the same records; a row whose file
            # was merged away is found again by the refresh-and-retry of lookup/best
            self._rewrite_partitions([d], keep=None, blocking=False, small_only=True, refresh=False)

    # ----------------------------------------------------------- rewriting
    AUTO_COMPACT_MAX_BYTES = 1 << 20  # automatic compaction merges only files smaller than this

    def _rewrite_partitions(self, dirs: list[Path], keep, *, blocking: bool = True,
                            min_files: int = 2, small_only: bool = False, refresh: bool = True) -> dict:
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
                if not names or (keep is None and len(names) < min_files
                                 and not (len(names) == 1 and names[0].startswith("part-") and not small_only)):
                    continue  # (``compact`` still rewrites a lone commit file: dictionaries, zstd)
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
        if refresh:
            self.refresh()
        return stats

    def _fold_journals(self) -> None:
        """Fold this handle's journal and abandoned ones, so a rewrite sees their records."""
        with self._lock:
            self._fold_own_journal()
            self._fold_abandoned_journals()

    def _all_partition_dirs(self) -> list[Path]:
        return sorted(p for p in self.records_dir.iterdir() if p.is_dir() and p.name.startswith("target_slug="))

    def _partition_dirs_of(self, target: Any) -> list[Path]:
        tkey = self._target_key(target)
        return [p for p in self._all_partition_dirs() if p.name.endswith(tkey[:16])]

    def compact(self) -> dict:
        """Merge the files of every partition into one (under the DB lock).  Returns counts."""
        self._fold_journals()
        return self._rewrite_partitions(self._all_partition_dirs(), keep=None)

    def dedup(self) -> dict:
        """Remove repeated identical measurements: same (target, workload, config), status
        and costs; the earliest is kept.  Returns counts (``removed``)."""
        self._fold_journals()
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
        self._fold_journals()
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
                    "source", "session", "meta", "entry_key")
    # a decoded row: record_id, costs, status, error, source, session, target_name, meta,
    # compile_s, wall_s, timestamp (datetime), entry_key

    _DICT_COLUMNS = ("status", "error", "source", "session", "target_name", "meta")  # order of _rows

    def _file_table(self, fidx: int) -> dict:
        """Row columns of one live file, decoded for fast single-row access (kept up to
        TABLE_CACHE_ROWS rows, the oldest decoded dropped first):
        ``_rows`` holds one tuple of ready Python values per row (order: the comment above); the
        JSON columns stay Arrow arrays (read only when the caller does not know them)."""
        path = self._file_list[fidx]
        t = self._tables.get(path)
        if t is not None:
            return t
        mem = self._mem.get(path)
        tab = mem if mem is not None else pq.read_table(path, columns=list(self._ROW_COLUMNS), memory_map=True)
        # JSON and key columns (read only when a caller does not know them): dictionary-encoded
        # where values repeat (one target per file, few workloads)
        t = {c: tab.column(c).combine_chunks() for c in ("config", "config_key")}
        for c in ("target", "workload", "target_key", "workload_key"):
            t[c] = pc.dictionary_encode(tab.column(c).combine_chunks())
        n = tab.num_rows
        cols = []
        for c in self._DICT_COLUMNS:  # repeated strings: one Python object per distinct value
            enc = pc.dictionary_encode(tab.column(c).combine_chunks())
            vals = [v or "" for v in enc.dictionary.to_pylist()] if c != "meta" else \
                [v or "{}" for v in enc.dictionary.to_pylist()]
            cols.append([vals[k] for k in enc.indices.to_numpy(zero_copy_only=False).tolist()])
        costs = tab.column("costs").combine_chunks()
        off = costs.offsets.to_numpy().tolist()
        val = costs.values.to_numpy(zero_copy_only=False).astype(np.float64).tolist()
        same: dict = {}  # repeated numbers share one Python object (floats here, ints below)
        nums = [[same.setdefault(v, v) if v == v else None for v in tab.column(c).to_numpy(zero_copy_only=False)
                 .astype(np.float64).tolist()] for c in ("compile_s", "wall_s")]
        same_int: dict = {}
        eks = [same_int.setdefault(v, v) for v in tab.column("entry_key").to_numpy().tolist()]
        ts = tab.column("timestamp").cast(pa.int64()).to_numpy().tolist()
        t["_rows"] = list(zip(tab.column("record_id").to_pylist(), (tuple(val[off[r]:off[r + 1]]) for r in range(n)),
                              *cols, *nums, (_EPOCH + _dt.timedelta(microseconds=x) for x in ts), eks))
        t["_n"] = n
        self._tables[path] = t
        self._table_rows += n
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
        """Record of row ``i`` of the in-memory arrays (see ``_materialise_at``)."""
        a = self._a
        return self._materialise_at(int(a["file"][i]), int(a["row"][i]), int(a["lookup_key"][i]), known)

    def _materialise_at(self, fidx: int, row: int, lk: int, known: tuple | None = None) -> Record:
        """Record of ``row`` of live file ``fidx`` (its decoded table).

        ``known`` = (target, workload, config, their canonical JSON texts and keys) when the
        caller already holds them (a lookup hit): those columns are then not read back.
        FileNotFoundError: the file was merged away; the caller refreshes and retries."""
        t = self._file_table(fidx)
        if known is None:
            tj, wj, cj = (t[c][row].as_py() for c in ("target", "workload", "config"))
            known = (self._json(tj), self._json(wj), json.loads(cj), tj, wj, cj,
                     t["target_key"][row].as_py(), t["workload_key"][row].as_py(), t["config_key"][row].as_py())
        tdict, wdict, cdict, tj, wj, cj, tk, wk, ck = known
        rid, costs, status, error, source, session, tname, meta, cs, ws, ts, ek = t["_rows"][row]
        # one dict display, installed as the Record's __dict__ (Record._from_fields)
        return Record._from_fields({
            "target": tdict, "workload": wdict, "config": cdict, "costs": costs, "status": status,
            "error": error, "compile_s": cs, "wall_s": ws, "timestamp": ts, "source": source, "session": session,
            "meta": json.loads(meta) if meta != "{}" else {}, "record_id": rid, "target_name": tname,
            "target_key": tk, "workload_key": wk, "config_key": ck, "target_json": tj, "workload_json": wj,
            "config_json": cj, "meta_json": meta, "lookup_key": lk, "entry_key": ek})

    def _text_key(self, text: str) -> str:
        k = self._text_keys.get(text)
        if k is None:
            if len(self._text_keys) > 10_000:
                self._text_keys.clear()
            k = self._text_keys[text] = key_of_text(text)
        return k

    def _canon(self, obj: Any, what: str) -> tuple[str, str]:
        """(canonical JSON, key) of a target/workload/config given as a dict or Record field.

        Flat dicts are memoised by value: (items, value types) -- the types keep ``True``,
        ``1`` and ``1.0`` apart, which compare equal but are different JSON."""
        if isinstance(obj, Record):
            return (obj.target_json, obj.target_key) if what == "target" else (obj.workload_json, obj.workload_key)
        fp = None
        if type(obj) is dict:
            try:
                fp = (what, tuple(obj.items()), tuple(map(type, obj.values())))
                hit = self._canon_cache.get(fp)
            except TypeError:  # unhashable values (nested lists or objects)
                fp = hit = None
            if hit is not None:
                return hit
        elif hasattr(obj, "to_json_dict"):
            obj = obj.to_json_dict()
        if not isinstance(obj, Mapping):
            raise TypeError(f"{what} must be a dict, a Record or a {what}_key, not {type(obj).__name__}")
        text = canonical_json(obj)
        res = (text, self._text_key(text))
        if fp is not None:
            if len(self._canon_cache) > 10_000:
                self._canon_cache.clear()
            self._canon_cache[fp] = res
        return res

    def _last_row_of(self, lk: int) -> int | None:
        """(file index << 32 | row) of the latest live record with lookup_key ``lk`` (the map
        is built lazily, vectorised, on the first lookup after a rebuild)."""
        if self._last_pos is None:
            order = self._by_lookup[self._a["live"][self._by_lookup]]  # live rows, lookup order
            ks = self._a["lookup_key"][order]
            if len(ks):
                last = order[np.flatnonzero(np.r_[ks[1:] != ks[:-1], True])]  # rows, last of each key
                packed = (self._a["file"][last].astype(np.int64) << 32) | self._a["row"][last].astype(np.int64)
                self._last_pos = dict(zip(self._a["lookup_key"][last].tolist(), packed.tolist()))
            else:
                self._last_pos = {}
        return self._last_pos.get(lk)

    def _entry_of(self, target: Any, workload: Any) -> tuple:
        """(target JSON, workload JSON, target_key, workload_key, BLAKE2b state of the lookup-key
        prefix, target dict, workload dict) of a (target, workload).  Each side is memoised by
        value (see ``_canon``), the prefix by the key pair.  JSON texts and dicts are None when
        given as keys or names."""
        if isinstance(target, str):
            tj, tkey, tdict = None, self._target_key(target), None
        else:
            tj, tkey = self._canon(target, "target")
            tdict = self._json(tj)
        if isinstance(workload, str):
            wj, wkey, wdict = None, self._workload_key(workload), None
        else:
            wj, wkey = self._canon(workload, "workload")
            wdict = self._json(wj)
        pair = (tkey, wkey)
        prefix = self._prefix_cache.get(pair)
        if prefix is None:
            if len(self._prefix_cache) > 200_000:
                self._prefix_cache.clear()
            prefix = self._prefix_cache[pair] = hashlib.blake2b(f"{tkey}\0{wkey}\0".encode(), digest_size=8)
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
            self._sync()
            self.lookups += 1
            r = self._overlay.get(lk)
            if r is not None:
                self.hits += 1
                return r
            pos = self._last_row_of(lk)
            if pos is None:
                return None
            self.hits += 1
            known = None
            if tj is not None and wj is not None and cj is not None:
                known = (tdict, wdict, dict(config) if flat else json.loads(cj), tj, wj, cj, tkey, wkey, ckey)
            return self._materialise_at(pos >> 32, pos & 0xFFFFFFFF, lk, known)

    def best(self, target: Any, workload: Any, k: int = 1) -> list[Record]:
        """The ``k`` best ``ok`` records of (target, workload), ascending cost, one per config
        (its fastest measurement)."""
        return self._retrying(self._best, target, workload, k)

    def _best(self, target: Any, workload: Any, k: int) -> list[Record]:
        if k <= 0:
            return []
        ek = hash64(self._target_key(target), self._workload_key(workload))
        with self._lock:
            self._sync()
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
            self._sync()
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
                    tables = [self._mem[p] if p in self._mem else pq.read_table(p) for p in paths]
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
            self._sync()
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
            self._sync()
            return int(len(self._a["lookup_key"]) + len(self._overlay))

    def stats(self) -> dict:
        """records, targets, workloads, entries, files, size_bytes, stale_targets, and this
        session's lookups, hits and hit_rate."""
        with self._lock:
            if self._overlay:
                self.refresh()
            self._sync()
            a = self._a
            live_ek = a["entry_key"][a["live"]]
            files = list(self._live_files)
            tkeys = {self._chunks[f].target_key for f, c in zip(files, np.bincount(
                a["file"][a["live"]], minlength=len(files)).tolist()) if c} if len(a["file"]) else set()
        size = 0
        for root, _, names in [*os.walk(self.records_dir), *os.walk(self.journal_dir)]:
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

