"""Warm start that counts: measure the nearest entries' adapted schedules as they are.

:class:`TunedbDatabase` (``warm_start=True``) hands adapted nearest-neighbour traces to
MetaSchedule's evolutionary search through ``get_top_k``, but the search only uses them as part
of its initial population and mutates them before it measures anything, so none is measured as
offered.  This module adds the two pieces that make the history count:

``WarmStartSearch(database, inner=None, *, ...)``
    A MetaSchedule ``PySearchStrategy`` wrapping a stock ``EvolutionarySearch`` (``inner``;
    default: MetaSchedule's defaults).  Per task (MetaSchedule clones the strategy for every
    task) it asks ``database.adapted_traces(task module, max_injected)`` once, in
    ``pre_tuning``, re-runs the task's postprocessors on each trace (as the evolutionary search
    does with ``get_top_k`` traces) and then:

    * first batch: up to ``first_share`` x the batch size of adapted schedules, *unchanged*, as
      ``MeasureCandidate``s, nearest entry first (or, with ``rank_with_cost_model``, in the order
      of the cost model's predictions); the rest of the batch comes from the inner search;
    * later batches: up to ``later_share`` x the batch of the not yet measured adapted schedules,
      while they stay competitive, i.e. while the best measured run time of the task (each
      measurement's median repeat, as the one estimator counts a record) came from an adapted
      schedule (or nothing else has been measured yet); the first batch in which a
      schedule of the inner search is the best stops the injection for good;
    * every batch's results are passed on to the inner search as well, so its trial budget, its
      set of measured modules (no re-measurement) and, through the task scheduler, the records in
      the database and the cost-model updates are the same as if it had proposed the schedules.

    Nothing is injected for a task whose workload already has ``ok`` records on the database's
    current target (the database serves them), nor when the database has no current target.
    :meth:`report` gives per task: offered, injected, measured and the best run times.

``pretrain_cost_model(cost_model, database, mods, target, *, per_neighbour=64)``
    Feed a MetaSchedule cost model (``XGBModel``) the measured history of the nearest workloads
    on exactly the current target before the search starts: every neighbour record's full trace
    is replayed on the *neighbour's own* module (the program that was measured) and given to
    ``cost_model.update`` with its config's estimated cost (the database's ``run_secs =
    [estimate]``: one result per config, not per measurement), one ``TuneContext`` per neighbour workload, so
    ``XGBModel`` normalises each workload's run times on its own (its groups are keyed by the
    context module's structural hash).  It is what the model would hold had those workloads
    been tuned in this session.  Returns how many records were fed.

TVM is imported lazily (as in :mod:`tunedb.transfer.tuners.tvm.database`): importing this module
never needs TVM, touching :data:`WarmStartSearch` does.  Traces come from the database's JSON
records through TVM's trace loader only; nothing from a record is executed or evaluated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tvm

__all__ = ["WarmStartSearch", "pretrain_cost_model"]  # noqa: F822 (WarmStartSearch is built lazily)

log = logging.getLogger(__name__)


def _run_seconds(result: Any) -> float | None:
    """The cost of one MetaSchedule measurement (a ``RunnerResult``, or a ``TuningRecord``) as
    MetaSchedule and the one estimator count it: the mean of its ``run_secs`` repeats, seconds
    (``tunedb.index.model.estimate.record_values`` of a MetaSchedule record).  A ``TuningRecord`` the
    database answers carries ``run_secs = [estimate]``, so this is the config's estimate.  None
    for a failed build or run."""
    if result is None or getattr(result, "error_msg", None) or not result.run_secs:
        return None
    secs = [float(x) for x in result.run_secs]
    if not secs or any(s != s or s >= 1e9 for s in secs):
        return None
    import numpy as np

    from tunedb.index.model.estimate import TUNER_META_KEYS, record_values

    code = TUNER_META_KEYS.index("metaschedule") + 1
    return float(record_values(np.asarray(secs), np.asarray([len(secs)]), np.asarray([code]))[0])


#: the old name (``tunedb.transfer.tuners.tvm.models`` imports it): the same function
mean_secs = _run_seconds


def _postprocessed(mod: tvm.IRModule, trace: Any, postprocs: Iterable[Any], seed: int) -> Any | None:
    """A schedule of ``mod`` with ``trace`` replayed (postprocessor part removed) and the task's
    postprocessors applied, as MetaSchedule's ``ThreadedTraceApply`` does; None when the trace or
    a postprocessor fails on it."""
    from tvm.s_tir import Schedule

    try:
        sch = Schedule(mod, seed=seed, error_render_level="none")
        trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        for p in postprocs:
            if not p.apply(sch):
                return None
        return sch
    except Exception:  # a trace that does not survive the postprocessors is not offered
        return None


class _WarmStartSearch:
    """See :mod:`tunedb.transfer.tuners.tvm.search`.

    ``database``: the :class:`~tunedb.transfer.tuners.tvm.database.TunedbDatabase` the tuning
    writes to (its current target decides what is "already measured");
    ``inner``: the MetaSchedule search strategy doing the rest (an ``EvolutionarySearch``;
    default ``EvolutionarySearch()``); ``max_injected``: adapted traces asked per task;
    ``first_share`` / ``later_share``: at most this fraction of the first / of each later batch
    is adapted schedules (at least one when any is left); ``rank_with_cost_model``: order the
    adapted schedules by the search's cost model (best predicted first) instead of nearest first
    -- only worth it for a model trained on history (:func:`pretrain_cost_model`; an untrained
    ``XGBModel`` predicts noise); ``seed``: seed of the schedules the postprocessors run on."""

    def __init__(self, database: Any, inner: Any = None, *, max_injected: int = 32, first_share: float = 1.0,
                 later_share: float = 0.5, rank_with_cost_model: bool = False, seed: int = 0,
                 _reports: list | None = None) -> None:
        from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

        if not 0.0 <= first_share <= 1.0 or not 0.0 <= later_share <= 1.0:
            raise ValueError("first_share and later_share must be in [0, 1]")
        self.database = database
        self.inner = inner if inner is not None else EvolutionarySearch()
        self.max_injected = int(max_injected)
        self.first_share = float(first_share)
        self.later_share = float(later_share)
        self.rank_with_cost_model = bool(rank_with_cost_model)
        self.seed = int(seed)
        self._reports: list = _reports if _reports is not None else []
        self._state: dict | None = None
        self._context: Any = None

    # -------------------------------------------------------------- MetaSchedule hooks
    def _initialize_with_tune_context(self, context: Any) -> None:
        """Remember the task's context and initialise the inner strategy with it."""
        self._context = context
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list, database: Any = None,
                   cost_model: Any = None) -> None:
        """Fetch and postprocess the task's adapted traces, then pre-tune the inner strategy."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo

        ctx = self._context
        t0 = time.perf_counter()
        queue: list[tuple[Any, dict]] = []
        offered = 0
        if ctx is not None and self.max_injected > 0:
            adapted = self.database.adapted_traces(ctx.mod, self.max_injected)
            offered = len(adapted)
            postprocs = list(ctx.space_generator.postprocs or []) if ctx.space_generator is not None else []
            for i, (trace, info) in enumerate(adapted):
                sch = _postprocessed(ctx.mod, trace, postprocs, self.seed + i)
                if sch is not None:
                    queue.append((sch, info))
        ranked = False
        if self.rank_with_cost_model and cost_model is not None and len(queue) > 1:
            from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

            try:
                cands = [MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
                         for sch, _ in queue]
                scores = [float(x) for x in cost_model.predict(ctx, cands)]
                order = sorted(range(len(queue)), key=lambda j: -scores[j])  # stable: nearest first on ties
                queue = [queue[j] for j in order]
                ranked = True
            except Exception as e:  # a cost model that cannot predict: keep the nearest-first order
                log.warning("WarmStartSearch: cost model could not rank the adapted schedules: %s", e)
        report = {"task": str(ctx.task_name) if ctx is not None else "", "offered": offered,
                  "usable": len(queue), "injected": 0, "measured": [], "best_injected_s": None,
                  "best_other_s": None, "stopped_at_batch": None, "batches": 0,
                  "dropped_batches": 0, "ranked": ranked, "prepare_s": 0.0}
        self._state = {"queue": queue, "max_trials": int(max_trials), "per_iter": int(num_trials_per_iter),
                       "done": 0, "batch": 0, "injecting": bool(queue), "pending": set(), "sent": set(),
                       "report": report,
                       "ArgInfo": ArgInfo}
        report["prepare_s"] = time.perf_counter() - t0
        self._reports.append(report)
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        """Post-tune the inner strategy."""
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> list | None:
        """The next batch: adapted schedules as they are (see module docstring), then the inner
        strategy's candidates; None when the task's trial budget is spent."""
        from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
        from tvm_ffi import structural_hash

        st = self._state
        if st is None:
            return self.inner.generate_measure_candidates()
        left = st["max_trials"] - st["done"]
        if left <= 0:
            return None
        size = min(st["per_iter"], left)
        share = self.first_share if st["batch"] == 0 else self.later_share
        n_inj = 0
        if st["injecting"] and st["queue"]:
            n_inj = min(len(st["queue"]), size, max(1, int(share * size)))
        picked, st["queue"] = st["queue"][:n_inj], st["queue"][n_inj:]
        seen = st["sent"]  # structural hashes of every module this task has sent to measurement
        out = []
        pending = set()
        for sch, _info in picked:
            h = structural_hash(sch.mod)
            if h in seen:
                continue
            seen.add(h)
            pending.add(h)
            out.append(MeasureCandidate(sch, st["ArgInfo"].from_entry_func(sch.mod, remove_preproc=True)))
            st["report"]["injected"] += 1
        # The inner search does not know the injected modules are measured (it only remembers what it
        # picked itself), so it may propose them again from get_top_k: drop those, ask again when a
        # whole batch was dropped (it never proposes the same module twice).
        for _ in range(3):
            if len(out) >= size:
                break
            more = self.inner.generate_measure_candidates()
            if more is None:
                break
            added = 0
            for c in list(more):
                if len(out) >= size:
                    break
                h = structural_hash(c.sch.mod)
                if h not in seen:
                    seen.add(h)
                    out.append(c)
                    added += 1
            if added or out:
                break
            st["report"]["dropped_batches"] += 1
        st["pending"] = pending
        st["batch"] += 1
        st["report"]["batches"] = st["batch"]
        return out or None

    def notify_runner_results(self, measure_candidates: list, results: list) -> None:
        """Track which of the batch's results came from adapted schedules, decide whether to keep
        injecting, and pass everything on to the inner strategy."""
        from tvm_ffi import structural_hash

        st = self._state
        if st is not None:
            rep = st["report"]
            best_inj, best_oth = rep["best_injected_s"], rep["best_other_s"]
            for cand, res in zip(measure_candidates, results):
                secs = _run_seconds(res)
                if structural_hash(cand.sch.mod) in st["pending"]:
                    rep["measured"].append(secs)
                    if secs is not None and (best_inj is None or secs < best_inj):
                        best_inj = secs
                elif secs is not None and (best_oth is None or secs < best_oth):
                    best_oth = secs
            rep["best_injected_s"], rep["best_other_s"] = best_inj, best_oth
            st["done"] += len(results)
            st["pending"] = set()
            if st["injecting"] and best_oth is not None and (best_inj is None or best_oth < best_inj):
                st["injecting"] = False
                rep["stopped_at_batch"] = st["batch"]
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> Any:
        """A fresh strategy for another task: same database and settings, a clone of the inner
        strategy, the same shared :meth:`report` list."""
        return _class()(self.database, self.inner.clone(), max_injected=self.max_injected,
                               first_share=self.first_share, later_share=self.later_share,
                               rank_with_cost_model=self.rank_with_cost_model, seed=self.seed,
                               _reports=self._reports)

    # ------------------------------------------------------------------ reporting
    def report(self) -> list[dict]:
        """Per tuned task (in the order tuning started): ``task`` name, ``offered`` (adapted
        traces the database gave), ``usable`` (survived the postprocessors), ``injected``
        (measured as they are), ``measured`` (their run seconds, the median of each
        measurement's repeats as the estimator counts a record; None for failures),
        ``best_injected_s`` / ``best_other_s`` (best such run seconds of adapted / other
        schedules measured in this session), ``stopped_at_batch`` (batch after which an inner-search schedule was the best
        and injection stopped; None if never), ``batches``, ``prepare_s`` (seconds spent fetching
        and postprocessing).  Shared by all clones of one strategy."""
        return [dict(r, measured=list(r["measured"])) for r in self._reports]


def pretrain_cost_model(cost_model: Any, database: Any, mods: Iterable[tvm.IRModule], target: Any, *,
                        per_neighbour: int = 64, neighbours: int | None = None) -> int:
    """Update ``cost_model`` (a MetaSchedule ``CostModel``, e.g. ``XGBModel``) with the measured
    history nearest to each module in ``mods`` (see module docstring); each neighbour workload is
    fed once even when it is near several modules.  ``target``: the tuning target (Target, JSON
    dict or string; it must be the database's current target for anything to be found).
    Returns the number of results fed, one per neighbour config (0: nothing on record, model unchanged)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm_ffi import structural_hash

    from tunedb.transfer.tuners.tvm.database import to_tvm_target

    tgt = to_tvm_target(target)
    groups: list[tuple[Any, list, list]] = []
    seen: set[int] = set()
    for mod in mods:
        for nb_workload, records in database.neighbour_records(mod, per_neighbour, neighbours):
            nb_mod = nb_workload.mod
            h = structural_hash(nb_mod)
            if h in seen:
                continue
            seen.add(h)
            cands, results = [], []
            for rec in records:
                try:
                    sch = Schedule(nb_mod, error_render_level="none")
                    rec.trace.apply_to_schedule(sch, remove_postproc=False)
                except Exception:  # a stored trace that no longer applies: skip it
                    continue
                cands.append(MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
                results.append(RunnerResult([float(x) for x in rec.run_secs], None))
            if cands:
                groups.append((nb_mod, cands, results))
    # XGBModel re-trains on every update; train once, on the last group (its documented
    # adaptive-training fields: no training while the new data is < last_train_size / 5)
    xgb_like = hasattr(cost_model, "last_train_size") and hasattr(cost_model, "adaptive_training")
    fed = 0
    for i, (nb_mod, cands, results) in enumerate(groups):
        ctx = TuneContext(mod=nb_mod, target=tgt, task_name="tunedb-history", num_threads=1)
        last = i == len(groups) - 1
        if xgb_like and not last:
            saved = (cost_model.adaptive_training, cost_model.last_train_size)
            cost_model.adaptive_training, cost_model.last_train_size = True, 1 << 40
            try:
                cost_model.update(ctx, cands, results)
            finally:
                cost_model.adaptive_training, cost_model.last_train_size = saved
        else:
            cost_model.update(ctx, cands, results)
        fed += len(cands)
    return fed


# ----------------------------------------------------------------------------- lazy class
def _build_class() -> type:
    """Create the ``@derived_object`` PySearchStrategy subclass of :class:`_WarmStartSearch`."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    body = {k: v for k, v in vars(_WarmStartSearch).items() if k not in ("__dict__", "__weakref__")}
    cls = type("WarmStartSearch", (PySearchStrategy,), {**body, "__qualname__": "WarmStartSearch"})
    cls.__module__ = __name__
    return derived_object(cls)


_CLASS: type | None = None


def _class() -> type:
    """The ``WarmStartSearch`` class (built on first use)."""
    global _CLASS
    if _CLASS is None:
        from tunedb.transfer.tuners.tvm.database import TVM_INSTALL_HINT

        try:
            _CLASS = _build_class()
        except ImportError as e:
            raise ImportError(f"{TVM_INSTALL_HINT} ({e})") from e
    return _CLASS


def __getattr__(name: str) -> Any:
    """Lazy ``WarmStartSearch``: the class is built (and TVM imported) on first access."""
    if name == "WarmStartSearch":
        return _class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "WarmStartSearch"])
