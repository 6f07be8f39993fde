"""Replay backend: measurements answered from a recorded Kernel Tuner cache file.

Modelled on Kernel Tuner's simulation runner: the file holds what a real device measured for
every config of a space; ``measure`` looks the config up instead of running it.  Records
produced here have source ``replay`` and ``meta.replay_file`` (the file's name).  A config absent
from the file (or outside the space) is status ``invalid``; failures recorded in the file keep
their status.

Isolation: a replay answers only from its file.  :class:`ReplayStore` is the view of the store a
replay tunes on (``tunedb tune --replay``): its look-ups accept only records that came from the
replayed file (see :meth:`ReplayStore.from_file`), so records other files left on the same
target (several GPUs' caches imported as one device) are never a cache hit; everything else,
writes included, is the wrapped store's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tunedb.index.contract.base import RecordStore
from tunedb.index.model.keys import canonical_json
from tunedb.index.model.record import Record
from tunedb.index.views.filtered import FilteredStore
from tunedb.transfer.measure.backend import ReplayBackend
from tunedb.transfer.space import Space


class LazyResults(Mapping):
    """config JSON -> Record of a replayed file, each Record built the first time it is read.

    ``index`` maps a config's canonical JSON to the cache key whose entry answers it (the last
    such entry, as a dict filled in file order keeps it), in the order of first occurrence;
    ``build(key)`` makes the entry's Record (the importer's own parse of that one entry).  Not
    thread-safe beyond a Record built twice when two threads read it first at once."""

    def __init__(self, index: dict[str, str], build: Callable[[str], Record | None]) -> None:
        self.index = index
        self.build = build
        self.made: dict[str, Record] = {}

    def __getitem__(self, config_json: str) -> Record:
        rec = self.made.get(config_json)
        if rec is None:
            rec = self.made[config_json] = self.build(self.index[config_json])
        return rec

    def __iter__(self) -> Iterator[str]:
        return iter(self.index)

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, config_json: object) -> bool:
        return config_json in self.index


_INT_BOUND = 2**63
_TEXT_LIMIT = 4096
_NUMBER_TYPES = frozenset({float, int})


def _plain_value(v: Any) -> bool:
    """Whether ``v`` is a value no step of the importer's parse can reject: a finite float, an
    int of at most 63 bits, a bool, None, a short ASCII string, or a short list of finite
    floats/ints.  Anything else (nested objects, non-ASCII text that may hold a lone surrogate,
    NaN) is left to the full parse."""
    t = type(v)
    if t is float:
        return math.isfinite(v)
    if t is int:
        return -_INT_BOUND < v < _INT_BOUND
    if t is str:
        return len(v) <= _TEXT_LIMIT and v.isascii()
    if t is list:
        if len(v) > _TEXT_LIMIT:
            return False
        kinds = set(map(type, v))
        if not kinds <= _NUMBER_TYPES:
            return False
        return all(map(math.isfinite, v)) and (int not in kinds or all(-_INT_BOUND < x < _INT_BOUND for x in v))
    return t is bool or v is None


def plain_values(values: Iterable[Any]) -> bool:
    """Whether every one of ``values`` is plain (``all(map(_plain_value, values))``, with the
    common scalars checked inline: a cache file has some twenty values per entry)."""
    isfinite = math.isfinite
    for v in values:
        t = type(v)
        if t is float:
            if not isfinite(v):
                return False
        elif t is int:
            if not -_INT_BOUND < v < _INT_BOUND:
                return False
        elif t is str:
            if len(v) > _TEXT_LIMIT or not v.isascii():
                return False
        elif not _plain_value(v):
            return False
    return True


def plain_status(entry: dict) -> str:
    """``entry_result(entry)[1]`` (the importer's status of a cache entry; ValueError where it
    raises one) for an entry whose values all passed :func:`_plain_value`, without building its
    costs: a time or times list of plain numbers is checked here, anything else by
    ``entry_result`` itself."""
    from tunedb.transfer.tuners.kernel_tuner.cachefile import ERROR_STATUS, FAILED_TIME_MS, entry_result

    t = entry.get("time")
    if type(t) is str:
        return ERROR_STATUS.get(t, "runtime_error")
    times = entry.get("times")
    vals = times if type(times) is list and times else ([t] if t is not None else None)
    # plain values: floats are finite and ints bounded, so only the types and the sign are left
    if vals is None or not set(map(type, vals)) <= _NUMBER_TYPES or min(vals) < 0:
        return entry_result(entry)[1]
    return "runtime_error" if max(vals) >= FAILED_TIME_MS else "ok"


class ReplayData:
    """One cache file: its device target, kernel workload, space and recorded results.

    ``results`` maps a config's canonical JSON to the Record of its entry, exactly what the
    Kernel Tuner importer makes of the file (``parse_loaded``; where two entries name one config,
    the later one).  For a plain cache file the Records are built when first read: opening the
    file reads each entry's parameters and status only (for an entry whose values the importer
    could reject, the entry's Record is built at once, so which entries count and ``skipped`` are
    the importer's).  Files with a ``tunedb`` section (a tunedb export) or in the T4 format are
    parsed whole when opened.  An entry without a timestamp gets the time its Record is built, as
    the importer stamps it when it parses.  ``doc``: the loaded file (``load_cache``)."""

    def __init__(self, path: str | Path, device: str | None = None):
        from tunedb.transfer.tuners.kernel_tuner.cachefile import load_cache

        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"replay file {self.path} does not exist")
        doc = load_cache(self.path)  # read once: the records and the space come from the same document
        self.device = device
        self.doc = doc
        base = self._base_space(doc)
        keys = self._plain_keys(doc, base)
        valid, first = self._index(doc, keys) if keys is not None else self._parse_all(doc)
        if first is None:
            raise ValueError(f"replay file {self.path} holds no usable entries")
        self.target: dict = dict(first.target)
        self.workload: dict = dict(first.workload)
        if base is None:
            from tunedb.transfer.tuners.kernel_tuner.cachefile import space_from_cache

            base = space_from_cache(doc)  # raises its own error
        self.space: Space = Space(knobs=base.knobs, constraints=base.constraints, finite=tuple(valid))

    @staticmethod
    def _base_space(doc: Mapping[str, Any]) -> Space | None:
        """The file's space without its entries' validity (``space_from_cache``), None when the
        file names no parameters."""
        from tunedb.transfer.tuners.kernel_tuner.cachefile import space_from_cache

        try:
            return space_from_cache(doc)
        except ValueError:
            return None

    @staticmethod
    def _plain_keys(doc: Mapping[str, Any], base: Space | None) -> list[str] | None:
        """The parameter names of a plain cache file (a ``cache`` object, no ``tunedb``
        section, parameters named), else None (the file is parsed whole)."""
        if base is None or not isinstance(doc.get("cache"), dict) or isinstance(doc.get("tunedb"), dict):
            return None
        return [k.name for k in base.knobs]

    def _parse_all(self, doc: Mapping[str, Any]) -> tuple[list[dict], Record | None]:
        """Every entry parsed at once: (configs of the non-invalid results, first Record)."""
        from tunedb.transfer.interop import ImportIssue
        from tunedb.transfer.tuners.kernel_tuner.cachefile import parse_loaded

        results: dict[str, Record] = {}
        bad = 0
        first: Record | None = None
        for item in parse_loaded(doc, self.path, device=self.device):
            if isinstance(item, ImportIssue):
                bad += 1
                continue
            first = first or item
            results[item.config_json] = item  # == canonical_json(item.config): the record's own text
        self.skipped = bad
        self.results: Mapping[str, Record] = results
        return [r.config for r in results.values() if r.status != "invalid"], first

    def entry_record(self, key: str) -> Record | None:
        """The importer's Record of the cache entry ``key`` (None when it rejects the entry)."""
        from tunedb.transfer.interop import ImportIssue
        from tunedb.transfer.tuners.kernel_tuner.cachefile import parse_loaded

        one = {**self.doc, "cache": {key: self.doc["cache"][key]}}
        for item in parse_loaded(one, self.path, device=self.device):
            return None if isinstance(item, ImportIssue) else item
        return None

    def _index(self, doc: Mapping[str, Any], keys: list[str]) -> tuple[list[dict], Record | None]:
        """Read each entry's config and status (the importer's, see :func:`_plain_value`);
        ``results`` becomes a :class:`LazyResults`.  (configs of the non-invalid results, first
        Record)."""
        from tunedb.index.model.keys import canonical_json_normalised, normalise

        key_set = frozenset(keys)
        index: dict[str, str] = {}
        state: dict[str, tuple[str, dict]] = {}  # config JSON -> (status, config) of its last entry
        built: dict[str, Record] = {}
        bad = 0
        first_key: str | None = None
        for key, entry in doc["cache"].items():
            rec = None
            try:
                if not (type(entry) is dict and entry.keys() >= key_set and type(key) is str
                        and len(key) <= _TEXT_LIMIT and key.isascii() and plain_values(entry.values())):
                    raise ValueError("left to the importer")
                status = plain_status(entry)
                config = normalise({k: entry[k] for k in keys}, "config")
            except (ValueError, TypeError, OverflowError):
                rec = self.entry_record(key)
                if rec is None:
                    bad += 1
                    continue
                status, config = rec.status, rec.config
            cj = canonical_json_normalised(config)
            index[cj] = key
            state[cj] = (status, config)
            if rec is not None:
                built[cj] = rec
            else:
                built.pop(cj, None)
            if first_key is None:
                first_key = key
        self.skipped = bad
        lazy = LazyResults(index, self.entry_record)
        lazy.made.update(built)
        self.results = lazy
        first = None if first_key is None else self.entry_record(first_key)
        return [c for s, c in state.values() if s != "invalid"], first

    def optimum(self) -> tuple[dict, float]:
        """(config, cost in seconds) of the fastest ok entry by the one estimator (each entry is
        one record: the median of its repeats, ``tunedb.index.model.estimate``): the true optimum of
        the device as every surface of tunedb measures it."""
        from tunedb.index.model.estimate import estimate

        ok = [(estimate([r]), r) for r in self.results.values() if r.status == "ok" and r.costs]
        est, best = min(ok, key=lambda er: (er[0].value, er[1].config_key))
        return dict(best.config), float(est.value)

    def costs_ok(self) -> list[float]:
        """Every ok entry's cost (seconds, the estimator's: the median of its repeats)."""
        from tunedb.index.model.estimate import record_value

        return [record_value(r) for r in self.results.values() if r.status == "ok" and r.costs]


