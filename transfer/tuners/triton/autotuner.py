"""``autotune``: ``@triton.autotune`` backed by a tunedb database.

The decorator takes every argument of ``triton.autotune`` and builds a subclass of Triton's own
``Autotuner``, so pruning (``prune_configs_by``), hooks (``pre_hook``, ``post_hook``,
``reset_to_zero``, ``restore_value``), the benchmarker (``do_bench``, ``warmup``/``rep``), the
in-process cache and the autotuning listener behave as Triton's.  Only the step Triton takes
when a tuning key is new in this process (its on-disk cache, ``check_disk_cache``) is tunedb's:

1. The entry is (this device, :func:`~.identity.device_target`; this kernel at this tuning key,
   :func:`~.keys.workload_of`); each config is ``Config.all_kwargs()``.
2. When the DB already holds a record (ok or failed) of every config of the (pruned) list --
   of ``top_k`` of them with ``top_k`` -- nothing is benchmarked: the DB's best config of the
   list is used (``source`` ``"db"``).
3. Otherwise the configs not in the DB are benchmarked, one at a time, in the order tunedb's
   ask/tell core (:class:`~tunedb.transfer.search.asktell.AskTell`) suggests from the nearest
   devices and shapes, until every config (or ``top_k`` in all) has a record.  Each timing is
   committed at once: ``costs`` = [Triton's median over its repetitions, seconds],
   ``meta["statistic"] = "median"``; a config that fails (out of resources, a compile error,
   ptxas) is committed as a failed record and never benchmarked again.  The answer is the DB's
   best of the list (``source`` ``"measured"``).
4. ``benchmark=False`` benchmarks nothing: the DB's best when the entry has records, else the
   prediction from the nearest entries (``source`` ``"predicted"``), announced by a
   :class:`PredictedConfigWarning`.

Every decision is kept in ``kernel.decisions[tuning_key]`` (:class:`Decision`)."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from triton.compiler.errors import CompilationError
from triton.runtime.autotuner import Autotuner, Config
from triton.runtime.errors import InterpreterError, OutOfResources

from tunedb.index.model.keys import key_of
from tunedb.transfer.search.asktell import Answer, AskTell
from tunedb.transfer.search.tuner import TuneOptions
from tunedb.transfer.tuners.triton.identity import device_target
from tunedb.transfer.tuners.triton.keys import config_dict, workload_of

#: the DB when ``db=`` is not given and ``$TUNEDB_DB`` is not set (the CLI's default)
DEFAULT_DB = "./tunedb-data"
#: what each committed cost is: Triton's ``_bench`` asks for quantiles (0.5, 0.2, 0.8) and the
#: first is the median of the kernel's time over the benchmarker's repetitions
STATISTIC = "median"


class PredictedConfigWarning(UserWarning):
    """A config was chosen from the nearest entries' records, not from a measurement of this
    device and shape (``benchmark=False``)."""


@dataclass
class Decision:
    """What the autotuner did for one tuning key: ``config`` (the ``triton.Config`` used),
    ``source`` (``"db"``: the DB's records, nothing benchmarked; ``"measured"``: after
    benchmarking; ``"predicted"``; ``"first"``: no usable answer, Triton's first config),
    ``predicted`` (True when no measurement of this device and shape chose it), ``cost_s``
    (the estimate, seconds; None when unknown) and ``benchmarked`` (the configs benchmarked now,
    as dicts, in order)."""

    config: Config
    source: str
    predicted: bool = False
    cost_s: float | None = None
    benchmarked: list[dict] = field(default_factory=list)


def open_db(db: Any) -> Any:
    """The RecordStore of ``db``: a store as it is, else a location (path or URL; None:
    ``$TUNEDB_DB``, else ``./tunedb-data``) opened with ``tunedb.open`` (a directory is created)."""
    if db is not None and hasattr(db, "lookup_many") and hasattr(db, "commit"):
        return db
    from tunedb.index.opener import open_store

    return open_store(os.fspath(db) if db is not None else os.environ.get("TUNEDB_DB") or DEFAULT_DB, create=True)


def padded(configs: Sequence[dict]) -> list[dict]:
    """``configs`` with the same keys each (a key some lack is None there): the ask/tell core
    needs one set of knobs.  Unchanged when they already share their keys."""
    names: dict[str, None] = {}
    for c in configs:
        names.update(dict.fromkeys(c))
    return [c if len(c) == len(names) else {n: c.get(n) for n in names} for c in configs]


class TunedbAutotuner(Autotuner):
    """Triton's ``Autotuner`` whose cross-process cache is a tunedb database (module docstring).
    ``db``: a store or a location; ``top_k``: benchmark at most this many configs of a key (None:
    all); ``benchmark``: False benchmarks nothing."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, *, db: Any = None,
                 top_k: int | None = None, benchmark: bool = True, **triton_options: Any) -> None:
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
        if not isinstance(benchmark, bool):
            raise ValueError(f"benchmark must be True or False, got {benchmark!r}")
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **triton_options)
        self.cache_results = True  # Triton then asks check_disk_cache: the DB answers there
        self.db_location, self.top_k, self.benchmark = db, top_k, benchmark
        self.decisions: dict[tuple, Decision] = {}
        self._db: Any = None
        self._call: tuple[tuple, dict] | None = None
        self._failure: BaseException | None = None

    @property
    def db(self) -> Any:
        """The RecordStore (opened on first use)."""
        if self._db is None:
            self._db = open_db(self.db_location)
        return self._db

    @cached_property
    def do_bench(self) -> Callable:
        """Triton's benchmarker, remembering the exception of a config that fails."""
        inner = Autotuner.do_bench.func(self)

        def bench(kernel_call: Callable, quantiles: Any = None) -> Any:
            try:
                return inner(kernel_call, quantiles=quantiles)
            except Exception as e:
                self._failure = e
                raise

        return bench

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Triton's ``run``; the call's arguments are kept for the benchmarks of a new key."""
        self._call = (args, kwargs)
        try:
            return super().run(*args, **kwargs)
        finally:
            self._call = None

    def check_disk_cache(self, tuning_key: tuple, configs: list[Config], bench_fn: Callable) -> bool:
        """Decide the config of a tuning key new to this process (module docstring); sets
        ``self.cache[tuning_key]`` and ``configs_timings`` as Triton does.  True when nothing was
        benchmarked (Triton's "cached result")."""
        target, workload = device_target(), workload_of(self.base_fn.__name__, tuning_key)
        dicts = padded([config_dict(c) for c in configs])
        by_key = {key_of(d): c for d, c in zip(dicts, configs)}
        stored = self.db.lookup_many(target, workload, dicts)
        limit = len(dicts) if self.top_k is None else min(self.top_k, len(dicts))
        todo = max(0, limit - sum(r is not None for r in stored)) if self.benchmark else 0
        have_ok = any(r is not None and r.status == "ok" for r in stored)
        study = AskTell(self.db, target, workload, configs=dicts, options=TuneOptions(budget=len(dicts)),
                        kind="triton-autotune") if todo or not have_ok else None
        timings = {by_key[key_of(d)]: _stored_ms(r) for d, r in zip(dicts, stored) if r is not None}
        done: list[dict] = []
        if todo:
            start = time.time()
            done = self._bench_in_order(study, todo, by_key, timings)
            self.bench_time = time.time() - start
            study.save()
        answer = study.best() if study is not None else None
        decision = self._decide(answer, dicts, configs, stored, timings, target, workload, done)
        self.decisions[tuning_key] = decision
        self.cache[tuning_key] = decision.config
        self.configs_timings = timings
        if done:
            args, kwargs = self._call or ((), {})
            self.pre_hook({**self.nargs, **kwargs, **decision.config.all_kwargs()}, reset_only=True)
        return not done

    def _bench_in_order(self, study: AskTell, todo: int, by_key: Mapping[str, Config],
                        timings: dict[Config, list[float]]) -> list[dict]:
        """Benchmark up to ``todo`` configs in the study's order, committing each; the configs
        benchmarked, in order."""
        done: list[dict] = []
        while len(done) < todo:
            batch = study.suggest(1)
            if not batch:
                break
            cfg = batch[0].config
            times, error, wall = self._time(by_key[key_of(cfg)])
            if error is None:
                study.observe(cfg, [times[0] * 1e-3], statistic=STATISTIC, wall_s=wall)
            else:
                study.observe(cfg, error=error, wall_s=wall)
            timings[by_key[key_of(cfg)]] = times
            done.append(cfg)
        return done

    def _time(self, config: Config) -> tuple[list[float], str | None, float]:
        """(Triton's timing in ms, as a list; the error text of a failed config or None; wall
        seconds) of one benchmark of ``config`` with the current call's arguments."""
        args, kwargs = self._call or ((), {})
        self._failure = None
        start = time.perf_counter()
        try:
            raw = self._bench(*args, config=config, **kwargs)
        except CompilationError as e:
            return [float("inf")] * 3, f"compile error: {_first_line(e)}", time.perf_counter() - start
        except InterpreterError as e:
            if not isinstance(e.__cause__, AssertionError):  # the interpreter's tl.static_assert
                raise
            return [float("inf")] * 3, f"compile error: static assertion failed {e}", time.perf_counter() - start
        wall = time.perf_counter() - start
        times = [float(v) for v in raw] if isinstance(raw, (list, tuple)) else [float(raw)]
        if self._failure is not None:
            kind = "out of resources" if isinstance(self._failure, OutOfResources) else "compile error"
            return [float("inf")] * 3, f"{kind}: {_first_line(self._failure)}", wall
        if not times or not 0 < times[0] < float("inf"):
            return [float("inf")] * 3, f"out of resources: Triton timed it as {times[:1]} ms", wall
        return times, None, wall

    def _decide(self, answer: Answer | None, dicts: list[dict], configs: list[Config], stored: list[Any],
                timings: Mapping[Config, list[float]], target: dict, workload: dict, done: list[dict]) -> Decision:
        """The Decision from the study's answer, or from the DB's best of the list when no study
        was needed; never a config with a failed record."""
        failed = {key_of(d) for d, r in zip(dicts, stored) if r is not None and r.status != "ok"}
        failed |= {key_of(d) for d, c in zip(dicts, configs) if timings.get(c, [0.0])[0] == float("inf")}
        by_key = {key_of(d): c for d, c in zip(dicts, configs)}
        if answer is None:
            for c in self.db.best_costs(target, workload, k=len(dicts)):
                k = key_of(c.config)
                if k in by_key and k not in failed:
                    return Decision(by_key[k], "db", cost_s=float(c.estimate.value), benchmarked=done)
        elif key_of(answer.config) in by_key and key_of(answer.config) not in failed:
            decision = Decision(by_key[key_of(answer.config)], answer.source, answer.predicted, answer.cost_s, done)
            if answer.predicted:
                warnings.warn(f"{self.base_fn.__name__}: config {_short(answer.config)} is predicted from "
                              f"{answer.from_target or 'the nearest entries'}, not benchmarked on this device "
                              f"and shape", PredictedConfigWarning, stacklevel=4)
            return decision
        first = next((c for d, c in zip(dicts, configs) if key_of(d) not in failed), configs[0])
        return Decision(first, "first", predicted=not done, benchmarked=done)


def _stored_ms(record: Any) -> list[float]:
    """A stored record as Triton's timing list (ms): its median three times, inf for a failure."""
    if record.status != "ok" or not record.costs:
        return [float("inf")] * 3
    costs = sorted(record.costs)
    return [costs[len(costs) // 2] * 1e3] * 3


def _first_line(error: BaseException | None) -> str:
    text = str(error or "").strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _short(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items() if v is not None)


def autotune(configs: list[Config], key: list[str], prune_configs_by: dict | None = None,
             reset_to_zero: list[str] | None = None, restore_value: list[str] | None = None,
             pre_hook: Callable | None = None, post_hook: Callable | None = None, warmup: int | None = None,
             rep: int | None = None, use_cuda_graph: bool = False, do_bench: Callable | None = None,
             cache_results: bool = False, *, db: Any = None, top_k: int | None = None,
             benchmark: bool = True) -> Callable:
    """``triton.autotune`` with a tunedb database (module docstring): the same arguments, in the
    same order, plus ``db`` (a RecordStore, a directory or URL; None: ``$TUNEDB_DB``, else
    ``./tunedb-data``), ``top_k`` (benchmark at most this many configs of a tuning key, in the
    DB's predicted order; None: all) and ``benchmark`` (False: never benchmark; use the DB's
    best, else its prediction, with a :class:`PredictedConfigWarning`).  ``cache_results`` is
    accepted and has no effect: the DB is the cache.  ValueError for a bad ``top_k`` or
    ``benchmark``."""
    del cache_results

    def decorator(fn: Any) -> TunedbAutotuner:
        return TunedbAutotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, db=db, top_k=top_k,
                               benchmark=benchmark, pre_hook=pre_hook, post_hook=post_hook,
                               prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                               use_cuda_graph=use_cuda_graph, do_bench=do_bench)

    return decorator


__all__ = ["DEFAULT_DB", "STATISTIC", "Decision", "PredictedConfigWarning", "TunedbAutotuner", "autotune", "open_db"]
