"""A partition's entry rankings, kept in ``derived/ranked/``: the first ``best``/``best_costs``
query of a large entry in a new process reads its ranking instead of estimating every config
of the entry again.

Ranking an entry estimates every config from all of its records (``estimate.rank_arrays``):
about 70 ms for an entry of 4,400 records.  A warm-started run ranks a few neighbour entries
before its first proposal, so without this file the first proposal of every new process waits
for that.  ``tunedb import`` ranks the entries it imported (``best_costs_many``), so the first
tuning run after an import finds them here.

Derived data, rebuildable: the Parquet files are the truth.  A file is named by the partition
(its 16-hex key prefix) and a signature of exactly what its rankings were computed from:

* the partition's built index (``indexcache.signature``: the live files' names and sizes and
  the target's invalidation time), so a commit that publishes a file, a compaction, a forget
  or an invalidation makes a new signature;
* the refuted records (every verdict "refuted" of the DB, by rid hash);
* the ranking code itself (a digest of the modules that rank), so a tunedb whose ranking
  changed never reads rankings another one computed.

A partition with journal rows has no signature and is not kept (the journal is folded soon).
What is kept of each entry: the first ``KEEP`` configs of its ranking -- each one's estimate,
the row of the partition's index arrays of its representative record, and that record's own
columns (``rowcache.ROW_COLUMNS``), so that answering needs neither the ranking nor a read of
the partition's files -- and whether that is the whole ranking.  Only entries of at least
``MIN_ENTRY_ROWS`` live ok records are kept: smaller ones rank in a few milliseconds.  The
reader checks every kept row against the partition's arrays (inside them, a live ok row of the
entry, the same record id and config key); a missing, torn, foreign or inconsistent file reads
as a miss.  Files are Parquet (plain columns: nothing in them is executed), written under a
temporary name and renamed into place (``fsutil.replace_derived``), so readers never see half a
file.

Units: estimates in seconds, as ``CostEstimate``.  Not thread-safe: the store calls it under
its handle lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.estimate import CostEstimate
from tunedb.index.model.keys import rid_hashes
from tunedb.index.model.record import Record
from tunedb.index.parquet.rowcache import ROW_COLUMNS, decode, record_at
from tunedb.index.support.fsutil import replace_derived

SUBDIR = "ranked"
#: entries with fewer live ok records are not kept (ranking them takes a few milliseconds)
MIN_ENTRY_ROWS = 256
#: the first configs of each entry's ranking that are kept (a query for more ranks again)
KEEP = 64
#: the largest file read (bytes): a bigger one is foreign, and reads as a miss
MAX_FILE_BYTES = 256 << 20
_FORMAT = 1
#: the modules whose code decides a ranking (their digest is part of every signature)
_RANKING_MODULES = ("tunedb.index.model.estimate", "tunedb.index.parquet.queries", __name__)
_FLOATS = ("value", "lo", "hi", "coverage")
_INTS = ("records", "samples", "confirmed")
_RANK_COLUMNS = ("rk_entry", "rk_row", "rk_complete", *(f"rk_{c}" for c in (*_FLOATS, *_INTS)),
                 "rk_basis_confirmed", "rk_noisy", "rk_statistic", "rk_tuner")


class Ranking:
    """The kept head of one entry's ranking: ``rows`` (int64, the representative records' rows
    of the partition's index arrays, in ranking order), ``keys`` (their config keys),
    ``estimates``, ``complete`` (these are all the entry's ranked configs), and the
    representative records, built (``records``, a ranking just computed) or as their columns
    (``table``, a ranking read back)."""

    __slots__ = ("rows", "keys", "estimates", "complete", "records", "table", "decoded")

    def __init__(self, rows: np.ndarray, keys: list[str], estimates: list[CostEstimate], complete: bool, *,
                 records: list[Record] | None = None, table: pa.Table | None = None):
        self.rows, self.keys, self.estimates, self.complete = rows, keys, estimates, complete
        self.records, self.table, self.decoded = records, table, None

    def record(self, i: int, lk: int, parse_json: Callable[[str], dict], tw: tuple | None) -> Record:
        """The representative record of place ``i``; ``lk`` its lookup key, ``parse_json`` and
        ``tw`` as ``rowcache.record_at`` takes them."""
        if self.records is not None:
            return self.records[i]
        if self.decoded is None:
            self.decoded = decode(self.table)
        return record_at(self.decoded, i, lk, None, parse_json, tw)

    def rows_table(self) -> pa.Table:
        """The representative records' ``ROW_COLUMNS``, in ranking order."""
        if self.table is None:
            self.table = RecordBatch.from_records(self.records or []).table.select(list(ROW_COLUMNS))
        return self.table


@cache
def _code_digest() -> str:
    """Digest of the source of ``_RANKING_MODULES`` ("" where a source cannot be read: then
    nothing is kept)."""
    import importlib.util

    h = hashlib.blake2b(digest_size=16)
    for name in _RANKING_MODULES:
        spec = importlib.util.find_spec(name)
        try:
            h.update(Path(spec.origin).read_bytes())  # type: ignore[union-attr, arg-type]
        except (OSError, TypeError, AttributeError):
            return ""
    return h.hexdigest()


def signature(index_signature: str | None, refuted_hashes: set[int]) -> str | None:
    """Signature of rankings computed from the index of ``index_signature``
    (``indexcache.signature``; None: not a keepable partition) with the refuted records of
    ``refuted_hashes``; None when nothing is to be kept."""
    code = _code_digest()
    if index_signature is None or not code:
        return None
    h = hashlib.blake2b(f"tunedb-ranked-{_FORMAT}\0{code}\0{index_signature}\0".encode(), digest_size=16)
    if refuted_hashes:
        h.update(np.sort(np.fromiter(refuted_hashes, np.int64, len(refuted_hashes))).tobytes())
    return h.hexdigest()


def _path(derived: Path, prefix: str, sig: str) -> Path:
    return derived / SUBDIR / f"{prefix}-{sig}.parquet"


def load(derived: Path, prefix: str, sig: str, a: Mapping[str, np.ndarray]) -> dict[int, Ranking]:
    """The kept rankings of partition ``prefix`` computed as ``sig`` says (entry key ->
    ``Ranking``), checked against the partition's index arrays ``a``; {} on a miss."""
    path = _path(derived, prefix, sig)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return {}
        t = pq.ParquetFile(path, memory_map=True).read(use_threads=False)
        cols = {c: t.column(c).to_numpy() for c in _RANK_COLUMNS}
        rows_t = t.select(list(ROW_COLUMNS))
        ek, rows = cols["rk_entry"].astype(np.int64), cols["rk_row"].astype(np.int64)
        n_rows = len(a["lookup_key"])
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= n_rows):
            return {}
        keys = t.column("config_key").to_pylist()
        same = (a["entry_key"][rows] == ek) & a["ok"][rows] & a["live"][rows] & \
            (rid_hashes(np.array(t.column("record_id").to_pylist(), dtype="S32")) == a["rid_hash"][rows])
        if not bool(np.all(same)):
            return {}
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return {}
    starts = np.flatnonzero(np.r_[True, ek[1:] != ek[:-1]]) if len(ek) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(ek)].astype(np.int64)
    fl = {c: cols[f"rk_{c}"].astype(np.float64).tolist() for c in _FLOATS}
    it = {c: cols[f"rk_{c}"].astype(np.int64).tolist() for c in _INTS}
    cb, nz = cols["rk_basis_confirmed"].tolist(), cols["rk_noisy"].tolist()
    st, tu = cols["rk_statistic"].tolist(), cols["rk_tuner"].tolist()
    out: dict[int, Ranking] = {}
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        if int(ek[lo]) in out:  # (an entry's places are contiguous: a file where they are not is foreign)
            return {}
        ests = [CostEstimate(value=fl["value"][i], lo=fl["lo"][i], hi=fl["hi"][i], records=it["records"][i],
                             samples=it["samples"][i], coverage=fl["coverage"][i],
                             basis="confirmed" if cb[i] else "all", noisy=bool(nz[i]), confirmed=it["confirmed"][i],
                             statistic=str(st[i]), tuner=str(tu[i])) for i in range(lo, hi)]
        out[int(ek[lo])] = Ranking(rows[lo:hi].copy(), [str(k) for k in keys[lo:hi]], ests,
                                   bool(cols["rk_complete"][lo]), table=rows_t.slice(lo, hi - lo))
    return out


