"""``tunedb upgrade``: bring a DB directory of an older schema to the current one, in place.

Schema 1 (tunedb 0.1.0) -> schema 2 (tunedb 0.2.0) adds the record columns ``host`` and
``origin`` (``docs/schema.md``).  ``upgrade(path)`` does, under the DB lock (exclusive: no
compaction or reader refresh interleaves; appends by tunedb 0.1.0 writers take no lock):

1. fold every journal whose writer is gone into Parquet part files
   (``journal_fold.fold_journal``, idempotent); a journal still held by a running writer stops
   the upgrade (``ValueError``) before anything else changes;
2. rewrite each partition that still holds a file without the new columns into one compacted
   file (``parts.rewrite_partition``, the mechanism compaction uses: the new file, listing the
   files it supersedes, is published durably before any old file is deleted).  ``host`` is
   ``""`` (unknown: schema 1 did not keep it); ``origin`` is recovered from what schema 1 kept
   in ``meta`` -- ``meta.origin.file`` (AutoTVM and MetaSchedule imports), else
   ``meta.replay_file`` (replayed measurements) -- and ``""`` where there is nothing.  The
   ``tunedb_version``/``schema_version`` columns of the rows keep the values they were written
   with (they say which tunedb created each record);
3. last, write the marker with the new schema version atomically (temp file, fsync, rename,
   directory fsync), ``written_by`` this tunedb.

Crash safety: a SIGKILL at any moment leaves a DB that opens and reads every record exactly
once.  Until step 3 the marker still says schema 1, so the DB stays read-only for this tunedb
and its reads see a mix of schema-1 and schema-2 files (both readable; superseded files are
ignored); running ``upgrade`` again finishes the job (folded journals are not folded twice,
partitions already rewritten are skipped after their superseded leftovers are deleted).
Upgrading a DB already at the current schema changes nothing.  Nothing read from a record is
executed or evaluated: ``meta`` is parsed as JSON only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.model.schema import RECORD_SCHEMA, SCHEMA2_COLUMNS
from tunedb.index.model.version import SCHEMA_VERSION, TUNEDB_VERSION
from tunedb.index.parquet import deltalog, journal_fold, layout, parts
from tunedb.index.parquet.journal import try_lock_abandoned
from tunedb.index.support.fsutil import file_lock


def recovered_origin(meta_json: str | None) -> str:
    """The origin a schema-1 record's ``meta`` (canonical JSON) names: ``meta.origin.file``, else
    ``meta.replay_file``, else ``""``."""
    if not meta_json or meta_json == "{}":
        return ""
    try:
        meta = json.loads(meta_json)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(meta, dict):
        return ""
    o = meta.get("origin")
    if isinstance(o, dict) and isinstance(o.get("file"), str) and o["file"]:
        return o["file"]
    rf = meta.get("replay_file")
    return rf if isinstance(rf, str) else ""


def fill_provenance(table: pa.Table) -> pa.Table:
    """``table`` (RECORD_SCHEMA) with ``origin`` recovered from ``meta`` where it is ``""`` and
    ``host`` ``""`` where it is null."""
    origin = pc.fill_null(table.column("origin"), "")
    meta = table.column("meta")
    cand = pc.and_(pc.equal(origin, ""),
                   pc.or_(pc.match_substring(pc.fill_null(meta, ""), '"origin"'),
                          pc.match_substring(pc.fill_null(meta, ""), '"replay_file"')))
    rows = [i for i, c in enumerate(cand.to_pylist()) if c]
    if rows:
        vals = origin.to_pylist()
        metas = meta.to_pylist()
        for i in rows:
            vals[i] = recovered_origin(metas[i])
        origin = pa.array(vals, pa.string())
    idx = table.schema.get_field_index
    table = table.set_column(idx("origin"), RECORD_SCHEMA.field("origin"), origin)
    return table.set_column(idx("host"), RECORD_SCHEMA.field("host"), pc.fill_null(table.column("host"), ""))


def _current_layout(d: Path, names: list[str]) -> bool:
    """Whether every file ``names`` of partition ``d`` has the current columns."""
    return all(set(SCHEMA2_COLUMNS) <= set(pq.read_schema(d / n).names) for n in names)


def _held_journals(journal_dir: Path) -> list[Path]:
    """Journals whose writer still runs (their lock cannot be taken)."""
    held = []
    for jp in journal_fold.list_journals(journal_dir):
        fd = try_lock_abandoned(jp)
        if fd is None:
            if jp.exists():
                held.append(jp)
        else:
            os.close(fd)
    return held


def upgrade(path: str | os.PathLike) -> dict:
    """Upgrade the DB at ``path`` in place to ``SCHEMA_VERSION`` (see module docstring).

    Returns ``{"path", "from_schema", "to_schema", "upgraded", "journals_folded",
    "partitions", "files_before", "files_after", "rows", "origins_recovered"}``; ``upgraded``
    is False (and nothing was changed) for a DB already at the current schema.
    FileNotFoundError when there is no DB at ``path``; ValueError (one line) for a directory
    that is not a tunedb DB, a DB of a newer schema, or a journal still held by a running
    writer; OSError when the medium fails (then rerun: what was done stays done)."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"no tunedb database at {p}")
    if not (p / layout.MARKER).is_file():
        raise ValueError(f"{p} is not a tunedb database (no {layout.MARKER})")
    info = layout.read_marker(p)
    old = int(info["schema_version"])
    out = {"path": str(p), "from_schema": old, "to_schema": SCHEMA_VERSION, "upgraded": False,
           "journals_folded": 0, "partitions": 0, "files_before": 0, "files_after": 0, "rows": 0,
           "origins_recovered": 0}
    if old >= SCHEMA_VERSION:
        return out
    records_dir, journal_dir = p / "records", p / "journal"
    records_dir.mkdir(exist_ok=True)
    recovered = [0]

    def transform(t: pa.Table) -> pa.Table:
        before = pc.sum(pc.not_equal(pc.fill_null(t.column("origin"), ""), "")).as_py() or 0
        t = fill_provenance(t)
        recovered[0] += (pc.sum(pc.not_equal(t.column("origin"), "")).as_py() or 0) - before
        return t

    with file_lock(p / layout.LOCK, shared=False):
        # 0. the Delta log of the files as they are (a DB of an older schema kept none), so that
        # readers outside tunedb see the whole DB at every step that follows
        live, superseded = parts.live_files(records_dir)
        deltalog.reconcile(records_dir, live, superseded)
        # 1. journals of writers that are gone become Parquet (idempotent folds)
        held = _held_journals(journal_dir)
        if held:
            raise ValueError(f"journal {held[0]} of {p} belongs to a running tunedb process; stop it and run "
                             f"`tunedb upgrade --db {p}` again")
        folded = []
        journal_fold.fold_abandoned(
            journal_dir, None,
            lambda jp: folded.append(journal_fold.fold_journal(jp, records_dir, recovering=True)), strict=True)
        out["journals_folded"] = len(folded)
        if _held_journals(journal_dir):  # a writer started meanwhile
            raise ValueError(f"a running tunedb process writes to {p}; stop it and run "
                             f"`tunedb upgrade --db {p}` again")
        # 2. every partition with an old-layout file: one compacted file of the new layout
        for d in parts.partition_dirs(records_dir):
            st = parts.rewrite_partition(records_dir, d, None, min_files=1, transform=transform,
                                         skip_if=_current_layout, operation="UPGRADE")
            if st is not None:
                out["partitions"] += 1
                out["files_before"] += st["files_before"]
                out["files_after"] += st["files_after"]
                out["rows"] += st["rows_after"]
        # 3. last: the marker (atomic)
        layout.write_marker(p, layout.marker_info(SCHEMA_VERSION, info.get("created_by") or "?"))
    out["upgraded"] = True
    out["origins_recovered"] = recovered[0]
    return out


__all__ = ["TUNEDB_VERSION", "fill_provenance", "recovered_origin", "upgrade"]
