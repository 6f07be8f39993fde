"""A layered record store: several stores read as one, most specific first.

``LayeredStore([local, team, published])`` reads through its layers (e.g. a local Parquet
directory over a team's PostgreSQL over a read-only published snapshot) and writes to one of
them (``writable``, default the first; ``None``: a read-only view).  It implements the whole
``tunedb.index.contract.base.RecordStore`` contract; where the contract is silent about several stores
this module decides, as follows.

Modes (MetaSchedule's two union databases)
    ``mode="ordered"`` (``OrderedUnionDatabase``): :meth:`lookup` answers from the first layer
    whose own lookup gives an answer that is not hidden (below); :meth:`best` from the first
    layer holding any visible ``ok`` record of the entry (its ``k`` best; later layers are not
    consulted).  ``mode="union"`` (``UnionDatabase``): :meth:`best` merges all layers - the ``k``
    best configs across layers, one per config, its fastest measurement in any layer;
    :meth:`lookup` gives the best of the layers' answers: an ``ok`` record beats a failed one,
    among ``ok`` ones the lowest cost wins (ties: the more specific layer), among failures the
    most specific layer's.  Why the fastest ok one: the layers are independent measurements of
    the same config (commit times of different stores are not comparable, so "committed last"
    has no meaning across layers); union mode asks "what is the best this config has done
    anywhere", the same question its ``best`` answers, and a config that ran fine somewhere is
    not a failure.

Identity
    A record present in several layers (same ``record_id``, e.g. after ``tunedb copy``) counts
    once in :meth:`records` (the most specific layer's row stays), ``len``, :meth:`entries`,
    :meth:`targets` and :meth:`stats`.  :meth:`commit` skips records a lower layer already
    holds (they are stored already) and returns how many were new to the layered store.

Hidden records: verdicts and staleness
    :meth:`verdicts` is the union over layers; for a record with verdicts in several layers the
    most specific layer's wins (so the writable layer's, when it has one).  But answering is
    conservative: a record ``refuted`` in ANY layer (its latest verdict there), or stale in ANY
    layer that holds it, never answers :meth:`lookup`/:meth:`best` through the layered handle
    and a stale one drops out of ``include_stale=False`` reads.  (So a record the team's layer
    refuted stays hidden here even when the local layer says ``verified``: fix it in the layer
    that refuted it.)  Each layer's own invalidations apply to the records it holds, by its own
    commit clock; they do not stale other layers' records of the target, except copies of the
    same records (same ``record_id``).

Tuning runs
    :meth:`add_run` goes to the writable layer; :meth:`runs` is the union of every layer's
    runs, each ``run_id`` once (the most specific layer's summary), then filtered, ordered and
    limited as the contract says.

Writes
    ``commit``, ``mark``, ``invalidate``, ``compact``, ``dedup``, ``forget`` and ``add_run`` go
    to the writable layer only; with ``writable=None`` they raise ``ValueError("read-only: ...")``.
    A write about records that only lower layers hold first copies those records, unchanged
    (same record_id, keys, JSON, costs, source: a copy is the same measurement), into the
    writable layer, then writes there:

    * ``mark({rid: verdict})`` of a record only a lower layer holds copies it up, then stores
      the verdict in the writable layer;
    * ``invalidate(target)`` copies every record of the target that the lower layers hold and
      the writable layer does not, then invalidates the target in the writable layer: the
      copies are stale there, hence (stale in any layer) hidden here, so after it no record of
      the target committed before answers through this handle - the contract's meaning of
      invalidate - while the lower layers themselves are not touched.  This includes a target
      that only lower layers hold.  (It costs a copy of that target's records.)
    * ``forget``/``dedup``/``compact`` act on the writable layer's own records only (lower
      layers are read-only: what they hold stays visible).

Nearest, caching, life cycle
    :meth:`nearest` sees the entries of every layer; its vector cache lives under the writable
    layer's ``cache_dir()`` (a private temp directory when read-only) in ``layered/<key>``, the
    key a hash of the mode and the layers' locations; :meth:`change_token` combines the layers'
    tokens.  :attr:`location` is the layers' locations joined with ``" + "``; :meth:`refresh`
    and :meth:`close` reach every layer.

Cost and freshness
    Point reads go to the layers' own indexes.  :meth:`entries` (and so :meth:`nearest`'s
    index) uses each layer's own entries for the targets only that layer holds and reads
    records only of targets several layers hold, so a published snapshot layer answers from its
    entries files.  Which records are hidden and which record_ids
    the lower layers hold is computed per target (two reads of that target's records in every
    layer, on the first query of the target that needs it; whole-DB reads compute it for every
    target at once) and kept until :meth:`refresh` or a write through this handle that can
    change it (``mark``, ``invalidate``, ``forget``, ``dedup``).  Like any handle, a layered
    one sees changes made through other handles - including a layer's own handle - after
    :meth:`refresh`.  Thread-safe; several processes as the layers allow.

Layers that are read-only (a published snapshot on a read-only file system) are opened by the
caller, e.g. ``tunedb.open(path, create=False)``; this class never writes to them.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tunedb.index.contract import tables
from tunedb.index.contract.base import RecordStore, StoreStats
from tunedb.index.contract.checks import check_columns, check_runs_query, check_verdicts, validated_commit
from tunedb.index.contract.runs_codec import select_runs
from tunedb.index.model.batch import RecordBatch
from tunedb.index.model.keys import hash64, rid_hash
from tunedb.index.model.record import Record
from tunedb.index.model.schema import conform, empty_records
from tunedb.index.retrieval.mixin import RetrievalMixin

MODES = ("ordered", "union")


def concat_records(parts: list[pa.Table], columns: list[str] | None = None) -> pa.Table:
    """Tables of ``RECORD_SCHEMA`` concatenated in order, without repeated record_ids (the first
    occurrence stays).  ``columns``: the parts are projections with (at least) those columns,
    ``rid_hash`` among them; the result has exactly those, in that order."""
    parts = [(conform(p) if columns is None else p.select(columns)).replace_schema_metadata(None)
             for p in parts if p.num_rows]
    if not parts:
        return empty_records(columns)
    return tables.first_by_record_id(pa.concat_tables(parts))


@dataclass
class _View:
    """What is computed from bulk reads of every layer (see "Cost and freshness")."""

    refuted: set[str]          # record_ids refuted in any layer
    stale: set[str]            # record_ids stale in any layer holding them
    lower_rids: np.ndarray     # sorted rid hashes held by the layers other than the writable one
    copies: set[int]           # lookup_keys of the writable layer's records that a lower layer holds too

    @property
    def hidden(self) -> set[str]:
        return self.refuted | self.stale


class LayeredStore(RetrievalMixin, RecordStore):
    """Several record stores read as one (see the module docstring for the semantics).

    ``layers``: most specific first; ``writable``: index of the layer that takes writes (None: a
    read-only view); ``mode``: ``"ordered"`` or ``"union"``.  ``ValueError`` for no layers, a bad
    ``writable`` index or an unknown mode."""

    def __init__(self, layers: Sequence[RecordStore], *, writable: int | None = 0, mode: str = "ordered") -> None:
        layers = list(layers)
        if not layers:
            raise ValueError("a layered store needs at least one layer")
        for s in layers:
            if not isinstance(s, RecordStore):
                raise ValueError(f"layers must be RecordStores, got {type(s).__name__}")
        if writable is not None and (isinstance(writable, bool) or not isinstance(writable, int)
                                     or not 0 <= writable < len(layers)):
            raise ValueError(f"writable must be None or a layer index in 0..{len(layers) - 1}, got {writable!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.layers = layers
        self.writable = writable
        self.mode = mode
        self._lock = threading.RLock()
        self._view_cache: dict[str | None, _View] = {}  # target_key (None: every target) -> view
        self._cache: Path | None = None
        self.lookups = 0
        self.hits = 0

    # ------------------------------------------------------------------ helpers
    def _writer(self, what: str) -> RecordStore:
        if self.writable is None:
            raise ValueError(f"read-only: {what} needs a writable layer ({self.location} is opened read-only)")
        return self.layers[self.writable]

    @property
    def _lower(self) -> list[RecordStore]:
        return [s for i, s in enumerate(self.layers) if i != self.writable]

    def _forget_view(self) -> None:
        with self._lock:
            self._view_cache = {}

    def _view(self, tkey: str | None = None) -> _View:
        """What is hidden and copied, for the records of target ``tkey`` (None: every target;
        a record belongs to one target, so one target's view is exact for its queries and reads
        only that target's records of each layer)."""
        with self._lock:
            if tkey not in self._view_cache and None in self._view_cache:
                return self._view_cache[None]
            if tkey not in self._view_cache:
                refuted: set[str] = set()
                stale: set[str] = set()
                lower: list[np.ndarray] = []
                own: pa.Table | None = None
                for i, s in enumerate(self.layers):
                    refuted.update(r for r, v in s.verdicts().items() if v == "refuted")
                    every = s.records(tkey, columns=["record_id", "rid_hash", "lookup_key"])
                    rids = every.column("record_id")
                    if i != self.writable:
                        lower.append(every.column("rid_hash").to_numpy())
                    else:
                        own = every
                    live = s.records(tkey, include_stale=False, columns=["record_id"])
                    if live.num_rows != every.num_rows:
                        stale.update(set(rids.to_pylist()) - set(live.column("record_id").to_pylist()))
                lr = np.unique(np.concatenate(lower)) if lower else np.zeros(0, np.int64)
                copies: set[int] = set()
                if own is not None and own.num_rows and len(lr):
                    held = np.isin(own.column("rid_hash").to_numpy(), lr)
                    copies = set(own.column("lookup_key").to_numpy()[held].tolist())
                self._view_cache[tkey] = _View(refuted, stale, lr, copies)
            return self._view_cache[tkey]

    def _own_answer(self, layer: RecordStore, tkey: str, workload: Any, lk: int, view: _View) -> Record | None:
        """The writable layer's answer for lookup key ``lk`` among the records it holds of its own
        (not the copies of lower layers' records that ``mark``/``invalidate`` put there, which
        would otherwise be its latest measurement): the one committed last, None when hidden."""
        t = layer.records(tkey, workload, include_stale=False)
        if not t.num_rows:
            return None
        mask = (t.column("lookup_key").to_numpy() == lk) & ~np.isin(t.column("rid_hash").to_numpy(), view.lower_rids)
        rows = np.flatnonzero(mask)
        if not len(rows):
            return None
        committed = t.column("committed").cast(pa.int64()).to_numpy()[rows]
        i = int(rows[np.flatnonzero(committed == committed.max())[-1]])
        r = Record.from_row(t.slice(i, 1).to_pylist()[0])
        return None if r.record_id in view.hidden else r

    # ------------------------------------------------------------------ writing
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """Commit to the writable layer (``ValueError`` "read-only" without one).  Records a
        lower layer already holds are skipped (they are stored); returns how many were new."""
        w = self._writer("commit")
        records = validated_commit(records)
        if isinstance(records, RecordBatch):
            rh = records.table.column("rid_hash").to_numpy()
        else:
            rh = np.fromiter((rid_hash(r.record_id) for r in records), np.int64, len(records))
        if not len(rh):
            return 0
        held = np.zeros(len(rh), bool)
        if len(self.layers) > 1:
            tks = records.table.column("target_key").to_numpy(zero_copy_only=False) \
                if isinstance(records, RecordBatch) else np.array([r.target_key for r in records], dtype=object)
            for tk in set(tks.tolist()):
                lower = self._view(tk).lower_rids
                if len(lower):
                    at = tks == tk
                    held[at] = np.isin(rh[at], lower)
        if held.all():
            return 0
        if held.any():
            if isinstance(records, RecordBatch):
                records = RecordBatch(records.table.filter(pa.array(~held)), records.target_meta)
            else:
                records = [r for r, h in zip(records, held.tolist()) if not h]
        return w.commit(records)

    def _copy_up(self, table: pa.Table) -> int:
        """Commit the rows of ``table`` (records of lower layers) to the writable layer, unchanged."""
        if not table.num_rows:
            return 0
        return self._writer("copying records up").commit(RecordBatch.from_table(table))

    def mark(self, verdicts: dict[str, str]) -> int:
        """Store the verdicts in the writable layer; a record only lower layers hold is copied
        up first (see the module docstring).  ``ValueError`` (nothing stored) for a bad verdict
        or a record_id no layer holds."""
        check_verdicts(verdicts)
        w = self._writer("mark")
        if not verdicts:
            return 0
        want = set(verdicts)
        have = set(w.records().column("record_id").to_pylist()) & want
        missing = want - have
        found: list[pa.Table] = []
        for s in self._lower:
            if not missing:
                break
            t = s.records()
            t = tables.rows_with_ids(t, missing)
            found.append(t)
            missing -= set(t.column("record_id").to_pylist())
        if missing:
            raise ValueError(f"verdict for record {sorted(missing)[0]}: the store holds no such record")
        try:
            self._copy_up(concat_records(found))
            return w.mark(dict(verdicts))
        finally:
            self._forget_view()

    def verdicts(self) -> dict[str, str]:
        """The union of the layers' verdicts; the most specific layer's verdict of a record wins."""
        out: dict[str, str] = {}
        for s in reversed(self.layers):
            out.update(s.verdicts())
        if self.writable is not None:
            out.update(self.layers[self.writable].verdicts())
        return out

    def invalidate(self, target: Any) -> str:
        """Mark ``target`` stale through this handle: its records held by lower layers (and not
        by the writable one) are copied up, then the writable layer invalidates it (see the
        module docstring).  ``ValueError`` for a target no layer holds, or without a writable layer."""
        w = self._writer("invalidate")
        tkey = self._target_key(target)
        parts = [s.records(tkey) for s in self.layers]
        if not any(p.num_rows for p in parts):
            raise ValueError(f"unknown target {target!r}")
        own = set(parts[self.writable].column("record_id").to_pylist())
        lower = [p for i, p in enumerate(parts) if i != self.writable]
        up = concat_records(lower)
        up = tables.rows_with_ids(up, own, keep=False)
        try:
            self._copy_up(up)
            return w.invalidate(tkey)
        finally:
            self._forget_view()

    def compact(self) -> dict:
        """The writable layer's ``compact``."""
        return self._writer("compact").compact()

    def dedup(self) -> dict:
        """The writable layer's ``dedup`` (its own records only)."""
        try:
            return self._writer("dedup").dedup()
        finally:
            self._forget_view()

    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        """The writable layer's ``forget`` (its own records only; ``target`` by name is resolved
        across layers, and ``ValueError`` when the writable layer holds none of it)."""
        w = self._writer("forget")
        tkey = self._target_key(target) if target is not None else None
        try:
            return w.forget(keep_top=keep_top, older_than_days=older_than_days, target=tkey)
        finally:
            self._forget_view()

    # ------------------------------------------------------------------ point reads
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """See the module docstring (ordered: the first layer's visible answer; union: the best
        of the layers' visible answers)."""
        tkey = self._target_key(target)
        view = self._view(tkey)
        hidden = view.hidden
        answer: Record | None = None
        for i, s in enumerate(self.layers):
            r = s.lookup(tkey, workload, config)
            if i == self.writable and view.copies and (r is None or r.record_id in hidden):
                lk = hash64(tkey, self._other_key(workload, "workload"), self._other_key(config, "config"))
                if lk in view.copies:
                    r = self._own_answer(s, tkey, workload, lk, view)
            if r is None or r.record_id in hidden:
                continue
            if self.mode == "ordered":
                answer = r
                break
            if answer is None or (r.ok and (not answer.ok or r.cost < answer.cost)):
                answer = r
        with self._lock:
            self.lookups += 1
            self.hits += answer is not None
        return answer

    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """Ordered: the visible records of the first layer that has any for the entry; union:
        every layer's visible records, each record_id once (the most specific layer's copy)."""
        tkey = self._target_key(target)
        hidden = self._view(tkey).hidden
        out: list[Record] = []
        seen: set[str] = set()
        for s in self.layers:
            got = [r for r in s.entry_records(tkey, workload) if r.record_id not in hidden and r.record_id not in seen]
            if self.mode == "ordered" and got:
                return got
            seen.update(r.record_id for r in got)
            out.extend(got)
        return out

    # ------------------------------------------------------------------ tuning runs
    def add_run(self, summary: Mapping[str, Any]) -> str:
        """The writable layer's ``add_run`` (``ValueError`` "read-only" without one)."""
        return self._writer("add_run").add_run(summary)

    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """Every layer's runs, each run_id once (the most specific layer's summary wins, also
        when its ``kind`` differs), filtered by ``kind``, ordered and limited afterwards."""
        check_runs_query(kind, limit)
        seen: dict[str, dict] = {}
        for s in self.layers:
            for d in s.runs():
                seen.setdefault(d["run_id"], d)
        return select_runs(seen.values(), kind, limit)

    # ------------------------------------------------------------------ bulk reads
    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """Every layer's records, each record_id once (the most specific layer's row);
        ``include_stale=False`` leaves out records stale in any layer holding them.  A
        projection (``columns``) reads only those columns of each layer, plus ``rid_hash`` (to
        keep each record_id once) and ``record_id`` (for the stale filter)."""
        cols = check_columns(columns)
        read = None
        if cols is not None:
            read = cols + [c for c in ("rid_hash", "record_id") if c not in cols
                           and (c == "rid_hash" or not include_stale)]
        tkey = self._target_key(target) if target is not None else None
        t = concat_records([s.records(tkey, workload, columns=read) for s in self.layers], read)
        if not include_stale:
            t = tables.rows_with_ids(t, self._view(tkey).stale, keep=False)
        return t if cols is None else t.select(cols)

    def entries(self) -> pa.Table:
        """The entries of the layered view: exactly ``tables.entries`` of
        ``records(include_stale=False)`` (each record once, stale in any layer left out), built
        from the layers' own ``entries()`` where that is the same thing.  A target that only one
        layer holds (any record of it, stale ones included: ``targets()``) has that layer's rows
        as they are; a target several layers hold is summarised from its records (the layered
        ``records(target, include_stale=False)``: copies count once, staleness of any layer
        applies).  So a published snapshot layer answers from its entries files and fetches no
        part of a target only it holds.  Rows of entries that tie on (target_name,
        workload_key) come in the order the records would give them: by layer, then in each
        layer's own order (when a tie involves a target of several layers, from the records)."""
        if len(self.layers) == 1:
            return self.layers[0].entries()
        holders: dict[str, list[int]] = {}
        for i, s in enumerate(self.layers):
            for t in s.targets():
                holders.setdefault(t["target_key"], []).append(i)
        shared = sorted(tk for tk, at in holders.items() if len(at) > 1)
        pieces: list[pa.Table] = []
        for i, s in enumerate(self.layers):
            mine = [tk for tk, at in holders.items() if at == [i]]
            if not mine:
                continue
            e = s.entries()
            pieces.append(e.filter(pc.is_in(e.column("target_key"), value_set=pa.array(mine, pa.string()))))
        for tk in shared:
            pieces.append(tables.entries(self.records(tk, include_stale=False)))
        empty = tables.entries(empty_records())
        pieces = [p.select(empty.column_names).cast(empty.schema) for p in pieces if p.num_rows]
        if not pieces:
            return empty
        t = pa.concat_tables(pieces)
        order = [("target_name", "ascending"), ("workload_key", "ascending")]
        if shared:  # a tie that involves a target of several layers: its place among the records decides
            g = t.group_by(["target_name", "workload_key"], use_threads=False).aggregate(
                [("target_key", "count_distinct"), ("target_key", "list")])
            ties = g.filter(pc.greater(g.column("target_key_count_distinct"), 1)).column("target_key_list")
            if set(shared) & {k for keys in ties.to_pylist() for k in keys}:
                return tables.entries(self.records(include_stale=False))
        return t.sort_by(order)

    def find_target(self, name_or_key: str) -> dict | None:
        """The first layer's answer (most specific first)."""
        for s in self.layers:
            found = s.find_target(name_or_key)
            if found is not None:
                return found
        return None

    def __len__(self) -> int:
        """Distinct record_ids across layers (stale ones included)."""
        if len(self.layers) == 1:
            return len(self.layers[0])
        hs = [s.records().column("rid_hash").to_numpy() for s in self.layers]
        return int(len(np.unique(np.concatenate(hs))))

    def stats(self) -> StoreStats:
        """Counts of the layered view (each record once); files and size summed over layers;
        stale_targets: the union of the layers'; offline when any layer answered offline."""
        per = [s.stats() for s in self.layers]
        every = self.records()
        live = self.records(include_stale=False)
        return StoreStats(
            records=every.num_rows,
            targets=len(pc.unique(live.column("target_key"))) if live.num_rows else 0,
            workloads=len(pc.unique(live.column("workload_key"))) if live.num_rows else 0,
            entries=len(pc.unique(live.column("entry_key"))) if live.num_rows else 0,
            files=sum(p.files for p in per), size_bytes=sum(p.size_bytes for p in per),
            stale_targets=sorted({k for p in per for k in p.stale_targets}),
            lookups=self.lookups, hits=self.hits, location=self.location, offline=any(p.offline for p in per))

    def size_bytes(self) -> int:
        """The layers' sizes summed (as :meth:`stats`)."""
        return sum(int(s.size_bytes()) for s in self.layers)

    def stale_targets(self) -> list[str]:
        """The union of the layers' stale targets, sorted (as :meth:`stats`)."""
        return sorted({k for s in self.layers for k in s.stale_targets()})

    # ------------------------------------------------------------------ derived data, life cycle
    def cache_dir(self) -> Path:
        """``<writable layer's cache_dir>/layered/<key>`` (a private temp directory instead of the
        writable layer's when read-only); the key hashes the mode and the layers' locations."""
        key = hashlib.blake2b("\0".join([self.mode, *(s.location for s in self.layers)]).encode(),
                              digest_size=8).hexdigest()
        if self.writable is not None:
            return Path(self.layers[self.writable].cache_dir()) / "layered" / key
        with self._lock:
            if self._cache is None:
                self._cache = Path(tempfile.mkdtemp(prefix="tunedb-layered-"))
                weakref.finalize(self, shutil.rmtree, str(self._cache), True)
            return self._cache / key

    def change_token(self) -> tuple:
        """The mode, the writable index and every layer's token."""
        return (self.mode, self.writable, *(s.change_token() for s in self.layers))

    @property
    def location(self) -> str:
        """The layers' locations joined with ``" + "`` (most specific first)."""
        return " + ".join(s.location for s in self.layers)

    @property
    def path(self) -> Path:
        """The writable layer's ``path`` (for callers written for a Parquet directory);
        ``AttributeError`` when the writable layer has none or there is no writable layer."""
        if self.writable is None or not hasattr(self.layers[self.writable], "path"):
            raise AttributeError(f"{self.location} has no writable directory")
        return self.layers[self.writable].path

    def refresh(self) -> None:
        """Refresh every layer and recompute what is hidden."""
        for s in self.layers:
            s.refresh()
        self._forget_view()

    def close(self) -> None:
        """Close every layer (each stays usable, as the contract says)."""
        errors: list[BaseException] = []
        for s in self.layers:
            try:
                s.close()
            except Exception as e:  # noqa: BLE001 - every layer is closed; the first error is raised
                errors.append(e)
        if errors:
            raise errors[0]


__all__ = ["LayeredStore", "MODES", "concat_records"]
