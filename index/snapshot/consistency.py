"""A snapshot checked against itself: what a reader verifies of each file it fetched beyond its
hash (a hostile publisher hashes whatever it writes, so a part whose bytes match the part
list can still contradict it).  Each check looks only at what was fetched -- reads stay lazy --
and a breach is one :class:`~tunedb.index.snapshot.format.SnapshotContentError` line (a
``ValueError`` too) naming the file, so nothing wrong is ever answered:

* a part (``data/``): its row count (Parquet footer) is the part list's ``rows``; its workload
  keys span exactly ``first_workload..last_workload`` (the data when read whole, the footer's
  statistics when read for one workload); every row read is of the part's target
  (``target_key``, and the key of its ``target`` JSON); each workload and config key is the key
  of its JSON text and ``lookup_key``/``entry_key``/``rid_hash`` the hashes of those keys; every
  ``status`` is one of ``STATUSES``; ``stale`` is never null; no ``record_id`` twice; no JSON
  column nested deeper than ``MAX_JSON_DEPTH``;
* a target read whole: its stale rows are the manifest's ``stale_records`` (its rows are its
  ``records`` already: the part list's rows sum to them, ``format.check_target_file``);
* the entries files: each file's rows, its target range, targets of the manifest, no
  (target, workload) twice, and in all the manifest's ``entries`` and ``workloads``;
* the verdicts file: record ids mapped to ``verified`` or ``refuted``.

The manifest's own totals and the part lists against the manifest are checked in
:mod:`tunedb.index.snapshot.format` (``check_manifest``, ``check_target_file``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.model.keys import MAX_JSON_DEPTH, hash64, key_of_text, rid_hash
from tunedb.index.model.record import STATUSES
from tunedb.index.snapshot.format import STALE, SnapshotContentError, load_json

#: the JSON columns of a part (each nested at most MAX_JSON_DEPTH levels)
JSON_COLUMNS = ("target", "workload", "config", "meta")
#: what a verdicts file may say of a record
VERDICTS = ("verified", "refuted")


def _refuse(where: str, what: str) -> SnapshotContentError:
    return SnapshotContentError(f"{where}: {what}: refused (the snapshot contradicts itself)")


def check_part_footer(meta: Any, part: dict, where: str, whole: bool) -> None:
    """A part's Parquet footer (``pyarrow.parquet.FileMetaData``) against its part-list entry
    ``part``: the row count, and -- when only some row groups are read (``whole`` False) -- the
    workload range of its ``workload_key`` statistics (which then decide the row groups read)."""
    if meta.num_rows != part["rows"]:
        raise _refuse(where, f"holds {meta.num_rows} rows, and its part list says {part['rows']}")
    if whole:
        return
    cols = [j for j in range(meta.num_columns) if meta.schema.column(j).path == "workload_key"]
    lo = hi = None
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(cols[0]).statistics if cols else None
        if st is None or not st.has_min_max:
            raise _refuse(where, "has no workload_key statistics (needed to read one workload of it)")
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    _check_range(lo, hi, part, where)


def _check_range(lo: Any, hi: Any, part: dict, where: str) -> None:
    if lo != part["first_workload"] or hi != part["last_workload"]:
        raise _refuse(where, f"holds workloads {lo}..{hi}, and its part list says "
                             f"{part['first_workload']}..{part['last_workload']}")


def check_part_rows(t: pa.Table, part: dict, tkey: str, where: str, whole: bool) -> None:
    """The rows ``t`` read from part ``part`` of target ``tkey`` (all of them when ``whole``,
    else one workload's): see the module docstring."""
    n = t.num_rows
    if whole:
        if n != part["rows"]:
            raise _refuse(where, f"holds {n} rows, and its part list says {part['rows']}")
        mm = pc.min_max(t.column("workload_key")).as_py() if n else {"min": None, "max": None}
        _check_range(mm["min"], mm["max"], part, where)
    if not n:
        return
    wk = t.column("workload_key")
    if pc.any(pc.or_(pc.less(wk, part["first_workload"]), pc.greater(wk, part["last_workload"]))).as_py():
        raise _refuse(where, "holds a workload outside the range its part list says")
    if not pc.all(pc.fill_null(pc.equal(t.column("target_key"), tkey), False)).as_py():
        raise _refuse(where, f"holds rows of another target than {tkey}")
    status = t.column("status")
    bad = pc.invert(pc.fill_null(pc.is_in(status, value_set=pa.array(STATUSES)), False))
    if pc.any(bad).as_py():
        shown = repr(status.filter(bad)[0].as_py())[:40]
        raise _refuse(where, f"holds status {shown}, not one of {', '.join(STATUSES)}")
    if t.column(STALE).null_count:
        raise _refuse(where, "holds rows without a stale flag")
    if pc.count_distinct(t.column("record_id")).as_py() != n or t.column("record_id").null_count:
        raise _refuse(where, "holds a record_id twice")
    _check_depth(t, where)
    _check_keys(t, tkey, where)


def _check_depth(t: pa.Table, where: str) -> None:
    """No JSON column nested deeper than MAX_JSON_DEPTH: only texts with more than that many
    ``[`` and ``{`` in all (an upper bound of their depth) are parsed."""
    for col in JSON_COLUMNS:
        if col not in t.column_names:
            continue
        c = t.column(col)
        opens = pc.add(pc.count_substring(c, "["), pc.count_substring(c, "{"))
        deep = pc.fill_null(pc.greater(opens, MAX_JSON_DEPTH), False)
        if not pc.any(deep).as_py():
            continue
        rows = t.filter(deep).select(["record_id", col]).to_pylist()
        for row in rows:
            load_json(row[col], where, f"{col} of record {str(row['record_id'])[:40]}")


def _distinct(t: pa.Table, cols: list[str]) -> list[dict]:
    return t.select(cols).group_by(cols, use_threads=False).aggregate([]).to_pylist()


def _check_keys(t: pa.Table, tkey: str, where: str) -> None:
    """Every key column is the key of its JSON text, every hash column the hash of its keys."""
    for key_col, text_col, what in (("target_key", "target", "target"), ("workload_key", "workload", "workload"),
                                    ("config_key", "config", "config")):
        if text_col not in t.column_names:
            continue
        for row in _distinct(t, [key_col, text_col]):
            text = row[text_col]
            if not isinstance(text, str) or key_of_text(text) != row[key_col]:
                raise _refuse(where, f"holds a {what} whose {key_col} is not the key of its JSON "
                                     f"({str(row[key_col])[:40]})")
    if "entry_key" in t.column_names:
        for row in _distinct(t, ["workload_key", "entry_key"]):
            if row["entry_key"] != hash64(tkey, row["workload_key"]):
                raise _refuse(where, "holds an entry_key that is not the hash of its keys")
    if "lookup_key" in t.column_names:
        for row in _distinct(t, ["workload_key", "config_key", "lookup_key"]):
            if row["lookup_key"] != hash64(tkey, row["workload_key"], row["config_key"]):
                raise _refuse(where, "holds a lookup_key that is not the hash of its keys")
    if "rid_hash" in t.column_names:
        for rid, h in zip(t.column("record_id").to_pylist(), t.column("rid_hash").to_pylist()):
            if len(rid) != 32 or h != rid_hash(rid):
                raise _refuse(where, f"holds a rid_hash that is not the hash of record_id {rid[:40]!r}")


def check_target_rows(t: pa.Table, target: dict, where: str) -> None:
    """A target's rows, read whole from all its parts, against its manifest entry ``target``:
    its ``stale_records`` (when the manifest says) and no record_id in two parts."""
    if "stale_records" in target:
        stale = int(pc.sum(t.column(STALE).cast(pa.int64())).as_py() or 0)
        if stale != target["stale_records"]:
            raise _refuse(where, f"hold {stale} stale records, and the manifest says {target['stale_records']}")
    if pc.count_distinct(t.column("record_id")).as_py() != t.num_rows:
        raise _refuse(where, "hold a record_id in two parts")


def check_entries_file(t: pa.Table, ref: dict, targets: dict, where: str) -> None:
    """One entries file against its manifest entry ``ref`` (``rows``, ``first_target``,
    ``last_target``) and the manifest's ``targets``."""
    if "rows" in ref and t.num_rows != ref["rows"]:
        raise _refuse(where, f"holds {t.num_rows} entries, and the manifest says {ref['rows']}")
    if "target_key" not in t.column_names or "workload_key" not in t.column_names:
        raise _refuse(where, "is not an entries file (no target_key or workload_key)")
    keys = set(t.column("target_key").to_pylist())
    if not keys <= set(targets):
        raise _refuse(where, "holds an entry of a target the manifest does not list")
    lo, hi = ref.get("first_target"), ref.get("last_target")
    if lo is not None and hi is not None and keys and (min(keys) != lo or max(keys) != hi):
        raise _refuse(where, f"holds targets {min(keys)}..{max(keys)}, and the manifest says {lo}..{hi}")


def check_entries_totals(t: pa.Table, man: dict, where: str) -> None:
    """The whole entries table against the manifest: ``entries``, ``workloads``, no
    (target, workload) twice."""
    n = t.num_rows
    if "entries" in man and n != man["entries"]:
        raise _refuse(where, f"hold {n} entries, and the manifest says {man['entries']}")
    if n and len(_distinct(t, ["target_key", "workload_key"])) != n:
        raise _refuse(where, "hold an entry (target, workload) twice")
    workloads = pc.count_distinct(t.column("workload_key")).as_py() if n else 0
    if "workloads" in man and workloads != man["workloads"]:
        raise _refuse(where, f"hold {workloads} workloads, and the manifest says {man['workloads']}")


def check_verdicts(doc: Any, where: str) -> dict[str, str]:
    """A verdicts file's JSON: record_id -> ``verified``/``refuted``; else one line."""
    if not isinstance(doc, dict) or not all(isinstance(k, str) and v in VERDICTS for k, v in doc.items()):
        raise _refuse(where, f"is not a verdicts file (record_id -> {' or '.join(VERDICTS)})")
    return doc


__all__ = ["JSON_COLUMNS", "VERDICTS", "check_part_footer", "check_part_rows", "check_target_rows",
           "check_entries_file", "check_entries_totals", "check_verdicts"]
