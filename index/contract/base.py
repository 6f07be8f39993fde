"""The record store contract: what every tunedb backend does, stated once.

A *record store* holds tuning records (:class:`~tunedb.index.model.record.Record`): measurements of a
``config`` of a ``workload`` on a ``target``.  Search, measurement, migration, the cost model, the
report and the TVM database talk to a store only through this class, so any backend that
implements it plugs in.  Backends: :class:`tunedb.index.parquet.store.ParquetStore` (a Parquet
directory, the embedded default and the truth), :class:`tunedb.index.memory.store.MemoryStore`
(in-process, nothing on disk: tests, notebooks, evaluation loops),
:class:`tunedb.index.postgres.store.PostgresStore` (a PostgreSQL database a team shares) and
:class:`tunedb.index.snapshot.store.SnapshotStore` (a published snapshot, read-only); views
over other stores: :class:`tunedb.index.views.layered.LayeredStore` (several read as one) and
:class:`tunedb.index.views.trust.TrustedStore` (only trusted sources answer).  ``tunedb.open``
(``tunedb.index.opener``) picks one by location.

Arguments
    ``target`` may be a target dict, a :class:`Record` (its target is used), a ``target_key``
    (32 hex digits) or a ``target_name`` known to the store; ``workload`` a workload dict, a
    Record or a ``workload_key``; ``config`` a config dict or a ``config_key``.  Dicts are
    compared by canonical JSON (``tunedb.index.model.keys``), so key order and ``1.0`` vs ``1`` do not
    matter while ``True`` and ``1`` stay apart.  A name or key the store does not know raises
    ``ValueError`` where the method says so.

Units
    Costs are seconds per run of the kernel (``Record.costs``, one per repeat; ``Record.cost`` is
    their mean); ``compile_s`` and ``wall_s`` are seconds; timestamps are UTC.

The cost of a config
    One record is one measurement.  What a config costs is estimated over all its records by
    one function, ``tunedb.index.model.estimate`` (median of per-record medians with a confidence
    interval); :meth:`best_costs` and :meth:`cost` return it and every surface shows it.

Errors
    ``ValueError`` for bad input (an invalid record, an unknown target where one is required),
    with one line saying why; ``OSError`` when the medium fails (disk full, permission): the
    failed call has then written nothing that a later read will see.

Durability
    :meth:`commit` is all-or-nothing and durable when it returns: a crash (even SIGKILL) after
    the return never loses the records; a crash before it leaves none or all of them.

Concurrency
    A handle may be shared by threads (every method is thread-safe).  Whether several processes
    may write one store is the backend's promise (the Parquet directory: yes, any number; the
    memory store lives in one process).  A handle sees other processes' commits after
    :meth:`refresh`.

Record identity
    ``record_id`` identifies a measurement: committing a record whose id is already stored is a
    no-op for reads (the first one stays), so retried and re-imported commits never double-count.
    A measurement is of one target, so ids are compared among that target's records (the
    Parquet store indexes each target apart); tunedb never gives two targets' records one id.

Provenance and verdicts
    Every record says where it came from: ``source`` (``measured``, ``replay``,
    ``imported:<format>``, ``migrated:<target>``), ``origin`` (the imported file, the store it was
    copied from; empty for a measurement), ``host`` (the machine whose tunedb created it) and
    ``tunedb_version``.  Records from other people are not trusted blindly: ``tunedb verify``
    re-measures them on the target and stores a *verdict* per record_id (:meth:`mark`).  A
    ``refuted`` record (its cost did not reproduce) never answers :meth:`lookup` or
    :meth:`best` again and never counts in :meth:`cost`; it stays in :meth:`records` (nothing is deleted) and in
    :meth:`verdicts`.

Tuning runs
    Beside its records a store keeps the *summaries* of the tuning runs that produced them
    (:meth:`add_run`, :meth:`runs`): one JSON object per ``run_id`` (what the tuner was asked,
    what it found, how long it took), re-saved as the run progresses (the latest save of a
    ``run_id`` replaces the earlier ones).  Runs are not records: adding one changes no record
    read, ``len``, :meth:`change_token` or :meth:`stats`, and ``tunedb copy`` does not copy them.

Writing a backend
    The checks every backend shares (the refusals stated here, one ``ValueError`` text for all)
    are ``tunedb.index.contract.checks``; the encoding of run summaries is ``tunedb.index.contract.runs_codec``.
    ``tunedb.index.testing`` is the contract suite: subclass its ``RecordStoreTests`` (or
    ``ReadOnlyStoreTests``) with a fixture that opens your store, and pytest runs every test of
    the contract against it.  ``CONTRIBUTING.md`` ("A store backend") has a complete one-file
    backend that passes the suite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunedb.index.contract.answers import Lookups
from tunedb.index.contract.checks import VERDICTS, is_key
from tunedb.index.contract.runs_codec import MAX_RUN_BYTES, RunWarning

if TYPE_CHECKING:
    import pyarrow as pa

    from tunedb.index.model.batch import RecordBatch
    from tunedb.index.model.estimate import ConfigCost, CostEstimate
    from tunedb.index.model.record import Record


@dataclass(frozen=True)
class Entry:
    """One (target, workload) of a store and what it holds.  ``best_cost`` in seconds (None
    when no record is ``ok``)."""

    target_key: str
    target_name: str
    target: dict
    workload_key: str
    family: str
    workload: dict
    records: int
    ok_records: int
    best_cost: float | None


@dataclass(frozen=True)
class StoreStats:
    """What ``tunedb stats`` shows.  ``size_bytes`` of the store's own storage (0 in memory);
    ``lookups``/``hits`` count this handle's :meth:`RecordStore.lookup` calls; ``offline``: the
    store answered from its local cache because its server could not be reached (a published
    snapshot; False for every local backend)."""

    records: int
    targets: int
    workloads: int
    entries: int
    files: int
    size_bytes: int
    stale_targets: list[str]
    lookups: int
    hits: int
    location: str
    offline: bool = False

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["hit_rate"] = self.hit_rate
        return d


class RecordStore(ABC):
    """The contract of a tuning-record store (see the module docstring for arguments, units,
    errors, durability and concurrency).  Subclasses implement the abstract methods; the others
    have correct (if not the fastest) defaults built on them."""

    #: this handle's lookups and the ones that found a record (see :meth:`stats`)
    lookups: int = 0
    hits: int = 0
    #: whether ``best_costs`` answers computed by one process are kept for the next (derived
    #: files, invalidated when the entry can change): ``tunedb import`` then ranks the entries it
    #: imported, so the first tuning run after it reads their rankings
    keeps_rankings: bool = False

    # ------------------------------------------------------------------ keys of arguments
    def _target_key(self, target: Any) -> str:
        """The target_key of a target argument (a dict, a Record, a key, or a name this store
        holds: ``ValueError`` for an unknown name).  Backends with faster paths override it."""
        from tunedb.index.model.keys import canonical_json, key_of_text
        from tunedb.index.model.record import Record

        if isinstance(target, Record):
            return target.target_key
        if isinstance(target, str):
            if is_key(target):
                return target
            found = self.find_target(target)
            if found is None:
                raise ValueError(f"unknown target {target!r}")
            return key_of_text(canonical_json(found))
        return key_of_text(canonical_json(target))

    @staticmethod
    def _other_key(value: Any, what: str) -> str:
        """The workload_key (``what="workload"``) or config_key of an argument (a dict, a Record
        or a key)."""
        from tunedb.index.model.keys import canonical_json, key_of_text
        from tunedb.index.model.record import Record

        if isinstance(value, Record):
            return value.workload_key if what == "workload" else value.config_key
        if is_key(value):
            return value
        return key_of_text(canonical_json(value))

    # ------------------------------------------------------------------ writing
    @abstractmethod
    def commit(self, records: Record | RecordBatch | Iterable[Record]) -> int:
        """Store ``records`` (one Record, a RecordBatch or an iterable of Records).

        Every record is validated first: ``ValueError`` naming the first bad record and nothing
        stored.  Returns how many were new (records whose id is already stored are skipped).
        Durable and visible to this handle's reads when it returns."""

    @abstractmethod
    def invalidate(self, target: Any) -> str:
        """Mark ``target`` stale (e.g. after a toolchain upgrade): records committed before now
        stop answering :meth:`lookup` and :meth:`best` and drop out of ``include_stale=False``
        reads; later commits answer again.  Returns the target_key; ``ValueError`` for a target
        the store does not hold."""

    @abstractmethod
    def compact(self) -> dict:
        """Reorganise storage for faster reads; never changes what reads return.  Returns counts
        (at least ``rows_before`` and ``rows_after``)."""

    @abstractmethod
    def dedup(self) -> dict:
        """Remove repeated identical measurements (same target, workload, config, status and
        costs; the earliest stays).  Returns counts including ``removed``."""

    @abstractmethod
    def forget(self, *, keep_top: int | None = None, older_than_days: float | None = None,
               target: Any = None) -> dict:
        """Retention.  ``target``: only that target (all its records unless other options are
        given); ``keep_top``: per entry keep the k best ``ok`` records (failed ones stay: they stop
        retries); ``older_than_days``: drop records measured longer ago.  ``ValueError`` without
        any option, for ``keep_top < 0`` or an unknown target.  Returns counts including
        ``removed``."""

    @abstractmethod
    def mark(self, verdicts: dict[str, str]) -> int:
        """Store a verdict per record_id: ``{"<record_id>": "verified" | "refuted"}`` (see
        "Provenance and verdicts" in the module docstring).  The latest verdict of a record wins.
        ``ValueError`` (nothing stored) for a verdict that is not one of :data:`VERDICTS` or a
        record_id the store does not hold.  Durable when it returns, like :meth:`commit`; changes
        :meth:`change_token`.  Returns how many verdicts were stored."""

    @abstractmethod
    def verdicts(self) -> dict[str, str]:
        """record_id -> its latest verdict, for every record that has one."""

    # ------------------------------------------------------------------ tuning runs
    @abstractmethod
    def add_run(self, summary: Mapping[str, Any]) -> str:
        """Store the summary of one tuning run (see "Tuning runs" in the module docstring);
        returns its ``run_id``.

        ``summary`` is a JSON-able mapping with a non-empty str ``"kind"`` (e.g. ``"tune"``).
        Its ``"run_id"`` (32 lowercase hex digits) names the run; absent or None, a new one
        (uuid4 hex) is made.  The stored summary is a copy of ``summary`` with ``"run_id"`` and
        ``"stored"`` (when this call stored it: ISO-8601 UTC with microseconds,
        ``2026-12-01T18:40:00.123456+00:00``) set; ``summary`` itself is not changed.  Adding a
        ``run_id`` that is stored already replaces that summary (a run saved part-way and again
        at its end).  ``ValueError`` (one line, nothing stored) for anything :func:`~tunedb.index.contract.runs_codec.prepare_run`
        refuses: not a mapping, no str ``kind``, a bad ``run_id``, not strict JSON (NaN or
        infinity, a non-str key, a value JSON has no form for) or over :data:`MAX_RUN_BYTES`
        encoded.  All-or-nothing and durable when it returns, like :meth:`commit`; changes
        neither :meth:`change_token` nor any record read."""

    @abstractmethod
    def runs(self, kind: str | None = None, *, limit: int | None = None) -> list[dict]:
        """The stored run summaries (only those whose ``"kind"`` is ``kind`` when given), oldest
        first by ``"stored"`` (ties by ``run_id``); ``limit``: only the newest ``limit`` of them
        (still oldest first).  New dicts every call (as JSON decodes them: lists, not tuples).
        A summary the backend cannot read (a torn or foreign file) is left out with a warning
        (``warnings.warn``), never an exception.  ``ValueError`` for a ``kind`` that is not a
        str or a ``limit`` that is not an int >= 0 (see :func:`~tunedb.index.contract.checks.check_runs_query`)."""

    # ------------------------------------------------------------------ point reads
    @abstractmethod
    def lookup(self, target: Any, workload: Any, config: Any) -> Record | None:
        """The stored measurement of (target, workload, config), or None.  Failed measurements
        answer too (they are never retried); when a triple was measured more than once the one
        committed last answers; stale records never answer, and when the one that would answer
        is ``refuted`` (:meth:`mark`) the answer is None (the caller measures again, and that
        measurement answers from then on).  Counts in ``lookups``/``hits``."""

    def lookup_many(self, target: Any, workload: Any, configs: Iterable[Any]) -> list[Record | None]:
        """:meth:`lookup` of each config of one (target, workload), in order."""
        return [self.lookup(target, workload, c) for c in configs]

    def lookup_batch(self, target: Any, workload: Any, configs: Iterable[Any]) -> Lookups:
        """:meth:`lookup` of a population of configs of one (target, workload) in one call, as
        :class:`~tunedb.index.contract.answers.Lookups`: which configs have an answer (``found``, one bool
        array), each answer's Record built when it is read.  A backend with a faster batch path
        overrides this; the answers are :meth:`lookup_many`'s."""
        return Lookups.of(self.lookup_many(target, workload, configs))

    @abstractmethod
    def entry_records(self, target: Any, workload: Any) -> list[Record]:
        """Every record of (target, workload) that a cost is estimated from: ``ok``, not stale,
        not ``refuted``; any order.  ``[]`` when there are none.  What :meth:`best`,
        :meth:`best_costs` and :meth:`cost` are computed from (``tunedb.index.model.estimate``)."""

    def best_costs(self, target: Any, workload: Any, k: int = 1) -> list[ConfigCost]:
        """The ``k`` best configs of (target, workload) by the one estimator
        (``tunedb.index.model.estimate``: the median of the values of each config's ok records -- a
        record's value is its tuner's statistic, the mean for Kernel Tuner/TVM records, else the median -- confirmation re-measurements only once there are enough of them), in its
        ranking order (confirmed estimates first, then by cost, then config_key:
        ``tunedb.index.model.estimate.rank_key``), each with its interval and a representative
        record.  ``[]`` when there are none or ``k <= 0``."""
        from tunedb.index.model.estimate import rank

        if k <= 0:
            return []
        return rank(self.entry_records(target, workload), k)

    def best_costs_many(self, pairs: Iterable[tuple[Any, Any]], k: int = 1) -> list[list[ConfigCost]]:
        """:meth:`best_costs` of each (target, workload) of ``pairs``, in order: one list per
        pair, equal to ``best_costs(target, workload, k)``, raising what it raises (``[]`` for a
        pair without records; every list is ``[]`` when ``k <= 0``).  For callers
        that need the best configs of several entries at once (the nearest entries of a query);
        a backend with a faster batch path overrides this, with the same answers."""
        return [self.best_costs(target, workload, k) for target, workload in pairs]

    def best(self, target: Any, workload: Any, k: int = 1) -> list[Record]:
        """The representative records of :meth:`best_costs` (one per config, best first).  A
        record's own ``cost`` is one measurement: show ``best_costs(...)[i].estimate`` (or
        :meth:`cost`) to a user, never ``record.cost``."""
        return [c.record for c in self.best_costs(target, workload, k)]

    def cost(self, target: Any, workload: Any, config: Any) -> CostEstimate | None:
        """The estimated cost of one config (``tunedb.index.model.estimate``), None when it has no
        ok, live, unrefuted record."""
        from tunedb.index.model.estimate import estimate

        ck = self._other_key(config, "config")
        return estimate(r for r in self.entry_records(target, workload) if r.config_key == ck)

    # ------------------------------------------------------------------ bulk reads
    @abstractmethod
    def records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True,
                columns: Sequence[str] | None = None) -> pa.Table:
        """Every record (optionally of one target and/or workload) as a new Arrow table with the
        columns of ``tunedb.index.model.schema.RECORD_SCHEMA`` (JSON fields as canonical JSON text),
        one row per record_id.  Row order is the backend's (the Parquet store groups rows by
        target; the memory store keeps commit order): sort by ``committed`` if order matters.

        ``columns`` (a projection): only those ``RECORD_SCHEMA`` columns, exactly those -- no
        column is always there, the key columns neither -- in the order given, with the types
        of ``RECORD_SCHEMA``; the rows (which, how many, their order) are those of the same call
        without ``columns``, so ``records(..., columns=c)`` equals ``records(...).select(c)``.
        Backends read only what the projection, the filters and the de-duplication need (the
        Parquet store reads only those columns of its files; PostgreSQL selects only them), so
        a narrow projection of a large store is much cheaper than a full read.  ``None`` (the
        default): every column.  ``ValueError`` (one line) for a name that is not a
        ``RECORD_SCHEMA`` column, a name given twice, an empty list or a bare ``str`` (see
        :func:`~tunedb.index.contract.checks.check_columns`)."""

    def iter_records(self, target: Any = None, workload: Any = None, *, include_stale: bool = True
                     ) -> Iterator[Record]:
        """The rows of :meth:`records` as Records."""
        from tunedb.index.model.record import Record

        for row in self.records(target, workload, include_stale=include_stale).to_pylist():
            yield Record.from_row(row)

    def entries(self) -> pa.Table:
        """One row per (target, workload) of the live (non-stale) records, as an Arrow table:
        target_key, target_name, target, workload_key, family, workload (JSON text), records,
        ok_records, best_cost (seconds, null when none ok); sorted by (target_name, workload_key)."""
        from tunedb.index.contract import tables

        return tables.entries(self.records(include_stale=False))

    def entry_list(self) -> list[Entry]:
        """:meth:`entries` as :class:`Entry` objects (target and workload parsed)."""
        import json

        return [Entry(**{**row, "target": json.loads(row["target"]), "workload": json.loads(row["workload"])})
                for row in self.entries().to_pylist()]

    def targets(self) -> list[dict]:
        """Every target holding records: ``target_key``, ``target_name``, ``target`` (dict) and
        ``records`` (every stored record of it, stale ones included, as ``records()``), sorted by
        (target_name, target_key)."""
        import json

        t = self.records()
        counts: dict[str, list] = {}
        for tk, name, tj in zip(t.column("target_key").to_pylist(), t.column("target_name").to_pylist(),
                                t.column("target").to_pylist()):
            c = counts.setdefault(tk, [name, tj, 0])
            c[2] += 1
        out = [{"target_key": tk, "target_name": n, "target": json.loads(tj), "records": c}
               for tk, (n, tj, c) in counts.items()]
        return sorted(out, key=lambda d: (d["target_name"], d["target_key"]))

    def find_target(self, name_or_key: str) -> dict | None:
        """The target dict of a stored target, by ``target_key``, ``target_name`` (the latest
        when several share a name) or a unique key prefix of at least 6 digits; else None."""
        ts = self.targets()
        for t in ts:
            if t["target_key"] == name_or_key:
                return t["target"]
        named = [t["target"] for t in ts if t["target_name"] == name_or_key]
        if named:
            return named[-1]
        if len(name_or_key) >= 6:
            pref = [t["target"] for t in ts if t["target_key"].startswith(name_or_key)]
            if len(pref) == 1:
                return pref[0]
        return None

    @abstractmethod
    def __len__(self) -> int:
        """Number of stored records (stale ones included)."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Counts of the store and of this handle's lookups (see :class:`StoreStats`)."""

    def size_bytes(self) -> int:
        """Bytes the store's own storage takes (its record, journal and mark files or tables; 0
        in memory): ``stats().size_bytes``, which a backend answers without counting records.
        Derived caches (:meth:`cache_dir`) are not counted."""
        return int(self.stats().size_bytes)

    def stale_targets(self) -> list[str]:
        """The keys of the targets the store has invalidated (:meth:`invalidate`), sorted:
        ``stats().stale_targets``, which a backend answers without counting records."""
        return sorted(self.stats().stale_targets)

    # ------------------------------------------------------------------ derived data
    @abstractmethod
    def cache_dir(self) -> Path:
        """A directory this store's derived, rebuildable caches may use (the vector index,
        persisted models).  Deleting it loses nothing; it is created on demand."""

    @abstractmethod
    def change_token(self) -> tuple:
        """A cheap value that changes whenever what reads return may have changed (commits,
        maintenance, invalidations, here or - after :meth:`refresh` - in other processes).
        Caches of derived data compare it to decide whether they are stale."""

    # ------------------------------------------------------------------ life cycle
    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store lives, as a user would name it (a directory path, ``memory:...``)."""

    def refresh(self) -> None:  # noqa: B027 - a no-op by default, not abstract
        """See other processes' commits (a no-op for a store only this process writes)."""

    def close(self) -> None:  # noqa: B027 - a no-op by default, not abstract
        """Finish pending background work (everything committed stays durable either way); the
        handle stays usable."""

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["RecordStore", "Entry", "StoreStats", "VERDICTS", "MAX_RUN_BYTES", "RunWarning", "is_key"]
