"""The entries of a records table: each entry's estimated best config and its curve.

An entry is one (target, workload) pair.  Its cost is the estimator's (``tunedb.index.model.estimate``:
the number ``tunedb best`` shows): :func:`entry_estimates` over the records read, refuted
records left out (:func:`refuted_ids`, :func:`not_refuted`), an entry with a stored decision
answered by it (:func:`decided_curves`), shown as a table cell by :func:`cost_brief`.
:func:`entry_curves` gives each entry's fastest single measurement so far over its records in
timestamp order (a search's history, not the entry's cost).  ``tunedb report`` and
``tunedb dashboard`` read entries through this module; costs in seconds.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from tunedb.index.model.estimate import CostEstimate, estimate_of_row, estimate_table
from tunedb.index.model.units import fmt_seconds
from tunedb.transfer.apps.rundata import EntryCurve

#: the record columns :func:`entry_estimates` reads (and ``config_key`` for ties, when present)
ESTIMATE_COLUMNS = ["entry_key", "lookup_key", "status", "costs", "meta"]


def cost_brief(est: CostEstimate | None, missing: str = "–") -> str:
    """An estimate as a table cell: ``4.54 ms ±3% n=5`` (the 95 % interval's half-width relative
    to the value, ``±12% (72 % CI)`` when too few values give it a lower level; n: its records,
    ``n=1 (32 repeats)`` for one record's repeats; ``noisy`` appended
    when it is), ``missing`` for None.  The whole of it (the
    interval and its confidence) is ``est.text()``: the cell's tooltip."""
    if est is None:
        return missing
    from tunedb.index.model.estimate import LEVEL, ci_label

    words = [fmt_seconds(est.value)]
    if est.has_interval:
        rel = est.rel_halfwidth
        words.append(f"±{rel:.0%}" if rel >= 0.01 else f"±{rel * 100:.1f}%")
        if est.coverage < LEVEL - 1e-9:  # a 95 % interval unless it says otherwise
            words.append(f"({ci_label(est.coverage)})")
    words.append(f"n={est.records}" if est.records != 1 or est.samples <= 1 else f"n=1 ({est.samples} repeats)")
    if est.noisy:
        words.append("noisy")
    return " ".join(words)


