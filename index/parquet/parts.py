"""Parquet part files of the record store: names, layouts, durable publishing, rewrites.

A partition is one directory per target, ``records/target_slug=<slug>/``, of immutable files:

* ``part-<ns>-<id>.parquet``: one commit (or one journal fold) of one target.  lz4, no
  dictionaries or statistics: cheap to write, which is what a commit waits for.
* ``cpart-<ns>-<id>.parquet``: a compacted file written by ``rewrite_partition``.  zstd with
  dictionaries and statistics (for readers that filter), rows sorted by (entry_key, cost); its
  Parquet metadata key ``tunedb.supersedes`` lists the names of the files it replaces, so a
  reader that finds both ignores the superseded ones and a crash mid-rewrite never
  double-counts.

A journal fold writes ``part-`` files too, under a name derived from the journal and the target
(``fold_part_name``), so folding the same journal again (after a crash part-way through a fold)
finds or replaces its files instead of adding copies.

Every file carries its target (key, canonical JSON, name) in its Parquet metadata.  A file is
written under a name readers ignore (``_tmp-...``, see ``tunedb.index.support.fsutil``), fsync'ed, renamed
into place and its directory fsync'ed: a published file is complete and durable, and it is
never modified afterwards -- only deleted once a compacted file supersedes it.

All-or-nothing: ``publish_parts`` writes and fsyncs every temp file of a commit before it
renames any, so a failure while writing (ENOSPC, EIO) removes the temp files and publishes
nothing; a rename failing part-way un-publishes the files that were renamed before it raises.

Units: sizes in bytes; ``*_us`` values are integer microseconds since the epoch (UTC).
Nothing here holds state: the store calls these functions under its own locks.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.contract.tables import first_by_record_id
from tunedb.index.model.record import target_slug as target_slug
from tunedb.index.model.schema import RECORD_SCHEMA, conform
from tunedb.index.parquet import deltalog
from tunedb.index.support.fsutil import check_no_links, fsync_dir, stage_bytes, unlink_quietly

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
    return table.add_column(RECORD_SCHEMA.get_field_index("committed"), RECORD_SCHEMA.field("committed"),
                            pa.repeat(pa.scalar(committed_us, TS_TYPE), n))


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


class PartSpec(NamedTuple):
    """One file to publish: ``table`` (with the store's columns) of partition ``slug`` with
    Parquet metadata ``meta``; ``prefix`` "part" (a commit or fold) or "cpart" (compacted);
    ``name``: a fixed file name (a journal fold's, see ``fold_part_name``), else a new one."""

    slug: str
    table: pa.Table
    meta: dict[bytes, bytes]
    prefix: str = "part"
    name: str | None = None


def new_part_name(prefix: str) -> str:
    return f"{prefix}-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


def fold_part_name(journal_name: str, tkey: str, first_committed_us: int) -> str:
    """The name of the file that folding journal ``journal_name`` writes for target ``tkey``
    (whose earliest row was committed at ``first_committed_us``): the same on every fold of
    that journal, so a re-fold never adds a second copy."""
    h = hashlib.blake2b(f"{journal_name}\0{tkey}".encode(), digest_size=6).hexdigest()
    return f"part-{max(first_committed_us, 0) * 1000:020d}-{h}.parquet"


def encode(table: pa.Table, meta: dict[bytes, bytes], compacted: bool) -> pa.Buffer:
    """``table`` as Parquet bytes with ``meta`` added to its schema metadata.  Commit files:
    lz4, no dictionaries or statistics (cheaper to write); compacted files: zstd, dictionaries
    and statistics for readers that filter."""
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, compression="zstd" if compacted else "lz4", row_group_size=ROW_GROUP_ROWS,
                   write_statistics=compacted, use_dictionary=compacted)
    return buf.getvalue()


def _partition_dir(records_dir: Path, slug: str) -> Path:
    d = records_dir / f"{PARTITION_PREFIX}{slug}"
    check_no_links(records_dir, d)
    if not d.exists():
        d.mkdir(parents=True, exist_ok=True)
        fsync_dir(records_dir)
    return d


def publish_parts(records_dir: Path, specs: list[PartSpec], *, skip: Callable[[Path], bool] | None = None,
                  parallel: bool = False, log: bool = True) -> list[Path | None]:
    """Publish ``specs`` durably and all-or-nothing; returns the published path of each spec
    (None for one that ``skip(final path)`` said is already there).

    Phase 1 encodes each table and writes it to a temp file in its partition directory,
    fsync'ed (in parallel threads when ``parallel``); phase 2 renames every temp file into
    place and fsyncs the directories.  A failure in phase 1 (ENOSPC, EIO, ...) removes every
    temp file and raises: nothing is published.  A failure in phase 2 removes the files this
    call renamed and the temp files left, then raises (a concurrent compaction that merged
    one of them in that instant keeps its rows: the one window where a failed commit is not
    all-or-nothing).  A partition directory made for the commit stays (empty: readers see no
    rows in it).  ``log``: phase 3 adds the published files to the Delta log as one version
    (``tunedb.index.parquet.deltalog``); when that fails they are un-published like a failed
    rename.  A rewrite passes False and logs its output with its inputs' removal itself.
    Thread-safe: touches no shared state."""
    temps: list[Path] = []
    out: list[Path | None] = [None] * len(specs)
    staged: list[tuple[int, Path, Path]] = []  # (spec index, temp, final)

    def stage(i: int) -> None:
        s = specs[i]
        d = _partition_dir(records_dir, s.slug)
        final = d / (s.name or new_part_name(s.prefix))
        if skip is not None and skip(final):
            return
        data = memoryview(encode(s.table, s.meta, s.prefix == "cpart"))
        for attempt in range(3):
            try:
                tmp = stage_bytes(d, data)
                break
            except FileNotFoundError:  # a compaction removed the emptied directory meanwhile
                if attempt == 2:
                    raise
                d = _partition_dir(records_dir, s.slug)
        temps.append(tmp)
        staged.append((i, tmp, final))

    try:
        if parallel and len(specs) > 1:
            with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as ex:
                futures = [ex.submit(stage, i) for i in range(len(specs))]
            for f in futures:  # every thread has finished: every temp file is in ``temps``
                f.result()
        else:
            for i in range(len(specs)):
                stage(i)
    except BaseException:
        for tmp in temps:
            unlink_quietly(tmp)
        raise
    renamed: list[Path] = []
    try:
        for i, tmp, final in staged:
            os.rename(tmp, final)
            renamed.append(final)
            out[i] = final
        for d in sorted({final.parent for _, _, final in staged}):
            fsync_dir(d)
        if log and renamed:
            deltalog.commit(records_dir, renamed)
    except BaseException:
        for final in renamed:
            unlink_quietly(final)
        for tmp in temps:
            unlink_quietly(tmp)
        raise
    return out


def write_part(records_dir: Path, slug: str, table: pa.Table, meta: dict[bytes, bytes], prefix: str,
               log: bool = True) -> Path:
    """Write ``table`` durably as a new file of partition ``slug`` (write-then-rename with
    fsync of file and directory; nothing is published when it raises); ``prefix`` is "part"
    (a commit) or "cpart" (compacted); ``log`` as in ``publish_parts``.  Returns the published
    path.  Thread-safe."""
    path = publish_parts(records_dir, [PartSpec(slug, table, meta, prefix)], log=log)[0]
    assert path is not None
    return path


def target_specs(table: pa.Table, tkeys: list[str], codes: np.ndarray, target_meta: dict[str, tuple[str, str]],
                 committed_us: int) -> list[tuple[str, PartSpec]]:
    """(target_key, its commit file) of ``table`` (batch layout) per target: row ``i`` belongs
    to target ``tkeys[codes[i]]``, ``target_meta`` maps a target_key to (name, canonical JSON)."""
    order = np.argsort(codes, kind="stable") if len(tkeys) > 1 else None
    bounds = np.searchsorted(codes[order], np.arange(len(tkeys) + 1)) if order is not None else [0, len(codes)]
    out = []
    for g, tkey in enumerate(tkeys):
        group = table if order is None else table.take(pa.array(order[bounds[g]:bounds[g + 1]]))
        name, tj = target_meta[tkey]
        slug = target_slug(name, tkey)
        out.append((tkey, PartSpec(slug, stamp(group, slug, committed_us), target_file_meta(tkey, name, tj))))
    return out


def write_targets(records_dir: Path, table: pa.Table, tkeys: list[str], codes: np.ndarray,
                  target_meta: dict[str, tuple[str, str]], committed_us: int) -> list[tuple[str, Path, pa.Table]]:
    """Publish ``table`` (batch layout) as one commit file per target, all-or-nothing (see
    ``publish_parts``; ``target_specs`` for the arguments).  Returns (target_key, published
    path, stamped table) per target, in ``tkeys`` order."""
    specs = target_specs(table, tkeys, codes, target_meta, committed_us)
    # targets are encoded in parallel (Arrow's take and Parquet encoding release the GIL)
    paths = publish_parts(records_dir, [s for _, s in specs], parallel=table.num_rows >= 20_000)
    return [(tkey, path, s.table) for (tkey, s), path in zip(specs, paths)]


def partition_dirs(records_dir: Path) -> list[Path]:
    """Every partition directory, sorted."""
    out = []
    with os.scandir(records_dir) as it:
        for e in it:
            if e.name.startswith(PARTITION_PREFIX):
                if e.is_symlink():
                    check_no_links(records_dir, Path(e.path))
                if e.is_dir(follow_symlinks=False):
                    out.append(Path(e.path))
    return sorted(out)


def scan_partitions(records_dir: Path) -> tuple[dict[str, list[Path]], list[Path]]:
    """Published part files per partition dir (sorted), and leftover temp files.  A partition
    removed while listing (a rewrite emptied it) is skipped.  A partition directory or part file
    that is a symbolic link is refused (``OutsideRootError``, one line naming it): following it
    would read, rewrite or delete another folder's files."""
    parts: dict[str, list[Path]] = {}
    temps: list[Path] = []
    with os.scandir(records_dir) as it:
        entries = [e for e in it if e.name.startswith(PARTITION_PREFIX)]
    dirs = []
    for e in entries:
        if e.is_symlink():
            check_no_links(records_dir, Path(e.path))
        if e.is_dir(follow_symlinks=False):
            dirs.append(e.path)
    for d in dirs:
        files = []
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.name.startswith("_tmp-"):
                        if not e.is_symlink():
                            temps.append(Path(e.path))
                    elif PART_RE.match(e.name):
                        if e.is_symlink():
                            check_no_links(records_dir, Path(e.path))
                        files.append(Path(e.path))
        except FileNotFoundError:
            continue
        parts[d] = sorted(files)
    return parts, temps


def live_files(records_dir: Path) -> tuple[list[Path], list[Path]]:
    """(live files, superseded files) of every partition: published part files split by whether
    a compacted file of their partition lists them as superseded."""
    live: list[Path] = []
    sup_out: list[Path] = []
    files_by_dir, _ = scan_partitions(records_dir)
    for d, files in files_by_dir.items():
        names = [f.name for f in files]
        sup = superseded_by(Path(d), names)
        for f in files:
            (sup_out if f.name in sup else live).append(f)
    return live, sup_out


def count_parts(d: Path) -> int | None:
    """How many published files partition ``d`` holds (None when it is gone)."""
    try:
        return sum(1 for n in os.listdir(d) if PART_RE.match(n))
    except FileNotFoundError:
        return None


def meta_supersedes(md: dict[bytes, bytes] | None) -> list[str]:
    """The file names a part file's Parquet metadata ``md`` says it supersedes ([] for none)."""
    return json.loads(md[META_SUPERSEDES].decode()) if md and META_SUPERSEDES in md else []


def meta_target(md: dict[bytes, bytes] | None) -> tuple[str, tuple[str, str] | None]:
    """(target_key, (target_name, target JSON) or None) that a part file's metadata ``md`` names."""
    md = md or {}
    tkey = md.get(META_TARGET_KEY, b"").decode()
    return tkey, ((md.get(META_TARGET_NAME, b"").decode(), md[META_TARGET].decode()) if META_TARGET in md else None)


def superseded_by(d: Path, names: list[str]) -> set[str]:
    """Names that the compacted files among ``names`` (of partition ``d``) list as superseded."""
    sup: set[str] = set()
    for n in names:
        if n.startswith("cpart-"):
            sup.update(meta_supersedes(pq.read_schema(d / n).metadata))
    return sup


class Rewrite(NamedTuple):
    """A partition rewrite published but not finished: its output (None: no rows kept) and the
    input files it supersedes."""

    output: Path | None
    inputs: list[Path]


def finish_rewrites(records_dir: Path, rewrites: list[Rewrite], operation: str) -> None:
    """Finish ``rewrites``: ONE Delta log version adds every output and removes every input,
    then the inputs are deleted (and emptied partition directories).  When logging fails the
    outputs are deleted (tunedb's view goes back to the inputs too) and the error raised --
    also ``deltalog.LogConflictError`` when an outside Delta writer removed an input from the
    log meanwhile (its rows may be elsewhere now: the rewrite is undone, nothing deleted)."""
    if not rewrites:
        return
    try:
        deltalog.commit(records_dir, [r.output for r in rewrites if r.output is not None],
                        [f for r in rewrites for f in r.inputs], operation=operation, inputs_must_be_ours=True)
    except BaseException:
        abandon_rewrites(rewrites)
        raise
    # the very next step: delete the superseded inputs (a crash before the last unlink leaves
    # files that the next opener deletes, see the module docstring of ``tunedb.index.parquet.store``)
    dirs = sorted({f.parent for r in rewrites for f in r.inputs})
    for r in rewrites:
        for f in r.inputs:
            check_no_links(records_dir, f)
            unlink_quietly(f)
    for d in dirs:
        try:
            fsync_dir(d)
            if not any(PART_RE.match(n) for n in os.listdir(d)):
                os.rmdir(d)
        except OSError:
            pass


def abandon_rewrites(rewrites: list[Rewrite]) -> None:
    """Undo published, unfinished ``rewrites``: delete their outputs (inputs stay live)."""
    for r in rewrites:
        if r.output is not None:
            unlink_quietly(r.output)


def rewrite_partition(records_dir: Path, d: Path, keep: Callable[[pa.Table], np.ndarray] | None, *,
                      min_files: int = 2, small_only: bool = False, small_bytes: int = 1 << 20,
                      written: Callable[[Path], None] | None = None,
                      transform: Callable[[pa.Table], pa.Table] | None = None,
                      skip_if: Callable[[Path, list[str]], bool] | None = None,
                      operation: str = "OPTIMIZE", deferred: list[Rewrite] | None = None) -> dict | None:
    """Rewrite partition ``d`` into one compacted file, keeping rows where ``keep(table)`` is
    true (all rows when None), de-duplicated by record_id.  The caller holds the DB lock
    (exclusive): only files listed here are merged, so concurrent appends are never touched.

    ``small_only``: merge only files smaller than ``small_bytes`` (tiered automatic
    compaction: big compacted files are not rewritten again and again).  ``written(path)`` is
    called once the compacted file is published and the old files are deleted.
    Files of any schema this tunedb reads are merged into the current ``RECORD_SCHEMA``
    (``tunedb.index.model.schema.conform``: a schema-1 file's missing host/origin become ``""``);
    ``transform(table)`` (the merged, de-duplicated table) may then rewrite column values
    (``tunedb upgrade`` recovers origins that way).  ``skip_if(d, live names)`` true: nothing to do
    in this partition (after the superseded leftovers are deleted).
    Returns this partition's counts (partitions, files_before, files_after, rows_before,
    rows_after), or None when there was nothing to rewrite.  ``deferred``: the output is
    published but not logged, and the inputs stay; the ``Rewrite`` is appended to the list for
    ``finish_rewrites`` to log with the others in one version (a ``forget`` over many
    partitions is then one change for Delta readers) -- or ``abandon_rewrites`` to undo.

    Crash safety: the compacted file (listing what it supersedes) is published, then one Delta
    log version (``operation``) adds it and removes the old files, and only then are they
    deleted; a crash in between leaves both: tunedb's readers ignore the superseded ones, Delta
    readers read the version they find (old files or new, never both), and every opener logs
    what the log lacks and then deletes them.  On a failure
    while writing (ENOSPC) nothing is published or deleted and the error is raised."""
    check_no_links(records_dir, d)  # (a link planted since the listing: never rewrite through it)
    try:
        names = sorted(n for n in os.listdir(d) if PART_RE.match(n))
    except FileNotFoundError:
        return None
    for n in names:
        check_no_links(records_dir, d / n)
    # drop files already superseded by a compacted file (crash leftovers): out of the Delta log
    # first (with the compacted file that supersedes them, should the log lack it), then from disk
    # -- except files an outside Delta writer removed from the log: those stay on disk (theirs to
    # restore or vacuum), and the output names them as superseded too, so they never come back
    sup = superseded_by(d, names)
    kept: list[str] = []
    if sup & set(names):
        deltalog.commit(records_dir, [d / n for n in names if n not in sup], [d / n for n in sup & set(names)],
                        operation="RECONCILE")
        st = deltalog.read_state(records_dir)
        kept = sorted(n for n in sup & set(names) if st.foreign_removed(deltalog.relative(records_dir, d / n)))
    for n in sup & set(names):
        if n in kept:
            continue
        try:
            os.unlink(d / n)
        except FileNotFoundError:
            pass
    names = [n for n in names if n not in sup]
    if skip_if is not None and skip_if(d, names):
        return None
    if small_only:
        names = [n for n in names if (d / n).stat().st_size < small_bytes]
    if not names or (keep is None and len(names) < min_files
                     and not (len(names) == 1 and names[0].startswith("part-") and not small_only)):
        return None  # (``compact`` still rewrites a lone commit file: dictionaries, zstd)
    tables = [pq.ParquetFile(d / n).read(use_threads=False) for n in names]
    md = tables[0].schema.metadata or {}
    table = pa.concat_tables([conform(t).replace_schema_metadata(None) for t in tables])
    rows_before = table.num_rows
    table = first_by_record_id(table)
    if transform is not None:
        table = transform(table)
    if keep is not None:
        mask = keep(table)
        table = table.filter(pa.array(mask))
    stats = {"partitions": 1, "files_before": len(names), "files_after": 0, "rows_before": rows_before,
             "rows_after": table.num_rows}
    if table.num_rows or kept:  # (no rows: a file of none still has to supersede the kept files)
        order = np.lexsort((table.column("cost").to_numpy(zero_copy_only=False),
                            table.column("entry_key").to_numpy()))
        table = table.take(pa.array(order))
        meta = {k: v for k, v in md.items() if k in (META_TARGET_KEY, META_TARGET, META_TARGET_NAME)}
        meta[META_SUPERSEDES] = json.dumps(sorted({*names, *kept})).encode()
        path = write_part(records_dir, d.name.split("=", 1)[1], table, meta, "cpart", log=False)
        stats["files_after"] = 1
    else:
        path = None
    rewrite = Rewrite(path, [d / n for n in names])
    if deferred is not None:
        deferred.append(rewrite)
    else:
        finish_rewrites(records_dir, [rewrite], operation)
    if path is not None and written is not None:
        written(path)
    return stats
