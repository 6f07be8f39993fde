"""The in-memory index of a store handle: the index columns of every live file as numpy arrays.

Each published file (and each journal, per target) contributes one ``Chunk``: its
``INDEX_COLUMNS`` as numpy arrays.  ``build`` concatenates the chunks of the live files into
one set of arrays, de-duplicated by record_id (first occurrence wins), marks stale rows (their
target was invalidated after they were committed) and sorts them for the two queries:

* lookup: the last live row of each lookup_key by (committed, timestamp) answers; the
  answering rows are kept as two sorted arrays (keys, packed file/row), 16 bytes a key;
* best: live ``ok`` rows by (entry_key, cost).

Costs are seconds (NaN stored as +inf so it sorts last); ``committed``, ``timestamp`` and
invalidation times are integer microseconds since the epoch (UTC).  Pure functions: the
store holds the results and calls these under its handle lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tunedb.index.model.schema import INDEX_COLUMNS
from tunedb.index.parquet.parts import meta_supersedes, meta_target


class Chunk:
    """Index columns of one immutable Parquet file (or of one target's rows of a journal)."""

    __slots__ = ("path", "target_key", "n", "cols", "supersedes")

    def __init__(self, path: Path, target_key: str, cols: dict, supersedes: list[str]):
        self.path = path
        self.target_key = target_key
        self.cols = cols
        self.n = len(cols["lookup_key"])
        self.supersedes = supersedes


def index_cols(t: pa.Table) -> dict[str, np.ndarray]:
    """The in-memory index columns (numpy) of a record table."""
    cols = {
        "lookup_key": t.column("lookup_key").to_numpy(),
        "entry_key": t.column("entry_key").to_numpy(),
        "cost": t.column("cost").to_numpy(zero_copy_only=False).astype(np.float64),
        "ok": pc.equal(t.column("status"), "ok").to_numpy(zero_copy_only=False).astype(bool),
        "rid_hash": t.column("rid_hash").to_numpy(),
        "committed": t.column("committed").cast(pa.int64()).to_numpy(),
        "timestamp": t.column("timestamp").cast(pa.int64()).to_numpy(),
    }
    cols["cost"] = np.where(np.isnan(cols["cost"]), np.inf, cols["cost"])
    return cols


def read_chunk(path: Path) -> tuple[Chunk, tuple[str, str] | None]:
    """The chunk of Parquet file ``path``, and its target's (name, canonical JSON) when the
    file's metadata names it (else None)."""
    pf = pq.ParquetFile(path, memory_map=True)
    md = pf.schema_arrow.metadata
    tkey, target = meta_target(md)
    t = pf.read(columns=INDEX_COLUMNS, use_threads=pf.metadata.num_rows > 50_000)
    return Chunk(path, tkey, index_cols(t), meta_supersedes(md)), target


class Arrays(NamedTuple):
    """The index over the live files (see module docstring).

    ``a``: column -> array, one entry per de-duplicated row, plus ``file`` (index into the
    live file list), ``row`` (row in that file) and ``live`` (not stale).  ``last_keys`` (sorted)
    / ``last_packed``: each lookup_key with a live row and its answering row as
    ``file << 32 | row``.  ``by_entry``: the row order for best, ``entry_sorted`` the keys in
    that order; ``rid_sorted``: every row's rid hash, sorted."""

    a: dict[str, np.ndarray]
    last_keys: np.ndarray
    last_packed: np.ndarray
    by_entry: np.ndarray
    entry_sorted: np.ndarray
    rid_sorted: np.ndarray


def build(chunks: list[Chunk], invalidated: Mapping[str, int]) -> Arrays:
    """The index of ``chunks`` (the live files, in file-index order); ``invalidated`` maps a
    target_key to when it was invalidated (microseconds)."""
    n = sum(c.n for c in chunks)
    if n == 0:
        z = np.zeros(0, np.int64)
        a = {"lookup_key": z, "entry_key": z, "cost": np.zeros(0), "ok": np.zeros(0, bool),
             "rid_hash": z, "committed": z, "timestamp": z, "file": np.zeros(0, np.int32),
             "row": np.zeros(0, np.int32)}
    else:
        # (one chunk, the common case after a compaction: its arrays as they are, no copy)
        a = {k: (np.concatenate([c.cols[k] for c in chunks]) if len(chunks) > 1 else chunks[0].cols[k])
             for k in chunks[0].cols}
        a["file"] = np.repeat(np.arange(len(chunks), dtype=np.int32), [c.n for c in chunks])
        a["row"] = np.concatenate([np.arange(c.n, dtype=np.int32) for c in chunks])
        # de-duplicate by record_id (first occurrence wins); a plain sort finds out whether
        # there is anything to do (10x cheaper than the argsort of np.unique)
        srt = np.sort(a["rid_hash"])
        if (srt[1:] == srt[:-1]).any():
            _, first = np.unique(a["rid_hash"], return_index=True)
            first.sort()
            a = {k: v[first] for k, v in a.items()}
            srt = np.sort(a["rid_hash"])
    # stale rows: their target was invalidated after they were committed
    live = np.ones(len(a["lookup_key"]), bool)
    if invalidated:
        tk = np.array([c.target_key for c in chunks], dtype=object)
        inv_by_file = np.array([invalidated.get(k, -1) for k in tk], dtype=np.int64) if len(tk) else \
            np.zeros(0, np.int64)
        if len(inv_by_file):
            live = a["committed"] > inv_by_file[a["file"]]
    a["live"] = live
    # lookup: sorted by (lookup_key, committed, timestamp), the last live row of each key answers
    by_lookup = np.lexsort((a["timestamp"], a["committed"], a["lookup_key"]))
    last_keys, last_packed = _last_positions(a, by_lookup)
    del by_lookup
    # best: live ok rows sorted by (entry_key, cost)
    okrows = np.flatnonzero(a["ok"] & live)
    order = np.lexsort((a["cost"][okrows], a["entry_key"][okrows]))
    by_entry = okrows[order]
    return Arrays(a, last_keys, last_packed, by_entry, a["entry_key"][by_entry],
                  srt if n else np.zeros(0, np.int64))


def _last_positions(a: Mapping[str, np.ndarray], by_lookup: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted lookup keys with a live row, file index << 32 | row of each one's latest live row)."""
    order = by_lookup[a["live"][by_lookup]]  # live rows, lookup order
    ks = a["lookup_key"][order]
    if not len(ks):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    last = order[np.flatnonzero(np.r_[ks[1:] != ks[:-1], True])]  # rows, last of each key
    packed = (a["file"][last].astype(np.int64) << 32) | a["row"][last].astype(np.int64)
    return a["lookup_key"][last], packed


def last_row(arrays: Arrays, lk: int) -> int | None:
    """file index << 32 | row of the row answering lookup_key ``lk``, or None."""
    ks = arrays.last_keys
    i = int(ks.searchsorted(lk))
    if i < len(ks) and ks.item(i) == lk:
        return arrays.last_packed.item(i)
    return None


def fresh_mask(rh: np.ndarray, known_sorted: Iterable[np.ndarray], known_set: set[int]) -> np.ndarray:
    """True for each rid hash of ``rh`` in none of the sorted arrays ``known_sorted`` nor in
    ``known_set``, and the first of its repeats within ``rh``."""
    if len(rh) <= 8:  # a tuner's commit: scalar probes cost less than array set-up
        out, seen = [], set()
        for h in rh.tolist():
            new = h not in seen and h not in known_set
            seen.add(h)
            for known in known_sorted if new else ():
                i = int(known.searchsorted(h))
                if i < len(known) and known.item(i) == h:
                    new = False
                    break
            out.append(new)
        return np.array(out, bool)
    keep = np.ones(len(rh), bool)
    if len(rh) > 1:
        srt = np.sort(rh)
        if (srt[1:] == srt[:-1]).any():  # repeated ids within the commit: keep the first
            keep[:] = False
            keep[np.unique(rh, return_index=True)[1]] = True
    for known in known_sorted:
        if len(known):
            pos = np.minimum(np.searchsorted(known, rh), len(known) - 1)
            keep &= known[pos] != rh
    if known_set:
        if len(rh) <= 64:
            keep &= np.array([h not in known_set for h in rh.tolist()], bool)
        else:
            keep &= ~np.isin(rh, np.fromiter(known_set, np.int64, len(known_set)))
    return keep


def entry_rows(a: Mapping[str, np.ndarray], by_entry: np.ndarray, entry_sorted: np.ndarray, ek: int,
               skip_rids: set[int] | frozenset = frozenset()) -> list[int]:
    """Every live ok row of entry ``ek`` (ascending cost), less the rows whose rid hash is in
    ``skip_rids`` (refuted records)."""
    lo = int(np.searchsorted(entry_sorted, ek, "left"))
    hi = int(np.searchsorted(entry_sorted, ek, "right"))
    rows = by_entry[lo:hi]
    if skip_rids and len(rows):
        keep = ~np.isin(a["rid_hash"][rows], np.fromiter(skip_rids, np.int64, len(skip_rids)))
        rows = rows[keep]
    return [int(i) for i in rows]
