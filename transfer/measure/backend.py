"""Measurement backends and the DB-first ``measure`` API.

The timing protocol (``TimingProtocol``, ``time_callable``) lives in ``timing`` and runs inside the
isolated worker (``runner``).

Backends share ``MeasureBackend.measure(target, workload, config) -> Record``:
``LocalBackend`` builds and runs here for a local preset target; ``ReplayBackend`` (answers from a
recorded data set) is an abstract slot filled by the transfer work.

:func:`lookup_or_measure` is the one "look up, else measure, then commit" step of the project:
the DB (any ``RecordStore``) answers what it holds, the backend measures the rest (building in
parallel) and every new record is committed as soon as it is made.  ``measure``, ``measure_many``,
the Tuner's evaluations and migration's candidate measurements all go through it.

``measure(target, workload, config, db=...)`` looks the (target, workload, config) triple up in the
DB first and returns ``(record, True)`` without running when it is there; otherwise it measures,
commits and returns ``(record, False)``.  ``measure_many`` builds all missing configs in parallel,
then runs them one after another, committing each record as it is made.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tunedb.transfer.measure.timing import TimingProtocol

if TYPE_CHECKING:
    from tunedb.index.contract.base import RecordStore
    from tunedb.index.model.record import Record


# --------------------------------------------------------------------------- options and backends
@dataclass(frozen=True)
class MeasureOptions:
    """Knobs of a local measurement: protocol, timeouts (seconds), correctness check, input seed,
    worker address-space limit (MiB, None = unlimited), parallel build jobs (None = CPU count),
    cool-down after each run (seconds)."""

    protocol: TimingProtocol = field(default_factory=TimingProtocol)
    build_timeout_s: float = 120.0
    run_timeout_s: float = 60.0
    check: bool = True
    seed: int = 0
    memory_limit_mb: int | None = None
    build_jobs: int | None = None
    cooldown_s: float = 0.0


class MeasureBackend(ABC):
    """Something that turns (target, workload, config) into a Record.  ``name`` goes into ``meta.backend``."""

    name: str = "abstract"

    @abstractmethod
    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        """Measure one config; failures are records with a failure status, never exceptions
        (except ValueError for an unknown family, a bad workload or a target this backend cannot serve)."""

    def measure_many(self, target: Mapping[str, Any], workload: Mapping[str, Any],
                     configs: Sequence[Mapping[str, Any]],
                     on_record: Callable[[Record], None] | None = None) -> list[Record]:
        """Measure several configs (default: one after another); ``on_record`` sees each record as it is made."""
        out = []
        for c in configs:
            r = self.measure(target, workload, c)
            if on_record:
                on_record(r)
            out.append(r)
        return out


class ReplayBackend(MeasureBackend):
    """Base of backends that answer costs from a recorded data set instead of running
    (``tunedb.transfer.measure.replay.KernelTunerReplayBackend``).

    Contract: ``measure`` returns a Record with ``source="replay"`` whose costs come from the data
    set for the config, the recorded failure status when the data set holds a failure, and status
    ``invalid`` for a config the data set does not hold or that is outside its space.
    """

    name = "replay"


#: keys a local target must share with this machine's preset of its name (``uarch`` and
#: ``vector_registers`` only the microarchitecture presets carry: absent on both sides elsewhere)
LOCAL_TARGET_KEYS = ("kind", "isa", "march", "threads", "model", "vector_bits", "compiler", "cpu_flags_key",
                     "uarch", "vector_registers")


def check_local_target(target: Any) -> dict:
    """``target`` as a dict when it is one of this machine's local presets, else ValueError saying why."""
    from tunedb.index.hardware.localcpu import preset

    if not isinstance(target, Mapping):
        raise ValueError(f"target must be an object, got {type(target).__name__}")
    name = target.get("name")
    p = preset(name) if isinstance(name, str) else None
    if p is None:
        raise ValueError(f"target {name!r} is not a local preset of this machine; the local backend only "
                         "measures cpu-native / cpu-x86-64-v3 / -v2 / cpu-x86-64 and the microarchitectures "
                         "this host runs, e.g. cpu-haswell (-t<threads>; `tunedb targets` lists them)")
    diff = [k for k in LOCAL_TARGET_KEYS if target.get(k) != p.get(k)]
    if diff:
        raise ValueError(f"target {name!r} differs from this machine's preset in {diff}; it was made on "
                         "another machine or with another compiler")
    return dict(target)


