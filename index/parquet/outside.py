"""Outside Delta writers: adopting what they changed in ``records/_delta_log`` into tunedb's files.

``records/`` is a Delta table, so any Delta writer with write access to the folder may change it:
``optimize.compact``, ``delete(predicate)``, an append, ``restore``, ``vacuum``, or a hand-written
log version.  tunedb reads its own files (``target_slug=<slug>/[c]part-*.parquet``, see
``tunedb.index.parquet.parts``), not the log; this module makes its view follow such changes, so
that tunedb and Delta readers count the same rows -- and it never deletes a file to do so.

An outside version can do three things tunedb's files do not show (``pending`` finds them):

* add a file tunedb does not list (a path not laid out as tunedb's: an append, the output of an
  outside compaction or delete) -- its rows are live for Delta;
* remove a file tunedb holds live (a compaction's or delete's inputs, a hand-written remove) --
  its rows are gone for Delta (until a ``restore``);
* list again a file tunedb holds superseded (a ``restore``).

``adopt`` (under the DB lock, exclusive) writes, per target those touch, one compacted file
(``cpart-``) holding exactly the rows Delta now has and tunedb does not -- the outside files'
rows of that target and those of re-listed files -- that supersedes (``tunedb.supersedes``) the
files the outside writer removed, and then ONE log version (``ADOPT``) adds those files and
removes the outside paths whose rows they hold (their Parquet metadata key ``tunedb.adopts``
names them).  A target whose files were all removed gets a compacted file of no rows that
supersedes them.  Afterwards both views hold the same rows; Delta readers see the same rows
before and after the ``ADOPT`` version.

Nothing is deleted: the files an outside version removed stay on disk, superseded for tunedb
(their removal is the outside writer's to undo, with ``restore``, or to make final, with its
``vacuum``), and the outside files whose rows were copied stay on disk too, removed from the log.
tunedb's own clean-up deletes only files a tunedb version removed
(``deltalog.LogState.foreign_removed``).  A compacted file that is merged again carries the
names of such kept files on (``parts.rewrite_partition``), so they never come back to life.

Crash safety: the new files are published (durable) before the log version; a crash in between
leaves files the log does not list whose ``tunedb.adopts`` say what they hold: the next ``adopt``
logs them instead of copying the rows again.

Outside rows must have tunedb's ``RECORD_SCHEMA`` (any column order; missing columns are filled
as for an old schema): ``record_id``, ``target_key``, ``target_name``, ``target``, ``lookup_key``,
``entry_key`` and ``status`` non-null.  ``rid_hash`` and ``target_slug`` are recomputed, a null
``committed`` becomes the adoption time.  A file that breaks this is refused: ValueError (one
line naming the file and the column) and nothing changes; so is a row that a commit would refuse
(``RecordBatch.check``: a malformed record_id or status, a bad cost, text UTF-8 cannot encode,
JSON nested too deep...), which would otherwise make every later read fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.contract.tables import first_by_record_id
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import rid_hashes
from tunedb.index.model.record import target_slug
from tunedb.index.model.schema import RECORD_SCHEMA, conform
from tunedb.index.parquet import deltalog, parts
from tunedb.index.support.fsutil import check_no_links, unlink_quietly

#: Parquet metadata key of an adopting file: the log paths whose rows it holds (JSON list)
META_ADOPTS = b"tunedb.adopts"
#: columns an outside row must have (non-null)
REQUIRED = ("record_id", "target_key", "target_name", "target", "lookup_key", "entry_key", "status")


def pending(records_dir: Path, st: deltalog.LogState, live: Iterable[str], superseded: Iterable[str]) -> bool:
    """Whether the log ``st`` holds outside changes that tunedb's view (its ``live`` and
    ``superseded`` files, absolute paths) lacks -- then ``adopt`` has work.  Cheap: set look-ups."""
    if any(not deltalog.is_own_path(p) for p in st.live):
        return True
    if st.removed and any(st.foreign_removed(deltalog.relative(records_dir, f)) for f in live):
        return True
    for f in superseded:
        rel = deltalog.relative(records_dir, f)
        if rel in st.live and rel in st.removed:
            return True
    return False


def _footer(path: Path) -> tuple[list[str], list[str]]:
    """(names it supersedes, log paths it adopts) of compacted file ``path``."""
    md = pq.read_schema(path).metadata or {}
    return parts.meta_supersedes(md), (json.loads(md[META_ADOPTS].decode()) if META_ADOPTS in md else [])


def outside_rows(path: Path, rel: str) -> pa.Table:
    """The rows of outside file ``path`` (log path ``rel``) in ``RECORD_SCHEMA``, checked and
    completed (see module docstring); ValueError, one line, when they cannot be tunedb's."""
    try:
        t = pq.read_table(path).replace_schema_metadata(None)
        # (other writers store other types: string_view, large_string, timestamps in ns, ...)
        t = conform(t.select([c for c in t.column_names if c in RECORD_SCHEMA.names]))
        t = t.cast(RECORD_SCHEMA)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ValueError(f"{path}: an outside Delta writer added this file, and tunedb cannot read it as "
                         f"records ({str(e).splitlines()[0] if str(e) else type(e).__name__}); remove it from "
                         f"the log with a Delta tool (e.g. DeltaTable.restore) to open the DB") from None
    for c in REQUIRED:
        if t.column(c).null_count:
            raise ValueError(f"{path}: an outside Delta writer added rows with no {c} (tunedb's RECORD_SCHEMA "
                             f"needs one); remove {rel} from the table with a Delta tool (e.g. DeltaTable.restore "
                             f"to the version before) to open the DB writable")
    n = t.num_rows
    if not n:
        return t
    try:  # what every backend's commit checks (record_id, status, costs, text UTF-8 can encode...)
        RecordBatch.from_table(t).check()
    except ValueError as e:
        raise ValueError(f"{path}: an outside Delta writer added rows tunedb cannot store ({e}); remove {rel} "
                         f"from the table with a Delta tool (e.g. DeltaTable.restore to the version before) to "
                         f"open the DB writable") from None
    rh = rid_hashes(t.column("record_id").to_pylist())
    t = t.set_column(t.schema.get_field_index("rid_hash"), RECORD_SCHEMA.field("rid_hash"), pa.array(rh, pa.int64()))
    slugs = [target_slug(a, b) for a, b in zip(t.column("target_name").to_pylist(), t.column("target_key").to_pylist())]
    t = t.set_column(t.schema.get_field_index("target_slug"), RECORD_SCHEMA.field("target_slug"),
                     pa.array(slugs, pa.string()))
    committed = t.column("committed")
    if committed.null_count:
        now = pa.scalar(parts.now_us(), parts.TS_TYPE)
        t = t.set_column(t.schema.get_field_index("committed"), RECORD_SCHEMA.field("committed"),
                         pc.fill_null(committed, now))
    return t