class KernelTunerReplayBackend(ReplayBackend):
    """``measure`` answers from a ReplayData; target and workload are whatever the caller tunes."""

    def __init__(self, data: ReplayData):
        self.data = data

    def space(self, workload: Mapping[str, Any] | None = None) -> Space:
        return self.data.space

    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        t0 = time.perf_counter()
        rec = self.data.results.get(canonical_json(dict(config)))
        if rec is None or not self.data.space.is_valid(dict(config)):
            status = rec.status if rec is not None and rec.status != "ok" else "invalid"
            return Record(target, workload, dict(config), [], status=status,
                          error="" if rec is not None else "config is not in the replayed data set",
                          source="replay", wall_s=time.perf_counter() - t0,
                          meta={"backend": self.name, "replay_file": self.data.path.name})
        return Record(target, workload, dict(config), list(rec.costs), status=rec.status, error=rec.error,
                      compile_s=rec.compile_s, wall_s=time.perf_counter() - t0, source="replay",
                      meta={"backend": self.name, "replay_file": self.data.path.name})


class ReplayStore(FilteredStore):
    """A view of ``inner`` (any ``RecordStore``) whose look-ups answer only with records of the
    replayed file ``data`` (:meth:`from_file`): a
    :class:`~tunedb.index.views.filtered.FilteredStore`.  Filtered: ``lookup``, ``lookup_many``,
    ``entry_records`` and ``best``/``best_costs``/``cost``; everything else (commits,
    ``records``, ``nearest``, run summaries, ...) is ``inner``'s.  Seeds and the cost model may
    still use other records (they only choose which configs to evaluate); an evaluation's cost
    always comes from the file, through a hit of this view or through the replay backend."""

    def __init__(self, inner: RecordStore, data: ReplayData) -> None:
        super().__init__(inner, name=data.path.name)
        self.data = data

    def __repr__(self) -> str:
        return f"ReplayStore({self.inner!r}, replay={self.name!r})"

    def cache_dir(self) -> Path:
        """``inner.cache_dir()``: what is derived and cached from a store (the family's base cost
        model, the vector index) is derived from its bulk reads (``records``, ``entries``), which
        this view leaves to the inner store, so a replay shares the inner store's cache instead
        of fitting and keeping its own copy (a base-model fit each replayed run)."""
        return self.inner.cache_dir()

    def keeps(self, rec: Record) -> bool:
        """:meth:`from_file`: only the replayed file's records answer a look-up."""
        return self.from_file(rec)

    def from_file(self, rec: Record) -> bool:
        """Whether ``rec`` came from the replayed file: imported from a file of that name
        (``origin``) or produced by a replay of it (``meta.replay_file``), and holding what the
        file holds for its config (same status and costs; a config the file lacks: a failure
        record).  The content check keeps out a different file that shares the name."""
        meta = rec.meta if isinstance(rec.meta, Mapping) else {}
        if rec.origin != self.name and meta.get("replay_file") != self.name:
            return False
        want = self.data.results.get(rec.config_json)
        if want is None:
            return rec.status != "ok"
        return rec.status == want.status and tuple(rec.costs) == tuple(want.costs)


def isolated_store(db: Any, data: ReplayData) -> Any:
    """``db`` seen by a replay of ``data`` (:class:`ReplayStore`); None stays None."""
    return None if db is None else ReplayStore(db, data)
