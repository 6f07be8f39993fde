"""Decoded-row cache: the rows of a file made ready for building Records one at a time.

A lookup or best answers with a few rows of a file; converting the file's Arrow columns once
(``decode``) and then building each Record from them (``record_at``) is much cheaper than
converting a row at a time.  A decoded file is compact, about 200 bytes a row, so a process
that has touched every row of a 1M-record DB holds ~200 MB of them: numeric and id columns are
numpy arrays read per row, the eight repeated-string columns (status, error, source, ...) one
shared tuple per distinct combination, the JSON and key columns Arrow arrays.  ``TableCache``
keeps decoded files up to a number of rows (the caller's ``max_rows``), the oldest decoded
dropped first (no reordering on hits: a lookup must stay cheap).

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

from tunedb.index.model.record import Record
from tunedb.index.parquet.parts import EPOCH

#: columns a decoded table is built from (read from a file when it is not a journal's table)
ROW_COLUMNS = ("record_id", "target_key", "target_name", "target", "workload_key", "workload",
               "config_key", "config", "costs", "status", "error", "compile_s", "wall_s", "timestamp",
               "source", "session", "meta", "entry_key", "host", "origin")

#: repeated strings, decoded as one shared tuple per distinct combination (order of ``_combos``)
_DICT_COLUMNS = ("status", "error", "source", "session", "target_name", "meta", "host", "origin")


def _combos(tab: pa.Table) -> tuple[list[tuple] | None, np.ndarray | list]:
    """(distinct tuples of the ``_DICT_COLUMNS`` values, each row's index into them); or, when
    the combinations hardly repeat (a per-record meta or session), (None, per column: (codes,
    values))."""
    n = tab.num_rows
    codes, values = [], []
    for c in _DICT_COLUMNS:
        if c not in tab.column_names:  # host/origin of a schema-1 file: unknown
            codes.append(np.zeros(n, np.int64))
            values.append([""])
            continue
        enc = pc.dictionary_encode(tab.column(c).combine_chunks())
        empty = "{}" if c == "meta" else ""
        values.append([v or empty for v in enc.dictionary.to_pylist()] or [empty])
        codes.append(pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64))
    sizes = [len(v) for v in values]
    if max(sizes) > max(64, n // 8):  # (building a tuple per distinct row would cost more than it saves)
        return None, [(c.astype(np.int32), v) for c, v in zip(codes, values)]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0 ** 62:  # one int64 code per row
        packed = np.zeros(n, np.int64)
        for code, size in zip(codes, sizes):
            packed = packed * size + code
        uniq, inverse = np.unique(packed, return_inverse=True)
        rows = np.zeros((len(uniq), len(codes)), np.int64)
        rem = uniq.copy()
        for j in range(len(codes) - 1, -1, -1):
            rows[:, j] = rem % sizes[j]
            rem //= sizes[j]
    else:
        rows, inverse = np.unique(np.stack(codes, 1), axis=0, return_inverse=True)
    if len(rows) > max(64, n // 8):
        return None, [(c.astype(np.int32), v) for c, v in zip(codes, values)]
    combos = [tuple(values[j][int(x)] for j, x in enumerate(r)) for r in rows.tolist()]
    return combos, inverse.reshape(-1).astype(np.int32)


def _fixed_ids(col: pa.ChunkedArray) -> np.ndarray:
    """A column of 32-character ids or keys as a numpy ``S32`` array."""
    arr = pc.cast(col.combine_chunks(), pa.binary(32))
    return np.frombuffer(arr.buffers()[1], "S32", count=len(arr), offset=arr.offset * 32).copy()


def decode(tab: pa.Table) -> dict:
    """Row columns of one file, decoded for fast single-row access (see module docstring);
    ``_n`` is the row count."""
    cfg = pc.cast(tab.column("config").combine_chunks(), pa.large_string())
    off = np.frombuffer(cfg.buffers()[1], np.int64, count=len(cfg) + 1, offset=cfg.offset * 8)
    t: dict = {"_cfg_off": (off - off[0]).copy(),
               "_cfg_buf": np.frombuffer(cfg.buffers()[2], np.uint8)[off[0]:off[-1]].copy(),
               "_cfg_key": _fixed_ids(tab.column("config_key"))}
    for c in ("target", "workload", "target_key", "workload_key"):  # one value (target) or a few
        t[c] = pc.dictionary_encode(tab.column(c).combine_chunks())
    costs = tab.column("costs").combine_chunks()
    off = costs.offsets.to_numpy()
    t["_cost_off"] = (off - off[0]).astype(np.int64)
    t["_cost_val"] = costs.values.to_numpy(zero_copy_only=False)[off[0]:off[-1]].astype(np.float64)
    t["_rid"] = _fixed_ids(tab.column("record_id"))
    t["_combos"], t["_combo"] = _combos(tab)
    for c in ("compile_s", "wall_s"):
        t["_" + c] = tab.column(c).to_numpy().astype(np.float64)  # (null: NaN)
    t["_ts"] = tab.column("timestamp").cast(pa.int64()).to_numpy()
    t["_ek"] = tab.column("entry_key").to_numpy()
    t["_n"] = tab.num_rows
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
            # (ParquetFile, not read_table: that imports pyarrow.dataset, and with it pandas, 0.3 s)
            f = pq.ParquetFile(path, memory_map=True)
            names = set(f.schema_arrow.names)  # a schema-1 file has no host/origin
            tab = f.read(columns=[c for c in ROW_COLUMNS if c in names], use_threads=False)
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


def record_at(t: dict, row: int, lk: int, known: tuple | None, parse_json: Callable[[str], dict],
              tw: tuple | None = None) -> Record:
    """Record of ``row`` of decoded table ``t``; ``lk`` is its lookup_key.

    ``known`` = (target, workload, config, their canonical JSON texts and keys) when the
    caller already holds them (a lookup hit): those columns are then not read back; ``tw`` =
    (target, workload, their JSON texts and keys) when it knows only those (a best query).
    ``parse_json`` parses a target or workload text (the caller memoises it)."""
    if known is None:
        off = t["_cfg_off"]
        cj = t["_cfg_buf"][off.item(row):off.item(row + 1)].tobytes().decode()
        ck = t["_cfg_key"].item(row).decode()
        if tw is not None:
            known = (tw[0], tw[1], json.loads(cj), tw[2], tw[3], cj, tw[4], tw[5], ck)
        else:
            tj, wj = t["target"][row].as_py(), t["workload"][row].as_py()
            known = (parse_json(tj), parse_json(wj), json.loads(cj), tj, wj, cj,
                     t["target_key"][row].as_py(), t["workload_key"][row].as_py(), ck)
    tdict, wdict, cdict, tj, wj, cj, tk, wk, ck = known
    combos = t["_combos"]
    if combos is not None:
        status, error, source, session, tname, meta, host, origin = combos[t["_combo"].item(row)]
    else:
        status, error, source, session, tname, meta, host, origin = (v[c.item(row)] for c, v in t["_combo"])
    off = t["_cost_off"]
    cs, ws = t["_compile_s"].item(row), t["_wall_s"].item(row)
    # one dict display, installed as the Record's __dict__ (Record._from_fields)
    return Record._from_fields({
        "target": tdict, "workload": wdict, "config": cdict,
        "costs": tuple(t["_cost_val"][off.item(row):off.item(row + 1)].tolist()), "status": status,
        "error": error, "compile_s": None if cs != cs else cs, "wall_s": None if ws != ws else ws,
        "timestamp": EPOCH + _dt.timedelta(microseconds=t["_ts"].item(row)), "source": source, "session": session,
        "meta": json.loads(meta) if meta != "{}" else {}, "record_id": t["_rid"].item(row).decode(),
        "target_name": tname, "target_key": tk, "workload_key": wk, "config_key": ck, "target_json": tj,
        "workload_json": wj, "config_json": cj, "meta_json": meta, "lookup_key": lk,
        "entry_key": t["_ek"].item(row), "host": host, "origin": origin})
