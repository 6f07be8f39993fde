"""Whole-table views of records: de-duplication, the stale filter and the per-entry summary.

Functions of ``RECORD_SCHEMA`` tables (as ``ParquetStore.records`` and the partition rewrites
read them), returning new tables.  Costs are seconds; ``invalidated`` times and the
``committed`` column compare as integer microseconds since the epoch (UTC).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ENTRY_COLUMNS = ["target_key", "target_name", "target", "workload_key", "family", "workload"]
#: what ``tunedb.index.model.estimate.estimate_table`` reads of each record, per config
ESTIMATE_COLUMNS = ["lookup_key", "status", "costs", "meta"]


def first_by_record_id(t: pa.Table) -> pa.Table:
    """``t`` without repeated record_ids (by ``rid_hash``; the first occurrence stays, order kept)."""
    rid = t.column("rid_hash").to_numpy()
    _, first = np.unique(rid, return_index=True)
    if len(first) != len(rid):
        t = t.take(pa.array(np.sort(first)))
    return t


def rows_with_ids(t: pa.Table, ids, *, keep: bool = True) -> pa.Table:
    """The rows of ``t`` whose record_id is in ``ids`` (``keep=False``: the rows whose id is not),
    order kept."""
    if not t.num_rows or (not keep and not ids):
        return t
    m = pc.is_in(t.column("record_id"), value_set=pa.array(sorted(ids), pa.string()))
    return t.filter(m if keep else pc.invert(m))


def drop_stale(t: pa.Table, invalidated: Mapping[str, int]) -> pa.Table:
    """Rows of ``t`` committed after their target's invalidation (all rows of targets never
    invalidated)."""
    if not invalidated or not t.num_rows:
        return t
    # the invalidation time looked up once per distinct target_key, not once per row
    enc = pc.dictionary_encode(t.column("target_key")).combine_chunks()
    per_key = pa.array([invalidated.get(k, -1) for k in enc.dictionary.to_pylist()], pa.int64())
    inv = pc.fill_null(pc.take(per_key, enc.indices), -1)  # (no target_key: never invalidated)
    return t.filter(pc.greater(t.column("committed").cast(pa.int64()), inv))


def entries(t: pa.Table) -> pa.Table:
    """One row per (target_key, workload_key) of ``t``: target_key, target_name, target,
    workload_key, family, workload, records, ok_records, best_cost (seconds: the lowest
    estimated cost of the entry's configs, the lowest confirmed one when there is one: the cost
    of the config ``best`` lists first, ``tunedb.index.model.estimate.rank_key``; null when none is ok),
    sorted by (target_name, workload_key).  ``t`` needs :data:`ENTRY_COLUMNS` and
    :data:`ESTIMATE_COLUMNS`."""
    from tunedb.index.model.estimate import estimate_table

    cols = ENTRY_COLUMNS
    if t.num_rows == 0:
        return pa.table({c: pa.array([], pa.string()) for c in cols} |
                        {"records": pa.array([], pa.int64()), "ok_records": pa.array([], pa.int64()),
                         "best_cost": pa.array([], pa.float64())})
    ok = pc.equal(t.column("status"), "ok")
    t2 = t.select(cols).append_column("ok", pc.cast(ok, pa.int64()))
    g = t2.group_by(["target_key", "workload_key"], use_threads=False).aggregate([
        ("target_name", "first"), ("target", "first"), ("family", "first"), ("workload", "first"),
        ("ok", "count"), ("ok", "sum")])
    g = g.rename_columns([{"target_name_first": "target_name", "target_first": "target",
                          "family_first": "family", "workload_first": "workload", "ok_count": "records",
                          "ok_sum": "ok_records"}
                          .get(c, c) for c in g.column_names])
    # per config the estimate, per entry the lowest of them
    est = estimate_table(t.select(["target_key", "workload_key", "lookup_key", "status", "costs", "meta"]),
                         by=("lookup_key",))
    if est.num_rows:
        keys = t.select(["lookup_key", "target_key", "workload_key"])
        lk = keys.column("lookup_key").to_numpy()
        _, first = np.unique(lk, return_index=True)
        kt = keys.take(pa.array(first))
        est = est.join(kt, "lookup_key")
        # the entry's first config in ranking order (tunedb.index.model.estimate.rank_key: confirmed
        # estimates first): the lowest confirmed value, else the lowest value
        confirmed = pc.equal(est.column("basis"), "confirmed")
        est = est.append_column("value_confirmed", pc.if_else(confirmed, est.column("value"), None))
        best = est.group_by(["target_key", "workload_key"], use_threads=False).aggregate(
            [("value_confirmed", "min"), ("value", "min")])
        best = pa.table({"target_key": best.column("target_key"), "workload_key": best.column("workload_key"),
                         "best_cost": pc.coalesce(best.column("value_confirmed_min"), best.column("value_min"))})
        g = g.join(best, ["target_key", "workload_key"], join_type="left outer")
    else:
        g = g.append_column("best_cost", pa.nulls(g.num_rows, pa.float64()))
    return g.select(cols + ["records", "ok_records", "best_cost"]).sort_by(
        [("target_name", "ascending"), ("workload_key", "ascending")])