class LocalBackend(MeasureBackend):
    """Build (C families) and run here, each run in an isolated worker (``tunedb.transfer.measure.runner``).

    Every record it makes (ok or failed) carries in ``meta``: ``context`` (the conditions of
    the machine right before the run: ``tunedb.transfer.measure.machine.measurement_context``,
    plus ``loadavg_after``, the 1-minute load average right after it) and ``protocol`` (the
    timing protocol's ``warmup``, ``min_repeat_ms``, ``repeat``, ``max_number``, ``noisy_cv``).
    Records that were never run (invalid config, build failure) take the context when they are made.
    """

    name = "local"

    def __init__(self, options: MeasureOptions | None = None) -> None:
        self.options = options or MeasureOptions()

    # ---- conditions stored with each record
    def _protocol_meta(self) -> dict[str, Any]:
        """The timing protocol's parameters, as ``meta["protocol"]`` holds them."""
        p = self.options.protocol
        return {"warmup": p.warmup, "min_repeat_ms": p.min_repeat_ms, "repeat": p.repeat,
                "max_number": p.max_number, "noisy_cv": p.noisy_cv}

    def _conditions(self, meta: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, Any]:
        """``meta`` with ``context`` (for a record that was never run: taken now, with
        ``loadavg_after`` = ``loadavg``) and ``protocol`` (unless already there) added."""
        from tunedb.transfer.measure.machine import measurement_context

        if context is None:
            context = measurement_context()
            context["loadavg_after"] = context["loadavg"]
        meta["context"] = context
        meta.setdefault("protocol", self._protocol_meta())
        return meta

    # ---- steps
    def _prepare(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Any
                 ) -> tuple[Any, dict, dict | None, Record | None]:
        """Validate; return (family, workload, config or None, failure record or None)."""
        from tunedb.index.model.record import Record
        from tunedb.transfer.kernels import family_of
        from tunedb.transfer.space import InvalidConfig

        fam = family_of(workload)
        w = fam.validate_workload(workload)
        t = check_local_target(target)
        try:
            cfg = fam.space(w).validate(config)
        except InvalidConfig as e:
            cfg_data = dict(config) if isinstance(config, Mapping) else {"_invalid": repr(config)[:200]}
            return fam, w, None, Record(t, w, cfg_data, status="invalid", error=f"invalid config: {e}",
                                        meta=self._conditions({"backend": self.name}))
        return fam, w, cfg, None

    def _source(self, fam: Any, w: dict, cfg: dict) -> str:
        return fam.source(w, cfg)

    def _run(self, target: dict, fam: Any, w: dict, cfg: dict, build: Any, t_start: float) -> Record:
        from tunedb.index.model.record import Record
        from tunedb.transfer.kernels.build import BuildError, machine_lock
        from tunedb.transfer.measure.machine import load_average, measurement_context
        from tunedb.transfer.measure.runner import run_isolated

        opts = self.options
        meta: dict[str, Any] = {"backend": self.name, "threads": int(target.get("threads") or 1)}
        compile_s = None
        so_path = ""
        if isinstance(build, BuildError):
            return Record(target, w, cfg, status=build.status, error=str(build), compile_s=build.compile_s,
                          wall_s=time.perf_counter() - t_start, meta=self._conditions(meta))
        if build is not None:
            compile_s = build.compile_s
            so_path = str(build.path)
            meta.update(build_key=build.key, build_cached=build.cached)
        request = {"family": fam.name, "workload": w, "config": cfg, "so_path": so_path,
                   "threads": meta["threads"], "protocol": asdict(opts.protocol), "seed": opts.seed,
                   "check": opts.check, "memory_limit_mb": opts.memory_limit_mb}
        with machine_lock(exclusive=True):
            ctx = measurement_context()  # the lock held: no other tunedb measurement runs now
            res = run_isolated(request, timeout_s=opts.run_timeout_s)
            ctx["loadavg_after"] = load_average()
        if opts.cooldown_s > 0:
            time.sleep(opts.cooldown_s)
        meta.update(res.get("meta") or {})
        self._conditions(meta, ctx)
        meta["run_wall_s"] = res.get("wall_s")
        costs = [float(c) for c in res.get("costs") or []]
        if costs and res["status"] == "ok":
            mean = sum(costs) / len(costs)
            meta["gflops"] = fam.flops(w) / mean / 1e9
            meta["gbytes_per_s"] = fam.bytes(w) / mean / 1e9
        return Record(target, w, cfg, costs=costs, status=res["status"], error=res.get("error") or "",
                      compile_s=compile_s, wall_s=time.perf_counter() - t_start, meta=meta)

    # ---- interface
    def measure(self, target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
        """Validate, build (cached), run isolated; see module docstring."""
        from tunedb.transfer.kernels.build import BuildError, build

        t_start = time.perf_counter()
        fam, w, cfg, failed = self._prepare(target, workload, config)
        if failed is not None:
            return failed
        t = dict(target)
        b: Any = None
        if fam.kind == "c":
            try:
                b = build(t, self._source(fam, w, cfg), timeout_s=self.options.build_timeout_s)
            except BuildError as e:
                b = e
        return self._run(t, fam, w, cfg, b, t_start)

    def measure_many(self, target: Mapping[str, Any], workload: Mapping[str, Any],
                     configs: Sequence[Mapping[str, Any]],
                     on_record: Callable[[Record], None] | None = None) -> list[Record]:
        """Validate all, build all C variants in parallel, then run one after another."""
        from tunedb.transfer.kernels.build import build_many

        t0 = time.perf_counter()
        prepared = [self._prepare(target, workload, c) for c in configs]
        t = dict(target)
        todo = [i for i, p in enumerate(prepared) if p[3] is None and p[0].kind == "c"]
        sources = [self._source(prepared[i][0], prepared[i][1], prepared[i][2]) for i in todo]
        builds = dict(zip(todo, build_many(t, sources, jobs=self.options.build_jobs,
                                           timeout_s=self.options.build_timeout_s)))
        per_build = (time.perf_counter() - t0) / max(1, len(configs))
        out = []
        for i, (fam, w, cfg, failed) in enumerate(prepared):
            if failed is not None:
                rec = failed
            else:
                rec = self._run(t, fam, w, cfg, builds.get(i), time.perf_counter() - per_build)
            if on_record:
                on_record(rec)
            out.append(rec)
        return out


# --------------------------------------------------------------------------- DB-first API
def normalise_workload(workload: Any, backend: MeasureBackend | None = None) -> dict:
    """The family-validated workload (defaults filled in): the form records and DB keys use.

    A workload of a family this project has no kernel for is passed through unchanged when a
    non-local backend (e.g. a replay backend) answers it; for the local backend it is a ValueError.
    """
    from tunedb.transfer.kernels import family_of

    try:
        fam = family_of(workload)
    except ValueError:
        if backend is not None and not isinstance(backend, LocalBackend) and isinstance(workload, Mapping):
            return dict(workload)
        raise
    return fam.validate_workload(workload)


def _check_configs(configs: Iterable[Any]) -> list[Mapping[str, Any]]:
    """``configs`` as a list; ValueError naming the type of the first one that is not a mapping."""
    out = list(configs)
    for c in out:
        if not isinstance(c, Mapping):
            raise ValueError(f"config must be an object, got {type(c).__name__}")
    return out


def lookup_or_measure(db: RecordStore | None, backend: MeasureBackend, target: Mapping[str, Any],
                      workload: Mapping[str, Any], configs: Sequence[Mapping[str, Any]],
                      on_record: Callable[[int, Record, bool], None] | None = None, *, force: bool = False,
                      timers: dict[str, float] | None = None,
                      annotate: Callable[[int], Mapping[str, Any] | None] | None = None
                      ) -> list[tuple[Record, bool]]:
    """Look each config up in ``db``, measure only the misses, commit each new record at once.

    Returns one ``(record, was_cached)`` per config, in order.  A stored record of the triple
    (whatever its status) is a hit and nothing runs for it (``force``: no look-ups, everything
    is measured).  The misses go to ``backend.measure_many`` in one call (the local backend
    builds them in parallel); each new record is committed as soon as it is made, so an
    interrupt (Ctrl-C) keeps everything measured before it.  A config repeated among the misses
    is measured once; its later copies come back as ``(that record, True)``.

    ``on_record(position, record, was_cached)`` (``position``: the index in ``configs``) sees
    every result as it becomes known: the hits first (in order), then each new record right
    after its commit (in the order the backend hands them over), then the repeats.
    ``db`` None: nothing is looked up or committed.  Workload and configs are passed on as
    given (callers normalise them).  ``timers``: seconds spent are added to its ``"lookup"``
    (``db.lookup_many``), ``"commit"`` (``db.commit``) and ``"measure"`` (the backend, less the
    commits and ``on_record`` calls made from inside it) keys.

    ``annotate(position)`` (optional) gives extra ``meta`` for the new record measured for that
    position (e.g. the Tuner's ``{"origin": "seed", "seeded_from": {...}}``): it is merged into the
    record's meta (its keys win over the backend's) *before* the record is committed, and the
    annotated record is what ``on_record`` sees and what is returned.  The annotated record is a
    copy (``dataclasses.replace``: Records are frozen) with the same ``record_id`` (random, fixed at
    construction, not derived from meta), timestamp, host and keys; only ``meta`` differs.  Cache
    hits and repeats are stored records and are never annotated; ``annotate`` returning None or
    ``{}`` leaves the record as the backend made it."""
    configs = list(configs)
    t0 = time.perf_counter()
    found = [None] * len(configs) if db is None or force else db.lookup_many(target, workload, configs)
    inside = [0.0, 0.0]  # seconds of commits, and of on_record calls, made while the backend runs
    if timers is not None:
        timers["lookup"] = timers.get("lookup", 0.0) + time.perf_counter() - t0
    results: list[tuple[Record, bool] | None] = [None] * len(configs)
    for i, hit in enumerate(found):
        if hit is not None:
            results[i] = (hit, True)
            if on_record:
                on_record(i, hit, True)
    first_by_key, repeats = _split_repeats(configs, [i for i, hit in enumerate(found) if hit is None])
    misses = list(first_by_key.values())
    if misses:
        where = _Positions(first_by_key)

        annotated: dict[int, Record] = {}  # id(the backend's record) -> its annotated copy

        def fresh(rec: Record) -> None:
            t1 = time.perf_counter()
            pos = where.take(rec)
            if annotate is not None:
                extra = annotate(pos)
                if extra:
                    new = _with_meta(rec, extra)
                    annotated[id(rec)] = new
                    rec = new
            if db is not None:
                db.commit(rec)
            t2 = time.perf_counter()
            if on_record:
                on_record(pos, rec, False)
            inside[0] += t2 - t1
            inside[1] += time.perf_counter() - t2

        t0 = time.perf_counter()
        recs = backend.measure_many(target, workload, [configs[i] for i in misses], on_record=fresh)
        if timers is not None:
            timers["commit"] = timers.get("commit", 0.0) + inside[0]
            timers["measure"] = timers.get("measure", 0.0) + time.perf_counter() - t0 - inside[0] - inside[1]
        for i, rec in zip(misses, recs):
            results[i] = (annotated.get(id(rec), rec), False)
    for i, first in repeats:
        rec = results[first][0]  # type: ignore[index]
        results[i] = (rec, True)
        if on_record:
            on_record(i, rec, True)
    return [r for r in results if r is not None]


def _with_meta(rec: Record, extra: Mapping[str, Any]) -> Record:
    """A copy of ``rec`` whose meta is ``rec.meta`` updated with ``extra`` (same record_id,
    timestamp, host and everything else; the derived keys are recomputed to the same values)."""
    import dataclasses

    return dataclasses.replace(rec, meta={**rec.meta, **dict(extra)})


def _split_repeats(configs: Sequence[Mapping[str, Any]], positions: list[int]
                   ) -> tuple[dict[str, int], list[tuple[int, int]]]:
    """Of ``positions``: config key -> first position with that config, and (repeat, first) pairs."""
    from tunedb.index.model.keys import key_of

    first: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    for i in positions:
        k = key_of(configs[i])
        if k in first:
            repeats.append((i, first[k]))
        else:
            first[k] = i
    return first, repeats


class _Positions:
    """Which of the measured positions a new record answers: by config key (a backend may hand
    records over in completion order), else the first one not yet answered."""

    def __init__(self, by_key: Mapping[str, int]) -> None:
        self._by_key = dict(by_key)
        self._left = list(by_key.values())

    def take(self, rec: Record) -> int:
        """The position ``rec`` answers (each position is answered once)."""
        i = self._by_key.pop(rec.config_key, None)
        if i is None or i not in self._left:
            i = self._left[0]
        self._left.remove(i)
        return i


def measure(target: Mapping[str, Any], workload: Mapping[str, Any], config: Mapping[str, Any],
            db: RecordStore | None = None, backend: MeasureBackend | None = None, force: bool = False,
            annotate: Mapping[str, Any] | None = None) -> tuple[Record, bool]:
    """Measure one config, DB first: return ``(record, cached)``.

    With ``db``: a stored record of the triple (the latest one, whatever its status) is
    returned with ``cached=True`` and nothing runs, unless ``force``; a new record is committed.
    ``backend`` defaults to ``LocalBackend()``.  Raises ValueError for an unknown family, a bad
    workload or a target the backend cannot serve; an invalid config is an ``invalid`` record.
    ``annotate``: keys added to a new record's ``meta`` (e.g. ``{"origin": "default"}``).
    """
    (out,) = measure_many(target, workload, [config], db=db, backend=backend, force=force,
                          annotate=None if annotate is None else (lambda _i: annotate))
    return out


def measure_many(target: Mapping[str, Any], workload: Mapping[str, Any], configs: Iterable[Mapping[str, Any]],
                 db: RecordStore | None = None, backend: MeasureBackend | None = None, force: bool = False,
                 annotate: Callable[[int], Mapping[str, Any] | None] | None = None) -> list[tuple[Record, bool]]:
    """``measure`` for several configs (:func:`lookup_or_measure`): DB hits are returned as they
    are; the rest are built in parallel and run one by one (each committed as soon as it is
    measured).  Order is kept; a config given twice is measured once."""
    w = normalise_workload(workload, backend)
    cfgs = _check_configs(configs)
    return lookup_or_measure(db, backend or LocalBackend(), target, w, cfgs, force=force, annotate=annotate)