def save(derived: Path, prefix: str, sig: str, rankings: Mapping[int, Ranking]) -> None:
    """Keep ``rankings`` (entry key -> ``Ranking``) as partition ``prefix``'s of signature
    ``sig`` and remove its older files.  Best effort: a read-only or full disk keeps nothing
    (and leaves no temp file)."""
    parts = [(e, rankings[e]) for e in sorted(rankings) if len(rankings[e].rows)]
    if not parts:
        return
    ests = [x for _, r in parts for x in r.estimates]
    sizes = [len(r.rows) for _, r in parts]
    extra = {
        "rk_entry": pa.array(np.repeat([e for e, _ in parts], sizes).astype(np.int64)),
        "rk_row": pa.array(np.concatenate([r.rows for _, r in parts]).astype(np.int64)),
        "rk_complete": pa.array(np.repeat([r.complete for _, r in parts], sizes).astype(bool)),
        **{f"rk_{c}": pa.array(np.array([getattr(x, c) for x in ests], np.float64)) for c in _FLOATS},
        **{f"rk_{c}": pa.array(np.array([getattr(x, c) for x in ests], np.int64)) for c in _INTS},
        "rk_basis_confirmed": pa.array([x.basis == "confirmed" for x in ests], pa.bool_()),
        "rk_noisy": pa.array([x.noisy for x in ests], pa.bool_()),
        "rk_statistic": pa.array([x.statistic for x in ests], pa.string()),
        "rk_tuner": pa.array([x.tuner for x in ests], pa.string()),
    }
    table = pa.concat_tables([r.rows_table() for _, r in parts])
    for name, col in extra.items():
        table = table.append_column(name, col)

    def write(tmp: Path) -> None:
        pq.write_table(table, tmp, compression="zstd")
    replace_derived(_path(derived, prefix, sig), write, f"{prefix}-*.parquet")
