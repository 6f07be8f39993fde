"""Parquet part files of the record store: names, layouts, durable publishing, rewrites.

A partition is one directory per target, ``records/target_slug=<slug>/``, of immutable files:

* ``part-<ns>-<id>.parquet``: one commit (or one journal fold) of one target.  lz4, no
  dictionaries or statistics: cheap to write, which is what a commit waits for.
* ``cpart-<ns>-<id>.parquet``: a compacted file written by ``rewrite_partition``.  zstd with
  dictionaries and statistics (for readers that filter), rows sorted by (entry_key, cost); its
  Parquet metadata key ``tunedb.supersedes`` lists the names of the files it replaces, so a
  reader that finds both ignores the superseded ones and a crash mid-rewrite never
  double-counts.

Every file carries its target (key, canonical JSON, name) in its Parquet metadata.  A file is
written under a name readers ignore (``_tmp-...``, see ``index.fsutil``), fsync'ed, renamed
into place and its directory fsync'ed: a published file is complete and durable, and it is
never modified afterwards -- only deleted, under the DB lock, once a compacted file
supersedes it.

Units: sizes in bytes; ``*_us`` values are integer microseconds since the epoch (UTC).
Nothing here holds state: the store calls these functions under its own locks.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.parquet.fsutil import atomic_write_bytes, fsync_dir
from tunedb.index.record import target_slug as target_slug
from tunedb.index.schema import RECORD_SCHEMA
from tunedb.index.tables import first_by_record_id

META_SUPERSEDES = b"tunedb.supersedes"
META_TARGET_KEY = b"tunedb.target_key"
META_TARGET = b"tunedb.target"
META_TARGET_NAME = b"tunedb.target_name"
#: names of published part files (commit files and compacted files)
PART_RE = re.compile(r"^c?part-\d+-[0-9a-f]+\.parquet$")
TS_TYPE = pa.timestamp("us", tz="UTC")
PARTITION_PREFIX = "target_slug="
ROW_GROUP_ROWS = 256 * 1024
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)  # of the integer-microsecond times


def now_us() -> int:
    """Now, in integer microseconds since the epoch."""
    return time.time_ns() // 1000


def target_file_meta(tkey: str, target_name: str, target_json: str) -> dict[bytes, bytes]:
    """The Parquet metadata naming a file's target."""
    return {META_TARGET_KEY: tkey.encode(), META_TARGET: target_json.encode(),
            META_TARGET_NAME: target_name.encode()}


def stamp(table: pa.Table, slug: str, committed_us: int) -> pa.Table:
    """A batch-layout table with the store's ``target_slug`` and ``committed`` columns added."""
    n = table.num_rows
    table = table.add_column(RECORD_SCHEMA.get_field_index("target_slug"), RECORD_SCHEMA.field("target_slug"),
                             pa.repeat(pa.scalar(slug), n))
    return table.append_column(RECORD_SCHEMA.field("committed"), pa.repeat(pa.scalar(committed_us, TS_TYPE), n))


