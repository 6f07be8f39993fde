"""Which rows survive a partition rewrite: the ``keep`` predicates of ``dedup`` and ``forget``.

Each predicate takes one partition's rows (a ``RECORD_SCHEMA`` table, already
de-duplicated by record_id) and returns a boolean numpy mask, True for rows to keep; the
store hands it to ``tunedb.index.parquet.parts.rewrite_partition``.  Costs are seconds (a null cost ranks
last); times are integer microseconds since the epoch (UTC).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def dedup_mask(t: pa.Table) -> np.ndarray:
    """Keep the earliest of repeated identical measurements: same (target, workload, config),
    status and costs."""
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


def retention_mask(t: pa.Table, *, keep_top: int | None, cutoff_us: int | None, drop_all: bool) -> np.ndarray:
    """``forget``'s rule: nothing when ``drop_all``; else rows measured at or after
    ``cutoff_us`` (when given) and, per (target, workload), the ``keep_top`` best ``ok``
    records (when given; failed measurements are kept: they stop retries)."""
    n = t.num_rows
    if drop_all:
        return np.zeros(n, bool)
    mask = np.ones(n, bool)
    if cutoff_us is not None:
        mask &= t.column("timestamp").cast(pa.int64()).to_numpy() >= cutoff_us
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
