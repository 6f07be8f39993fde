"""Decoded-row cache: the rows of a file made ready for building Records one at a time.

A lookup or best answers with a few rows of a file; converting the file's Arrow columns to
Python values once (``decode``) and then building each Record from a tuple (``record_at``)
is much cheaper than converting a row at a time.  ``TableCache`` keeps decoded files up to a
number of rows (the caller's ``max_rows``; about 600 bytes a row), the oldest decoded dropped
first (no reordering on hits: a lookup must stay cheap).

Units: costs, compile_s and wall_s in seconds; timestamps UTC datetimes.  Not thread-safe:
the store calls it under its handle lock.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.parquet.parts import EPOCH
from tunedb.index.record import Record

#: columns a decoded table is built from (read from a file when it is not a journal's table)
ROW_COLUMNS = ("record_id", "target_key", "target_name", "target", "workload_key", "workload",
               "config_key", "config", "costs", "status", "error", "compile_s", "wall_s", "timestamp",
               "source", "session", "meta", "entry_key", "host", "origin")
# a decoded row: record_id, costs, status, error, source, session, target_name, meta, host,
# origin, compile_s, wall_s, timestamp (datetime), entry_key

_DICT_COLUMNS = ("status", "error", "source", "session", "target_name", "meta", "host", "origin")  # order of _rows


def decode(tab: pa.Table) -> dict:
    """Row columns of one file, decoded for fast single-row access: ``_rows`` holds one tuple
    of ready Python values per row (order: the comment above ``_DICT_COLUMNS``); the JSON and
    key columns stay Arrow arrays (read only when the caller does not know them); ``_n`` is
    the row count."""
    # JSON and key columns: dictionary-encoded where values repeat (one target per file, few
    # workloads)
    t = {c: tab.column(c).combine_chunks() for c in ("config", "config_key")}
    for c in ("target", "workload", "target_key", "workload_key"):
        t[c] = pc.dictionary_encode(tab.column(c).combine_chunks())
    n = tab.num_rows
    cols = []
    for c in _DICT_COLUMNS:  # repeated strings: one Python object per distinct value
        if c not in tab.column_names:  # host/origin of a schema-1 file: unknown
            cols.append([""] * n)
            continue
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
                          *cols, *nums, (EPOCH + _dt.timedelta(microseconds=x) for x in ts), eks))
    t["_n"] = n
    return t


class TableCache:
    """Decoded tables by path, up to a number of rows (see module docstring)."""

    def __init__(self) -> None:
        self._tables: OrderedDict[str, dict] = OrderedDict()
        self.rows = 0

    def get(self, path: str, mem: Mapping[str, pa.Table], max_rows: int) -> dict:
        """The decoded table of ``path``: of ``mem[path]`` when there (a journal's rows, which
        are not Parquet), else read from the Parquet file (FileNotFoundError when it was merged
        away).  Keeps at most ``max_rows`` rows decoded (always the latest table)."""
        t = self._tables.get(path)
        if t is not None:
            return t
        tab = mem.get(path)
        if tab is None:
            names = set(pq.read_schema(path).names)  # a schema-1 file has no host/origin
            tab = pq.read_table(path, columns=[c for c in ROW_COLUMNS if c in names], memory_map=True)
        t = decode(tab)
        self._tables[path] = t
        self.rows += t["_n"]
        while self.rows > max_rows and len(self._tables) > 1:
            _, old = self._tables.popitem(last=False)
            self.rows -= old["_n"]
        return t

    def drop(self, path: str) -> None:
        t = self._tables.pop(path, None)
        if t is not None:
            self.rows -= t["_n"]

    def clear(self) -> None:
        self._tables.clear()
        self.rows = 0


def record_at(t: dict, row: int, lk: int, known: tuple | None, parse_json: Callable[[str], dict]) -> Record:
    """Record of ``row`` of decoded table ``t``; ``lk`` is its lookup_key.

    ``known`` = (target, workload, config, their canonical JSON texts and keys) when the
    caller already holds them (a lookup hit): those columns are then not read back.
    ``parse_json`` parses a target or workload text (the caller memoises it)."""
    if known is None:
        tj, wj, cj = (t[c][row].as_py() for c in ("target", "workload", "config"))
        known = (parse_json(tj), parse_json(wj), json.loads(cj), tj, wj, cj,
                 t["target_key"][row].as_py(), t["workload_key"][row].as_py(), t["config_key"][row].as_py())
    tdict, wdict, cdict, tj, wj, cj, tk, wk, ck = known
    rid, costs, status, error, source, session, tname, meta, host, origin, cs, ws, ts, ek = t["_rows"][row]
    # one dict display, installed as the Record's __dict__ (Record._from_fields)
    return Record._from_fields({
        "target": tdict, "workload": wdict, "config": cdict, "costs": costs, "status": status,
        "error": error, "compile_s": cs, "wall_s": ws, "timestamp": ts, "source": source, "session": session,
        "meta": json.loads(meta) if meta != "{}" else {}, "record_id": rid, "target_name": tname,
        "target_key": tk, "workload_key": wk, "config_key": ck, "target_json": tj, "workload_json": wj,
        "config_json": cj, "meta_json": meta, "lookup_key": lk, "entry_key": ek, "host": host, "origin": origin})