def split_by_target(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """(target_key, its rows) for each target of ``table``, in order of first appearance."""
    if table.num_rows == 0:
        return []
    enc = pc.dictionary_encode(table.column("target_key")).combine_chunks()
    keys = enc.dictionary.to_pylist()
    if len(keys) == 1:
        return [(keys[0], table)]
    codes = enc.indices.to_numpy()
    return [(k, table.filter(pa.array(codes == i))) for i, k in enumerate(keys)]


def write_part(records_dir: Path, slug: str, table: pa.Table, meta: dict[bytes, bytes], prefix: str) -> Path:
    """Write ``table`` durably as a new file of partition ``slug`` (write-then-rename with
    fsync of file and directory); ``prefix`` is "part" (a commit) or "cpart" (compacted).
    Returns the published path.  Thread-safe: touches no shared state."""
    d = records_dir / f"{PARTITION_PREFIX}{slug}"
    if not d.exists():
        d.mkdir(parents=True, exist_ok=True)
        fsync_dir(records_dir)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    final = d / f"{prefix}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
    compacted = prefix == "cpart"
    buf = pa.BufferOutputStream()
    # commit files: lz4, no dictionaries or statistics (cheaper to write); compacted files:
    # zstd, dictionaries and statistics for readers that filter
    pq.write_table(table, buf, compression="zstd" if compacted else "lz4", row_group_size=ROW_GROUP_ROWS,
                   write_statistics=compacted, use_dictionary=compacted)
    atomic_write_bytes(final, buf.getvalue())
    return final


def write_targets(records_dir: Path, table: pa.Table, tkeys: list[str], codes: np.ndarray,
                  target_meta: dict[str, tuple[str, str]], committed_us: int) -> list[tuple[str, Path, pa.Table]]:
    """Publish ``table`` (batch layout) as one commit file per target: row ``i`` belongs to
    target ``tkeys[codes[i]]``, ``target_meta`` maps a target_key to (name, canonical JSON).
    Returns (target_key, published path, stamped table) per target, in ``tkeys`` order."""
    order = np.argsort(codes, kind="stable") if len(tkeys) > 1 else None
    bounds = np.searchsorted(codes[order], np.arange(len(tkeys) + 1)) if order is not None else [0, len(codes)]

    def write(g: int) -> tuple[str, Path, pa.Table]:
        tkey = tkeys[g]
        group = table if order is None else table.take(pa.array(order[bounds[g]:bounds[g + 1]]))
        name, tj = target_meta[tkey]
        slug = target_slug(name, tkey)
        full = stamp(group, slug, committed_us)
        path = write_part(records_dir, slug, full, target_file_meta(tkey, name, tj), "part")
        return tkey, path, full

    # targets are written in parallel (Arrow's take and Parquet encoding release the GIL)
    if len(tkeys) > 1 and table.num_rows >= 20_000:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
            return list(ex.map(write, range(len(tkeys))))
    return [write(g) for g in range(len(tkeys))]


def partition_dirs(records_dir: Path) -> list[Path]:
    """Every partition directory, sorted."""
    return sorted(p for p in records_dir.iterdir() if p.is_dir() and p.name.startswith(PARTITION_PREFIX))


def scan_partitions(records_dir: Path) -> tuple[dict[str, list[Path]], list[Path]]:
    """Published part files per partition dir (sorted), and leftover temp files.  A partition
    removed while listing (a rewrite emptied it) is skipped."""
    parts: dict[str, list[Path]] = {}
    temps: list[Path] = []
    with os.scandir(records_dir) as it:
        dirs = [e.path for e in it if e.is_dir() and e.name.startswith(PARTITION_PREFIX)]
    for d in dirs:
        files = []
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.name.startswith("_tmp-"):
                        temps.append(Path(e.path))
                    elif PART_RE.match(e.name):
                        files.append(Path(e.path))
        except FileNotFoundError:
            continue
        parts[d] = sorted(files)
    return parts, temps


def count_parts(d: Path) -> int | None:
    """How many published files partition ``d`` holds (None when it is gone)."""
    try:
        return sum(1 for n in os.listdir(d) if PART_RE.match(n))
    except FileNotFoundError:
        return None


def superseded_by(d: Path, names: list[str]) -> set[str]:
    """Names that the compacted files among ``names`` (of partition ``d``) list as superseded."""
    sup: set[str] = set()
    for n in names:
        if n.startswith("cpart-"):
            md = pq.read_schema(d / n).metadata or {}
            if META_SUPERSEDES in md:
                sup.update(json.loads(md[META_SUPERSEDES].decode()))
    return sup


def rewrite_partition(records_dir: Path, d: Path, keep: Callable[[pa.Table], np.ndarray] | None, *,
                      min_files: int = 2, small_only: bool = False, small_bytes: int = 1 << 20,
                      written: Callable[[Path], None] | None = None) -> dict | None:
    """Rewrite partition ``d`` into one compacted file, keeping rows where ``keep(table)`` is
    true (all rows when None), de-duplicated by record_id.  The caller holds the DB lock
    (exclusive): only files listed here are merged, so concurrent appends are never touched.

    ``small_only``: merge only files smaller than ``small_bytes`` (tiered automatic
    compaction: big compacted files are not rewritten again and again).  ``written(path)`` is
    called once the compacted file is published, before the old files are deleted.
    Returns this partition's counts (partitions, files_before, files_after, rows_before,
    rows_after), or None when there was nothing to rewrite.

    Crash safety: the compacted file (listing what it supersedes) is published before any old
    file is deleted; a crash in between leaves both and readers ignore the superseded ones."""
    try:
        names = sorted(n for n in os.listdir(d) if PART_RE.match(n))
    except FileNotFoundError:
        return None
    # drop files already superseded by a compacted file (crash leftovers)
    sup = superseded_by(d, names)
    for n in sup & set(names):
        try:
            os.unlink(d / n)
        except FileNotFoundError:
            pass
    names = [n for n in names if n not in sup]
    if small_only:
        names = [n for n in names if (d / n).stat().st_size < small_bytes]
    if not names or (keep is None and len(names) < min_files
                     and not (len(names) == 1 and names[0].startswith("part-") and not small_only)):
        return None  # (``compact`` still rewrites a lone commit file: dictionaries, zstd)
    tables = [pq.ParquetFile(d / n).read(use_threads=False) for n in names]
    md = tables[0].schema.metadata or {}
    table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    rows_before = table.num_rows
    table = first_by_record_id(table)
    if keep is not None:
        mask = keep(table)
        table = table.filter(pa.array(mask))
    stats = {"partitions": 1, "files_before": len(names), "files_after": 0, "rows_before": rows_before,
             "rows_after": table.num_rows}
    if table.num_rows:
        order = np.lexsort((table.column("cost").to_numpy(zero_copy_only=False),
                            table.column("entry_key").to_numpy()))
        table = table.take(pa.array(order))
        meta = {k: v for k, v in md.items() if k in (META_TARGET_KEY, META_TARGET, META_TARGET_NAME)}
        meta[META_SUPERSEDES] = json.dumps(names).encode()
        path = write_part(records_dir, d.name.split("=", 1)[1], table, meta, "cpart")
        if written is not None:
            written(path)
        stats["files_after"] = 1
    for n in names:
        try:
            os.unlink(d / n)
        except FileNotFoundError:
            pass
    fsync_dir(d)
    if not any(PART_RE.match(n) for n in os.listdir(d)):
        try:
            os.rmdir(d)
        except OSError:
            pass
    return stats