def _sorted(t: pa.Table) -> pa.Table:
    t = first_by_record_id(t)
    if t.num_rows:
        order = np.lexsort((t.column("cost").to_numpy(zero_copy_only=False), t.column("entry_key").to_numpy()))
        t = t.take(pa.array(order))
    return t


def adopt(records_dir: Path) -> int | None:
    """Make tunedb's files hold what the log's latest version holds (see module docstring): one
    compacted file per touched target, then one ``ADOPT`` log version.  The caller holds the DB
    lock exclusively.  Returns the new log version, or None when there was nothing to adopt.
    ValueError (one line, nothing changed) for an outside file tunedb cannot read as records;
    OSError when it cannot write (then the files it published are deleted again: nothing changed);
    ``deltalog.CorruptLogError`` when the log cannot be read (``deltalog.repair`` first)."""
    st = deltalog.read_state(records_dir)
    foreign = sorted(p for p in st.live if not deltalog.is_own_path(p))
    # the partitions to look at: every one when the log lists outside files (a killed adopt may
    # have left a file of theirs anywhere), else those holding a file an outside version removed
    # or listed again (one listing; no file is read in the common case: none)
    files_by_dir, _ = parts.scan_partitions(records_dir)
    if not foreign:
        suspects = set()
        if st.removed:
            for d, files in files_by_dir.items():
                for f in files:
                    rel = deltalog.relative(records_dir, f)
                    if rel in st.removed and (rel in st.live or st.foreign_removed(rel)):
                        suspects.add(d)
                        break
        if not suspects:
            return None
        files_by_dir = {d: f for d, f in files_by_dir.items() if d in suspects}
    absorbed: set[str] = set()       # log paths whose rows an unlogged adopting file holds already
    unlogged: list[Path] = []        # adopting files a killed adopt published but did not log
    removed_by_dir: dict[str, list[str]] = {}   # slug -> names of live files an outside version removed
    readded_by_dir: dict[str, list[str]] = {}   # slug -> names of superseded files the log lists again
    for d, files in files_by_dir.items():
        dpath = Path(d)
        names = [f.name for f in files]
        sup: set[str] = set()
        for n in names:
            if n.startswith("cpart-"):
                s, ad = _footer(dpath / n)
                sup.update(s)
                rel = deltalog.relative(records_dir, dpath / n)
                if ad and rel not in st.live and rel not in st.removed:
                    unlogged.append(dpath / n)
                    absorbed.update(ad)
        slug = dpath.name.split("=", 1)[1]
        for n in names:
            rel = deltalog.relative(records_dir, dpath / n)
            if n not in sup and st.foreign_removed(rel):
                removed_by_dir.setdefault(slug, []).append(n)
            elif n in sup and rel in st.live and rel in st.removed:
                readded_by_dir.setdefault(slug, []).append(n)
    # the rows to bring in, per target partition (slug): outside files' rows, re-listed files' rows
    rows: dict[str, list[pa.Table]] = {}
    adopts: dict[str, list[str]] = {}
    meta: dict[str, dict[bytes, bytes]] = {}
    for rel in foreign:
        path = records_dir / rel
        check_no_links(records_dir, path)  # (the log's paths are checked when read; links here)
        if rel in absorbed or not path.exists():
            continue  # (held by an unlogged adopting file; or gone: only dropped from the log)
        t = outside_rows(path, rel)
        for tkey, group in parts.split_by_target(t):
            slug = group.column("target_slug")[0].as_py()
            rows.setdefault(slug, []).append(group)
            adopts.setdefault(slug, []).append(rel)
            meta.setdefault(slug, parts.target_file_meta(tkey, group.column("target_name")[0].as_py(),
                                                         group.column("target")[0].as_py()))
    for slug, names in readded_by_dir.items():
        d = records_dir / f"{parts.PARTITION_PREFIX}{slug}"
        for n in names:
            rel = deltalog.relative(records_dir, d / n)
            if rel in absorbed:
                continue
            pf = pq.ParquetFile(d / n)
            rows.setdefault(slug, []).append(conform(pf.read().replace_schema_metadata(None)).cast(RECORD_SCHEMA))
            adopts.setdefault(slug, []).append(rel)
            tkey, target = parts.meta_target(pf.schema_arrow.metadata)
            if target is not None:
                meta.setdefault(slug, parts.target_file_meta(tkey, *target))
    specs: list[parts.PartSpec] = []
    for slug in sorted(set(rows) | set(removed_by_dir) | set(readded_by_dir)):
        sup_names = sorted({*removed_by_dir.get(slug, []), *readded_by_dir.get(slug, [])})
        tables = rows.get(slug, [])
        table = _sorted(pa.concat_tables(tables)) if tables else pa.Table.from_batches([], schema=RECORD_SCHEMA)
        md = dict(meta.get(slug) or _target_meta_of(records_dir / f"{parts.PARTITION_PREFIX}{slug}", sup_names))
        md[parts.META_SUPERSEDES] = json.dumps(sup_names).encode()
        md[META_ADOPTS] = json.dumps(sorted(adopts.get(slug, []))).encode()
        specs.append(parts.PartSpec(slug, table, md, "cpart"))
    drop = [*foreign, *(deltalog.relative(records_dir, records_dir / f"{parts.PARTITION_PREFIX}{s}" / n)
                        for s, ns in readded_by_dir.items() for n in ns), *absorbed]
    if not specs and not unlogged and not drop:
        return None
    published = [p for p in parts.publish_parts(records_dir, specs, log=False) if p is not None]
    try:
        return deltalog.commit(records_dir, [*published, *unlogged], drop, operation="ADOPT")
    except BaseException:
        for p in published:
            unlink_quietly(p)
        raise


def _target_meta_of(d: Path, names: list[str]) -> dict[bytes, bytes]:
    """The target metadata of partition ``d``, from the first of its files ``names`` that has it."""
    for n in names:
        try:
            tkey, target = parts.meta_target(pq.read_schema(d / n).metadata)
        except OSError:
            continue
        if target is not None:
            return parts.target_file_meta(tkey, *target)
    return {}


def read_only_note(records_dir: Path, live: Iterable[str], superseded: Iterable[str]) -> str | None:
    """One line for a read-only handle when the log holds outside changes it does not show (it
    reads tunedb's files as they are), or None.  A log that cannot be read is named too."""
    try:
        st = deltalog.read_state(records_dir)
    except deltalog.CorruptLogError as e:
        return f"{e}; this read-only handle reads the data files directly"
    except OSError:
        return None
    if pending(records_dir, st, live, superseded):
        return (f"{records_dir} has changes by an outside Delta writer that tunedb has not adopted yet; this "
                f"read-only handle shows tunedb's files without them: open the DB writable once to adopt them")
    return None


__all__ = ["META_ADOPTS", "adopt", "outside_rows", "pending", "read_only_note"]