def not_refuted(t: Any, refuted: Iterable[str] | None) -> np.ndarray | None:
    """A mask of the rows of ``t`` that are not ``refuted`` (record_ids; by the ``rid_hash``
    column when ``t`` has no ``record_id``), or None when there is nothing to leave out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = sorted(set(refuted or ()))
    if not ids or t.num_rows == 0:
        return None
    if "record_id" in t.column_names:
        m = pc.is_in(t.column("record_id"), value_set=pa.array(ids, pa.string()))
    else:
        from tunedb.index.model.keys import rid_hashes

        m = pc.is_in(t.column("rid_hash"), value_set=pa.array(rid_hashes(ids), pa.int64()))
    return ~np.asarray(pc.fill_null(m, False))


def entry_estimates(t: Any, keep: np.ndarray | None = None) -> Any:
    """The estimator's best config of every entry of the records table ``t`` (at least
    :data:`ESTIMATE_COLUMNS`; the rows where ``keep`` is True when given): one row per entry with
    an ok record, as an Arrow table with ``entry_key``, ``row`` (the index in ``t`` of a record
    of the best config: its config, keys and provenance), ``lookup_key`` and the columns of
    ``tunedb.index.model.estimate.estimate_table`` (value, lo, hi, records, samples, coverage,
    confirmed, basis, noisy; :func:`estimate_of_row` of a row is its CostEstimate).  Each config
    is estimated from its records (``estimate_table`` by ``lookup_key``, vectorised), the entry's
    best is the first in ranking order (``tunedb.index.model.estimate.rank_key``: confirmed estimates
    first, then the lowest value), ties by ``config_key`` when ``t`` has it (as ``tunedb best``
    orders them), else by ``lookup_key``."""
    import pyarrow as pa

    idx = np.arange(t.num_rows, dtype=np.int64)
    if keep is not None:
        idx = idx[np.asarray(keep, bool)]
        t = t.filter(pa.array(np.asarray(keep, bool)))
    est = estimate_table(t.select(["lookup_key", "status", "costs", "meta"]), by=("lookup_key",)) \
        if t.num_rows else None
    names = ["entry_key", "row", "lookup_key", "value", "lo", "hi", "records", "samples", "coverage", "confirmed",
             "basis", "noisy", "statistic", "tuner"]
    if est is None or est.num_rows == 0:
        return pa.table({n: pa.array([], pa.string() if n in ("basis", "statistic", "tuner") else pa.bool_() if n == "noisy"
                                     else pa.float64() if n in ("value", "lo", "hi", "coverage") else pa.int64())
                         for n in names})
    lk = t.column("lookup_key").to_numpy()
    uniq, first = np.unique(lk, return_index=True)
    elk = est.column("lookup_key").to_numpy()
    rows = first[np.searchsorted(uniq, elk)]          # (a record of each config: its first row)
    ek = t.column("entry_key").take(pa.array(rows)).to_numpy()
    value = est.column("value").to_numpy()
    if "config_key" in t.column_names:
        ck = np.asarray(t.column("config_key").take(pa.array(rows)).to_pylist(), dtype=str)
        tie = np.unique(ck, return_inverse=True)[1].reshape(-1)
    else:
        tie = elk
    unconfirmed = est.column("basis").to_numpy(zero_copy_only=False) != "confirmed"
    order = np.lexsort((tie, value, unconfirmed, ek))  # (rank_key's order within each entry)
    eks = ek[order]
    pick = order[np.r_[True, eks[1:] != eks[:-1]]] if len(eks) else order
    out = est.take(pa.array(pick))
    return out.add_column(0, "row", pa.array(idx[rows[pick]], pa.int64())) \
        .add_column(0, "entry_key", pa.array(ek[pick], pa.int64())).select(names)


def entry_curves(table: Any, refuted: Iterable[str] | None = None) -> list[EntryCurve]:
    """One :class:`EntryCurve` per (target_key, workload_key) of a records table
    (``RecordStore.records()``), records ordered by timestamp (ties: table order): the fastest
    measurement so far after each, and the estimator's best config (:func:`entry_estimates`;
    ``refuted`` record_ids, which never answer a lookup, are left out of it as ``tunedb best``
    leaves them out)."""
    n = table.num_rows
    if n == 0:
        return []
    tk = table.column("target_key").to_pylist()
    wk = table.column("workload_key").to_pylist()
    names = table.column("target_name").to_pylist()
    wjs = table.column("workload").to_pylist()
    srcs = table.column("source").to_pylist()
    status = table.column("status").to_pylist()
    cost = table.column("cost").to_pylist()
    ts = table.column("timestamp").cast("int64").to_pylist()
    committed = table.column("committed").cast("int64").to_pylist()
    ek = table.column("entry_key").to_pylist()
    best = entry_estimates(table, not_refuted(table, refuted))
    best_of = {int(e): i for i, e in enumerate(best.column("entry_key").to_pylist())}
    best_rows = best.column("row").to_pylist()
    when = np.array([t if t is not None else (c if c is not None else 0) for t, c in zip(ts, committed)], np.int64)
    order = np.lexsort((np.arange(n), when))
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in order.tolist():
        groups[(tk[i], wk[i])].append(i)
    out: list[EntryCurve] = []
    for (t, w), rows in groups.items():
        seen: float | None = None
        curve: list[float | None] = []
        for i in rows:
            c = cost[i]
            if status[i] == "ok" and c is not None and math.isfinite(c) and (seen is None or c < seen):
                seen = float(c)
            curve.append(seen)
        j = best_of.get(int(ek[rows[0]]))
        est = None if j is None else estimate_of_row(best.slice(j, 1).to_pylist()[0])
        cfg = None if j is None else json.loads(table.column("config")[best_rows[j]].as_py())
        out.append(EntryCurve(
            target_key=t, target_name=names[rows[0]] or t[:8], workload_key=w, workload=json.loads(wjs[rows[0]]),
            records=len(rows), ok_records=sum(1 for i in rows if status[i] == "ok" and cost[i] is not None),
            best_so_far=curve, best_config=cfg, estimate=est, best_seen=seen, sources=sorted({srcs[i] for i in rows})))
    out.sort(key=lambda e: (-e.records, e.target_name, e.workload_key))
    return out



def decided_curves(db: Any, curves: list[EntryCurve], targets: list[dict]) -> list[EntryCurve]:
    """``curves`` with the best config of every entry that has a stored decision replaced by
    the entry's answer (``tunedb.index.contract.decisions.answer``: what ``tunedb best`` lists first),
    so the report's best configs are the CLI's.  Entries without a decision keep the
    estimator's best (the same answer, read from the whole table at once)."""
    from tunedb.index.contract.decisions import stored_decisions

    decisions = stored_decisions(db) if hasattr(db, "runs") else []
    decided = {(d.get("target_key"), d.get("workload_key")) for d in decisions}
    if not decided:
        return curves
    from tunedb.index.contract.decisions import answer

    target_of = {t["target_key"]: t["target"] for t in targets}
    for c in curves:
        if (c.target_key, c.workload_key) not in decided or c.target_key not in target_of:
            continue
        head = answer(db, target_of[c.target_key], c.workload, summaries=decisions).first()
        if head is not None:
            c.best_config, c.estimate = dict(head.config), head.estimate
    return curves


def refuted_ids(db: Any) -> set[str]:
    """The record_ids ``db`` marks refuted (none for a store without verdicts)."""
    fn = getattr(db, "verdicts", None)
    try:
        found = fn() if callable(fn) else {}
    except NotImplementedError:
        found = {}
    return {rid for rid, v in found.items() if v == "refuted"}

