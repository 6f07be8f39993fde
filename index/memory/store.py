"""An in-memory record store: the whole contract of ``tunedb.index.contract.base.RecordStore``, nothing
on disk but a private cache directory for derived data.

For tests, notebooks and evaluation loops that need a throw-away store (``tunedb.open("memory:")``).
Records live in this process only: "durable" means "kept until the handle is gone".  Thread-safe
(one lock); one process.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tunedb.index.contract.base import RecordStore, StoreStats
from tunedb.index.contract.checks import (
    check_columns,
    check_forget_options,
    check_runs_query,
    check_verdicts,
    validated_commit,
)
from tunedb.index.contract.runs_codec import decode_run, prepare_run, select_runs
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import rid_hash
from tunedb.index.model.record import ROW_VALUES, Record, target_slug
from tunedb.index.retrieval.mixin import RetrievalMixin


def _now_us() -> int:
    return time.time_ns() // 1000


#: RECORD_SCHEMA column -> its value of a Record: ``Record.to_row``'s columns plus those a store
#: adds (``committed`` is the store's, not the record's)
_COLUMN_OF: dict[str, Callable[[Record], Any]] = {
    **ROW_VALUES,
    "target_slug": lambda r: target_slug(r.target_name, r.target_key),
    "rid_hash": lambda r: rid_hash(r.record_id),
}


class MemoryStore(RetrievalMixin, RecordStore):
    """A record store held in this process (see the module docstring)."""

    def __init__(self, name: str = "") -> None:
        self._name = name
        self._lock = threading.RLock()
        self._recs: list[Record] = []        # commit order, one per record_id
        self._committed: list[int] = []      # commit time of each, integer microseconds (UTC)
        self._rids: set[str] = set()
        self._by_lookup: dict[int, int] = {}  # lookup_key -> index of the latest record
        self._by_entry: dict[int, list[int]] = {}  # entry_key -> indices of its records, ascending
        self._by_target: dict[str, list[int]] = {}  # target_key -> indices, ascending
        self._by_workload: dict[str, list[int]] = {}  # workload_key -> indices, ascending
        self._invalidated: dict[str, int] = {}  # target_key -> invalidation time (us)
        self._verdicts: dict[str, str] = {}  # record_id -> latest verdict
        self._runs: dict[str, str] = {}  # run_id -> its summary's JSON text (see add_run)
        self._version = 0
        self._cache: Path | None = None
        self.lookups = 0
        self.hits = 0

    def _stale(self, i: int) -> bool:
        inv = self._invalidated.get(self._recs[i].target_key)
        return inv is not None and self._committed[i] <= inv

    def _refuted(self, i: int) -> bool:
        return self._verdicts.get(self._recs[i].record_id) == "refuted"

    # ------------------------------------------------------------------ writing
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        given = validated_commit(records)
        recs = given.to_records() if isinstance(given, RecordBatch) else given
        new = 0
        with self._lock:
            now = max(_now_us(), self._committed[-1] + 1 if self._committed else 0)
            for r in recs:
                if r.record_id in self._rids:
                    continue
                self._rids.add(r.record_id)
                i = len(self._recs)
                self._recs.append(r)
                self._committed.append(now)
                self._index(r, i)
                new += 1
            self._version += 1
        return new

    def invalidate(self, target: Any) -> str:
        tkey = self._target_key(target)
        with self._lock:
            if not any(r.target_key == tkey for r in self._recs):
                raise ValueError(f"unknown target {target!r}")
            self._invalidated[tkey] = max(_now_us(), self._committed[-1] if self._committed else 0)
            self._version += 1
        return tkey

    def mark(self, verdicts: dict[str, str]) -> int:
        check_verdicts(verdicts)
        with self._lock:
            for rid in verdicts:
                if rid not in self._rids:
                    raise ValueError(f"verdict for record {rid}: the store holds no such record")
            self._verdicts.update(verdicts)
            self._version += 1
        return len(verdicts)

    def verdicts(self) -> dict[str, str]:
        with self._lock:
            return {rid: v for rid, v in self._verdicts.items() if rid in self._rids}

    def add_run(self, summary: Mapping[str, Any]) -> str:
        """Keep a tuning-run summary (see ``RecordStore.add_run``) as its JSON text, so that
        :meth:`runs` returns new dicts that read like every other backend's."""
        run_id, _, _, text = prepare_run(summary)
        with self._lock:
            self._runs[run_id] = text
        return run_id

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        check_runs_query(kind, limit)
        with self._lock:
            texts = list(self._runs.items())
        decoded = (decode_run(t, f"{self.location} run {rid}") for rid, t in texts)
        return select_runs([d for d in decoded if d is not None], kind, limit)

    def _index(self, r: Record, i: int) -> None:
        """Enter record ``r`` at index ``i`` (the next one) into the lookup and filter maps."""
        self._by_lookup[r.lookup_key] = i
        self._by_entry.setdefault(r.entry_key, []).append(i)
        self._by_target.setdefault(r.target_key, []).append(i)
        self._by_workload.setdefault(r.workload_key, []).append(i)

    def _rewrite(self, keep: np.ndarray) -> dict:
        """Keep the records where ``keep`` is true (indices of ``self._recs``) and rebuild the maps."""
        before = len(self._recs)
        recs = [r for r, k in zip(self._recs, keep) if k]
        committed = [c for c, k in zip(self._committed, keep) if k]
        self._recs, self._committed = [], []
        self._rids, self._by_lookup, self._by_entry = set(), {}, {}
        self._by_target, self._by_workload = {}, {}
        for r, c in zip(recs, committed):
            self._rids.add(r.record_id)
            self._index(r, len(self._recs))
            self._recs.append(r)
            self._committed.append(c)
        self._version += 1
        return {"rows_before": before, "rows_after": len(self._recs), "removed": before - len(self._recs),
                "files_before": 0, "files_after": 0}

    def compact(self) -> dict:
        with self._lock:
            n = len(self._recs)
            return {"rows_before": n, "rows_after": n, "files_before": 0, "files_after": 0}

    def dedup(self) -> dict:
        from tunedb.index.contract.retention import dedup_mask

        with self._lock:
            return self._rewrite(dedup_mask(self._table(range(len(self._recs)))))

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        from tunedb.index.contract.retention import retention_mask

        check_forget_options(keep_top, older_than_days, target)
        with self._lock:
            n = len(self._recs)
            chosen = np.ones(n, bool)
            if target is not None:
                tkey = self._target_key(target)
                chosen = np.array([r.target_key == tkey for r in self._recs], bool)
                if not chosen.any():
                    raise ValueError(f"unknown target {target!r}")
            cutoff = None if older_than_days is None else _now_us() - int(older_than_days * 86400e6)
            drop_all = target is not None and keep_top is None and older_than_days is None
            idx = np.flatnonzero(chosen)
            keep = np.ones(n, bool)
            keep[idx] = retention_mask(self._table(idx.tolist()), keep_top=keep_top, cutoff_us=cutoff,
                                       drop_all=drop_all)
            return self._rewrite(keep)

    # ------------------------------------------------------------------ reads
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        from tunedb.index.model.keys import hash64

        lk = hash64(self._target_key(target), self._other_key(workload, "workload"), self._other_key(config, "config"))
        with self._lock:
            self.lookups += 1
            i = self._by_lookup.get(lk)
            if i is None or self._stale(i) or self._refuted(i):
                return None
            self.hits += 1
            return self._recs[i]

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        from tunedb.index.model.keys import hash64

        ek = hash64(self._target_key(target), self._other_key(workload, "workload"))
        with self._lock:
            return [self._recs[i] for i in self._by_entry.get(ek, ()) if self._recs[i].ok and not self._stale(i)
                    and not self._refuted(i)]

    def _table(self, indices: Iterable[int], columns: list[str] | None = None) -> Any:
        """The records at ``indices`` (in that order) as a ``RECORD_SCHEMA`` table, or with only
        ``columns`` (checked names, in that order): only those columns are built."""
        import pyarrow as pa

        from tunedb.index.model.schema import RECORD_SCHEMA, record_schema

        idx = list(indices)
        names = RECORD_SCHEMA.names if columns is None else columns
        arrays = []
        for c in names:
            typ = RECORD_SCHEMA.field(c).type
            if c == "committed":
                arrays.append(pa.array([self._committed[i] for i in idx], pa.int64()).cast(typ))
            else:
                get = _COLUMN_OF[c]
                arrays.append(pa.array([get(self._recs[i]) for i in idx], typ))
        return pa.Table.from_arrays(arrays, schema=record_schema(columns))

    def _matching(self, tkey: str | None, wkey: str | None) -> list[int]:
        """Indices (ascending: commit order) of the records of ``tkey`` and/or ``wkey`` (every
        record when both are None), found through the filter maps: the cost is proportional to
        the records of the smaller map entry, not to the store."""
        from tunedb.index.model.keys import hash64

        if tkey is None and wkey is None:
            return list(range(len(self._recs)))
        if tkey is not None and wkey is not None:
            cand = self._by_entry.get(hash64(tkey, wkey), ())
        elif tkey is not None:
            return list(self._by_target.get(tkey, ()))
        else:
            return list(self._by_workload.get(wkey, ()))
        # (an entry_key is a 64-bit hash: keep only the records that really are of the pair)
        return [i for i in cand if self._recs[i].target_key == tkey and self._recs[i].workload_key == wkey]

    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> Any:
        """See ``RecordStore.records``; commit order.  A filtered read costs time proportional
        to the matching records (the store keeps its record indices by target, workload and
        entry); a projection builds only the columns asked for."""
        cols = check_columns(columns)
        tkey = self._target_key(target) if target is not None else None
        wkey = self._other_key(workload, "workload") if workload is not None else None
        with self._lock:
            idx = self._matching(tkey, wkey)
            if not include_stale and self._invalidated:
                idx = [i for i in idx if not self._stale(i)]
            return self._table(idx, cols)

    def targets(self) -> list[dict]:
        with self._lock:
            counts: dict[str, list] = {}
            for r in self._recs:
                c = counts.setdefault(r.target_key, [r.target_name, r.target, 0])
                c[2] += 1
        out = [{"target_key": tk, "target_name": n, "target": dict(t), "records": c} for tk, (n, t, c) in counts.items()]
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def __len__(self) -> int:
        with self._lock:
            return len(self._recs)

    def stats(self) -> StoreStats:
        with self._lock:
            live = [i for i in range(len(self._recs)) if not self._stale(i)]
            tk = {self._recs[i].target_key for i in live}
            wk = {self._recs[i].workload_key for i in live}
            ek = {self._recs[i].entry_key for i in live}
            return StoreStats(records=len(self._recs), targets=len(tk), workloads=len(wk), entries=len(ek), files=0,
                              size_bytes=0, stale_targets=sorted(self._invalidated), lookups=self.lookups,
                              hits=self.hits, location=self.location)

    def size_bytes(self) -> int:
        """0: nothing is stored outside the process's memory."""
        return 0

    def stale_targets(self) -> list[str]:
        with self._lock:
            return sorted(self._invalidated)

    # ------------------------------------------------------------------ derived data, life cycle
    def cache_dir(self) -> Path:
        with self._lock:
            if self._cache is None:
                self._cache = Path(tempfile.mkdtemp(prefix="tunedb-memory-"))
                weakref.finalize(self, shutil.rmtree, str(self._cache), True)
            return self._cache

    def change_token(self) -> tuple:
        with self._lock:
            return (id(self), self._version, len(self._recs))

    @property
    def location(self) -> str:
        return f"memory:{self._name}" if self._name else "memory:"


__all__ = ["MemoryStore"]
