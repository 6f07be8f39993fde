"""A store view whose look-ups answer only with records that pass a filter: :class:`FilteredStore`.

The filter is a predicate on a :class:`~tunedb.index.model.record.Record` (``keep``), or, in a
subclass, :meth:`FilteredStore.keeps` (one record) and :meth:`FilteredStore.mask` (the rows of a
records table, vectorised).  Everything that is not an entry's look-up is the inner store's.
``tunedb.index.views.trust.TrustedStore`` (records a trust policy believes) and the replay view of
Kernel Tuner data sets (records of one replayed file) are filtered stores.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.contract.base import RecordStore, StoreStats

if TYPE_CHECKING:
    import pyarrow as pa

    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.record import Record
    from tunedb.index.retrieval.nearest import Match
    from tunedb.index.retrieval.predict import Prediction


class FilteredStore(RecordStore):
    """A view of ``inner`` whose look-ups answer only with records that pass ``keep``.

    Filtered (the look-ups of one entry): :meth:`lookup`, :meth:`lookup_many` (and
    ``lookup_batch``, built on it), :meth:`entry_records` and what the contract builds on it
    (``best_costs``, ``best``, ``cost``).  :meth:`lookup` returns the latest record of the triple
    that passes (None when none does, when the inner store's own answer is None -- nothing live,
    or its latest record refuted -- or when the latest passing record is ``refuted``), so a tuner
    on this view measures a config whose stored records do not pass.

    The inner store's, unchanged: every write (:meth:`commit`, :meth:`mark`, :meth:`invalidate`,
    :meth:`compact`, :meth:`dedup`, :meth:`forget`, :meth:`add_run`), :meth:`verdicts`,
    :meth:`runs`, the bulk reads (:meth:`records`, :meth:`entries` and what the contract builds on
    them), :meth:`targets`, ``find_target``, ``len``, :meth:`nearest`/:meth:`predict_best`,
    the cheap maintenance views (``size_bytes``, ``stale_targets``), :meth:`refresh`,
    :meth:`close` and :attr:`location`.  :meth:`stats` is the inner store's with this view's
    ``lookups``/``hits``; :meth:`cache_dir` a sub-directory of the inner store's per view name;
    :meth:`change_token` the inner token plus the view's name.  Thread-safe as the inner store is.

    ``name``: what tells two filters apart in :meth:`cache_dir`, :meth:`change_token` and
    ``repr`` (a text of letters, digits, ``_.-``; other characters are replaced by ``_``).
    """

    def __init__(self, inner: RecordStore, keep: Callable[[Record], bool] | None = None, *,
                 name: str = "filtered") -> None:
        if not isinstance(inner, RecordStore):
            raise ValueError(f"{type(self).__name__} wraps a RecordStore, got {type(inner).__name__}")
        if keep is None and type(self).keeps is FilteredStore.keeps:
            raise ValueError("FilteredStore needs a filter: keep=<predicate on a Record>")
        self.inner = inner
        self.name = str(name)
        self.keep = keep
        self.lookups = 0
        self.hits = 0
        self._lock = threading.Lock()
        self._verdict_cache: tuple[tuple, dict[str, str]] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner.location!r}, {self.name!r})"

    # ------------------------------------------------------------------ the filter
    def keeps(self, rec: Record) -> bool:
        """Whether ``rec`` may answer a look-up (``keep(rec)``; a subclass overrides this)."""
        return bool(self.keep(rec))

    def mask(self, table: pa.Table) -> pa.Array:
        """Boolean Arrow array: which rows of a records table (``RECORD_SCHEMA`` columns) pass
        :meth:`keeps`.  A subclass with a vectorised filter overrides this."""
        import pyarrow as pa

        from tunedb.index.model.record import Record

        return pa.array([self.keeps(Record.from_row(r)) for r in table.to_pylist()], pa.bool_())

    def cached_verdicts(self) -> dict[str, str]:
        """The inner store's :meth:`verdicts`, re-read only when its change token moved."""
        token = self.inner.change_token()
        with self._lock:
            if self._verdict_cache is not None and self._verdict_cache[0] == token:
                return self._verdict_cache[1]
        v = self.inner.verdicts()
        with self._lock:
            self._verdict_cache = (token, v)
        return v

    def latest_kept(self, table: pa.Table, config_keys: set[str]) -> dict[str, Record | None]:
        """config_key -> the latest-committed record passing the filter of each of
        ``config_keys`` in ``table`` (one entry's live records); None when it is refuted or when
        no record of the config passes."""
        from tunedb.index.model.record import Record

        verdicts = self.cached_verdicts()
        t = table.filter(self.mask(table))
        ck = t.column("config_key").to_pylist()
        committed = t.column("committed").to_pylist() if "committed" in t.column_names else [None] * len(ck)
        latest: dict[str, int] = {}
        for i, (k, c) in enumerate(zip(ck, committed)):
            if k in config_keys:
                j = latest.get(k)
                if j is None or c is None or committed[j] is None or c >= committed[j]:
                    latest[k] = i
        out: dict[str, Record | None] = dict.fromkeys(config_keys)
        for k, i in latest.items():
            row = t.slice(i, 1).to_pylist()[0]
            out[k] = None if verdicts.get(row["record_id"]) == "refuted" else Record.from_row(row)
        return out

    # ------------------------------------------------------------------ look-ups (filtered)
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The latest live record of the triple that passes the filter, or None (see the class)."""
        return self.lookup_many(target, workload, [config])[0]

    def lookup_many(self, target: Any, workload: Any, configs: Iterable[Any]) -> list[Record | None]:
        """:meth:`lookup` of each config of one (target, workload), in order; the entry's records
        are read at most once, and only when the inner store's answer for some config does not
        pass."""
        answers = list(self.inner.lookup_many(target, workload, list(configs)))
        bad = {i: a for i, a in enumerate(answers) if a is not None and not self.keeps(a)}
        if bad:
            first = next(iter(bad.values()))
            table = self.inner.records(first.target_key, first.workload_key, include_stale=False)
            found = self.latest_kept(table, {a.config_key for a in bad.values()})
            for i, a in bad.items():
                answers[i] = found.get(a.config_key)
        with self._lock:
            self.lookups += len(answers)
            self.hits += sum(a is not None for a in answers)
        return answers

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """The inner store's :meth:`entry_records` that pass the filter."""
        return [r for r in self.inner.entry_records(target, workload) if self.keeps(r)]

    # ------------------------------------------------------------------ writes (passed through)
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """``inner.commit`` (writes are never filtered)."""
        return self.inner.commit(records)

    def invalidate(self, target: Any) -> str:
        return self.inner.invalidate(target)

    def compact(self) -> dict:
        return self.inner.compact()

    def dedup(self) -> dict:
        return self.inner.dedup()

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        return self.inner.forget(keep_top=keep_top, older_than_days=older_than_days, target=target)

    def mark(self, verdicts: dict[str, str]) -> int:
        return self.inner.mark(verdicts)

    def verdicts(self) -> dict[str, str]:
        return self.inner.verdicts()

    def add_run(self, summary: Mapping[str, Any]) -> str:
        return self.inner.add_run(summary)

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """``inner.runs`` (a run summary is not a record: never filtered)."""
        return self.inner.runs(kind, limit=limit)

    # ------------------------------------------------------------------ everything else (the inner store's)
    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """``inner.records`` (bulk reads are not filtered)."""
        return self.inner.records(target, workload, include_stale=include_stale, columns=columns)

    def entries(self) -> pa.Table:
        return self.inner.entries()

    def targets(self) -> list[dict]:
        return self.inner.targets()

    def find_target(self, name_or_key: str) -> dict | None:
        return self.inner.find_target(name_or_key)

    def nearest(self, target: Any, workload: Any, k: int = 5, **kwargs: Any) -> list[Match]:
        """``inner.nearest`` (similar entries' configs choose what to evaluate; they never answer
        a look-up of this view)."""
        return self.inner.nearest(target, workload, k, **kwargs)

    def predict_best(self, target: Any, workload: Any, k: int = 3, **kwargs: Any) -> Prediction:
        """``inner.predict_best``."""
        return self.inner.predict_best(target, workload, k, **kwargs)

    def size_bytes(self) -> int:
        return self.inner.size_bytes()

    def stale_targets(self) -> list[str]:
        return self.inner.stale_targets()

    def __len__(self) -> int:
        return len(self.inner)

    def stats(self) -> StoreStats:
        """The inner store's counts, with this view's lookups and hits."""
        with self._lock:
            lookups, hits = self.lookups, self.hits
        return dataclasses.replace(self.inner.stats(), lookups=lookups, hits=hits)

    def cache_dir(self) -> Path:
        """``inner.cache_dir() / "views" / <name>`` (created on demand)."""
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in self.name).lstrip(".") or "_"
        d = Path(self.inner.cache_dir()) / "views" / safe
        d.mkdir(parents=True, exist_ok=True)
        return d

    def change_token(self) -> tuple:
        return ("filtered", self.name, self.inner.change_token())

    @property
    def location(self) -> str:
        return self.inner.location

    def refresh(self) -> None:
        self.inner.refresh()

    def close(self) -> None:
        self.inner.close()


__all__ = ["FilteredStore"]
