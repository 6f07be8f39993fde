"""Tune a whole Relax model through tunedb (optional extra ``.[tvm]``, ``xgboost`` for ``"xgb"``).

``extract_tasks(mod, target)``
    MetaSchedule's tuning tasks of a Relax ``IRModule``: the module is lowered with Relax's
    ``LegalizeOps -> AnnotateTIROpPattern -> FuseOps -> FuseTIR`` (TVM's "zero" pipeline minus
    constant folding; an already lowered module passes through unchanged) and handed to
    ``tvm.s_tir.meta_schedule.relax_integration.extract_tasks`` (structural module equality).
    Returns MetaSchedule ``ExtractedTask``s (``task_name``, ``weight`` = how often the fused
    function is called, ``dispatched[0]`` = its TIR module), in MetaSchedule's order.

``tune_relax(mod, target, db_path_or_store, *, trials, warm=True, seed=0, work_dir, ...)``
    Tunes every task with MetaSchedule's evolutionary search, ``trials`` measurements per task
    (``max_trials_per_task``; ``trials x tasks`` in all), ``trials_per_iter`` per batch, round-robin
    over the tasks (so every task gets the same budget whatever it measures), writing every
    measurement into the database:

    * ``db_path_or_store``: a tunedb DB directory / ``memory:`` / open RecordStore (wrapped in a
      :class:`~tunedb.transfer.tuners.tvm.database.TunedbDatabase` for ``target``), a
      ``TunedbDatabase`` (used as it is; its target is set to ``target``), or any other MetaSchedule
      ``Database`` (e.g. its own ``JSONDatabase``; no tunedb, so no warm start); a given
      ``TunedbDatabase`` gets ``warm_start = warm`` and its :attr:`timings` are reset first;
    * ``warm``: with a tunedb database, search with
      :class:`~tunedb.transfer.tuners.tvm.search.WarmStartSearch` (adapted schedules of the
      nearest history measured as they are in the first batch, more while they lead) and let
      ``get_top_k`` seed the evolutionary search; ``warm=False``: stock ``EvolutionarySearch`` and
      no warm start from ``get_top_k``;
    * ``pretrain``: feed the cost model the nearest history first
      (:func:`~tunedb.transfer.tuners.tvm.search.pretrain_cost_model`; only with ``warm`` and
      an ``XGBModel``); when that is at least the model's ``num_warmup_samples`` (100), so that it
      predicts from the start, the adapted schedules are also injected in the order of its
      predictions (``WarmStartSearch(rank_with_cost_model=True)``) rather than nearest first;
    * ``reuse`` (default True): a task whose workload already has at least ``trials`` records on
      the target in a tunedb database is not tuned again; its best comes from the database.  With
      every task covered nothing is measured at all (MetaSchedule by itself would measure
      ``trials`` new schedules per task again).

    Returns a JSON-ready dict: ``tasks`` (per task: ``name``, ``weight``, ``trials`` measured in
    this call, ``best_s`` best mean run seconds on record after the call, ``best_run_s`` best of
    this call, ``reused``, ``warm`` = the strategy's report for the task), ``latency_s`` (the model's
    estimated latency, sum of weight x best_s, seconds; None when a task has no result),
    ``trials`` (measured in this call), ``timeline`` (``[task, mean seconds or None]`` per measured
    trial, in measurement order), ``wall_s`` (tuning wall seconds), ``trial_s`` (wall seconds per
    measured trial), ``db_s`` (seconds spent in TunedbDatabase methods), ``overhead_s`` (``db_s``
    plus the warm-start strategy's preparation and the cost-model pre-training: all tunedb adds),
    ``db_share`` (``overhead_s / wall_s``), ``db_timings`` (per method ``[calls, seconds]``),
    ``pretrained`` (records fed to the cost model), ``cost_model``, ``target``.

``mlp(batch, hidden, blocks=2, ffn=2)``
    A small Relax model built with ``relax.BlockBuilder``: ``blocks`` residual MLP blocks
    ``h = h + relu(h @ W1 + b1) @ W2 + b2`` (float32, weights as parameters) -- two tuning tasks,
    each of weight ``blocks``.  For trying the integration out and for the benchmark.

TVM is imported lazily; nothing from a record is executed (traces are replayed by TVM's loader).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from tunedb.index.contract.base import RecordStore

if TYPE_CHECKING:
    import tvm

__all__ = ["extract_tasks", "lower", "mlp", "model_latency", "tune_relax"]

log = logging.getLogger(__name__)


def lower(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its Relax operators legalised to TIR and fused (the tasks MetaSchedule tunes)."""
    import tvm
    from tvm import relax

    seq = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FuseOps(), relax.transform.FuseTIR()])
    return seq(mod)


def extract_tasks(mod: tvm.IRModule, target: Any) -> list:
    """MetaSchedule's ``ExtractedTask``s of the Relax module ``mod`` for ``target`` (a
    ``tvm.target.Target``, JSON dict or string); see the module docstring."""
    from tvm.s_tir.meta_schedule.relax_integration import extract_tasks as ms_extract

    from tunedb.transfer.tuners.tvm.database import to_tvm_target

    return list(ms_extract(lower(mod), to_tvm_target(target), module_equality="structural"))


def mlp(batch: int, hidden: int, blocks: int = 2, ffn: int = 2) -> tvm.IRModule:
    """A Relax ``IRModule`` (function ``main``) of ``blocks`` residual MLP blocks on a
    ``[batch, hidden]`` float32 input, inner width ``ffn * hidden``; see the module docstring."""
    from tvm import relax

    def tensor(*shape: int) -> Any:
        return relax.TensorType(list(shape), "float32")

    bb = relax.BlockBuilder()
    x = relax.Var("x", tensor(batch, hidden))
    params = []
    for i in range(blocks):
        params += [relax.Var(f"w{i}_1", tensor(hidden, ffn * hidden)), relax.Var(f"b{i}_1", tensor(ffn * hidden)),
                   relax.Var(f"w{i}_2", tensor(ffn * hidden, hidden)), relax.Var(f"b{i}_2", tensor(hidden))]
    op = relax.op
    with bb.function("main", [x, *params]):
        with bb.dataflow():
            h = x
            for i in range(blocks):
                w1, b1, w2, b2 = params[4 * i:4 * i + 4]
                t = bb.emit(op.nn.relu(op.add(op.matmul(h, w1), b1)))
                h = bb.emit(op.add(op.add(op.matmul(t, w2), b2), h))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get()


def model_latency(best: dict[str, float | None], weights: dict[str, float]) -> float | None:
    """Sum of ``weights[task] * best[task]`` (seconds); None when a task has no best yet."""
    total = 0.0
    for name, w in weights.items():
        b = best.get(name)
        if b is None:
            return None
        total += float(w) * float(b)
    return total


def mean_secs(result: Any) -> float | None:
    from tunedb.transfer.tuners.tvm.search import mean_secs as mean

    return mean(result)


def _timeline_callback(names: list[str], timeline: list) -> Any:
    """A MetaSchedule measure callback appending ``[task name, mean seconds or None]`` for every
    measured candidate to ``timeline`` (in measurement order)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Timeline(PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: list, builder_results: list,
                  runner_results: list) -> None:
            for b, r in zip(builder_results, runner_results):
                ok = b.error_msg is None
                timeline.append([names[int(task_id)], mean_secs(r) if ok else None])

    return Timeline()


def _cost_model(kind: str, cores: int) -> tuple[Any, str]:
    """(MetaSchedule cost model, its name) for ``kind``: ``xgb``, ``random`` or ``auto`` (xgb when
    xgboost imports, else random with a warning)."""
    from tvm.s_tir.meta_schedule.cost_model import RandomModel, XGBModel

    if kind == "auto":
        try:
            import xgboost  # noqa: F401
            kind = "xgb"
        except ImportError:
            log.warning("tune_relax: xgboost is not installed, using MetaSchedule's random cost model")
            kind = "random"
    if kind == "xgb":
        return XGBModel(num_tuning_cores=cores), "xgb"
    if kind == "random":
        return RandomModel(), "random"
    raise ValueError(f"cost_model must be 'auto', 'xgb' or 'random', not {kind!r}")


def _quiet_ms_logger() -> None:
    """MetaSchedule's logging setup lists its logger's handler names and fails on a nameless one
    (pytest's capture handler, for instance): drop those before tuning."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for h in list(ms_logger.handlers):
        if h.get_name() is None:
            ms_logger.removeHandler(h)


def tune_relax(mod: tvm.IRModule, target: Any, db_path_or_store: Any, *, trials: int, warm: bool = True,
               seed: int = 0, work_dir: str | os.PathLike, trials_per_iter: int = 16, pretrain: bool = False,
               reuse: bool = True, cost_model: str = "auto", num_cores: int | None = None,
               population_size: int = 128, genetic_num_iters: int = 2, init_min_unmeasured: int = 16,
               max_injected: int = 32, per_neighbour: int = 8, builder_timeout_s: float = 300.0) -> dict:
    """Tune every task of the Relax module ``mod`` for ``target``; see the module docstring.

    ``num_cores``: tuning/build/run workers (default: the target's ``num-cores``, else the CPU
    count); ``population_size`` / ``genetic_num_iters`` / ``init_min_unmeasured``: the
    evolutionary search's (smaller than MetaSchedule's defaults of 512 / 4 / 50 so a small model
    tunes in minutes on 2 cores); ``max_injected``: adapted traces asked per task with ``warm``;
    ``per_neighbour``: ``warm_start_per_neighbour`` of the TunedbDatabase made here from a path or
    store (best records adapted from each nearest entry; a given TunedbDatabase keeps its own);
    ``builder_timeout_s``: seconds per build."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import Database
    from tvm.s_tir.meta_schedule.runner import LocalRunner
    from tvm.s_tir.meta_schedule.search_strategy import EvolutionarySearch

    from tunedb.transfer.tuners.tvm.database import TunedbDatabase, local_builder, to_tvm_target
    from tunedb.transfer.tuners.tvm.search import WarmStartSearch, pretrain_cost_model

    if trials < 1:
        raise ValueError("trials must be >= 1")
    tgt = to_tvm_target(target)
    cores = int(num_cores or (tgt.attrs.get("num-cores") if "num-cores" in tgt.attrs else 0) or os.cpu_count() or 1)
    if isinstance(db_path_or_store, TunedbDatabase):
        db = db_path_or_store
        db.set_target(tgt)
    elif isinstance(db_path_or_store, Database):
        db = db_path_or_store
    elif isinstance(db_path_or_store, (str, os.PathLike, RecordStore)):
        db = TunedbDatabase(db_path_or_store, target=tgt, warm_start=warm, warm_start_per_neighbour=per_neighbour)
    else:
        raise TypeError("db_path_or_store must be a tunedb path/store, a TunedbDatabase or a MetaSchedule Database")
    tunedb = isinstance(db, TunedbDatabase)
    if tunedb:
        db.warm_start = bool(warm)
        db.reset_timings()

    tasks = extract_tasks(mod, tgt)
    if not tasks:
        raise ValueError("the module has no tunable tasks")
    names = [str(t.task_name) for t in tasks]
    weights = {str(t.task_name): float(t.weight) for t in tasks}
    task_mods = {str(t.task_name): t.dispatched[0] for t in tasks}
    reused: set[str] = set()
    if tunedb and reuse:
        reused = {n for n in names if db.count_records(task_mods[n]) >= trials}
    todo = [t for t in tasks if str(t.task_name) not in reused]

    cm, cm_name = _cost_model(cost_model, cores)
    timeline: list = []
    pretrained = 0
    prep_s = 0.0
    t0 = time.perf_counter()
    if todo and pretrain and warm and tunedb and cm_name == "xgb":
        tp = time.perf_counter()
        pretrained = pretrain_cost_model(cm, db, [t.dispatched[0] for t in todo], tgt)
        prep_s += time.perf_counter() - tp
    evo = EvolutionarySearch(population_size=population_size, init_min_unmeasured=init_min_unmeasured,
                             genetic_num_iters=genetic_num_iters)
    # rank the adapted schedules with the cost model only when it predicts (XGBModel returns noise
    # below its num_warmup_samples)
    rank = pretrained > 0 and pretrained >= int(getattr(cm, "num_warmup_samples", 0))
    strategy = WarmStartSearch(db, evo, max_injected=max_injected, rank_with_cost_model=rank, seed=seed) \
        if (warm and tunedb) else evo
    if todo:
        _quiet_ms_logger()
        contexts, task_weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            todo, str(work_dir), strategy=strategy, num_threads=cores, seed=seed)
        ctx_names = [str(c.task_name) for c in contexts]
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), _timeline_callback(ctx_names, timeline)]
        ms.tune_tasks(tasks=contexts, task_weights=task_weights, work_dir=str(work_dir),
                      max_trials_global=trials * len(contexts), max_trials_per_task=trials,
                      num_trials_per_iter=trials_per_iter, builder=local_builder(cores, builder_timeout_s),
                      runner=LocalRunner(), database=db, cost_model=cm, measure_callbacks=callbacks,
                      task_scheduler="round-robin")
    wall = time.perf_counter() - t0
    reports = {r["task"]: r for r in strategy.report()} if hasattr(strategy, "report") else {}
    out_tasks = []
    best: dict[str, float | None] = {}
    for n in names:
        rec = db.query_tuning_record(task_mods[n], tgt, n)
        b = mean_secs(rec) if rec is not None else None
        best[n] = b
        mine = [s for t, s in timeline if t == n and s is not None]
        out_tasks.append({"name": n, "weight": weights[n], "trials": sum(1 for t, _ in timeline if t == n),
                          "best_s": b, "best_run_s": min(mine) if mine else None, "reused": n in reused,
                          "warm": reports.get(n)})
    db_s = db.timed_seconds if tunedb else 0.0
    # everything tunedb adds: its database methods, plus the strategy's preparation and the
    # pre-training outside them (their own database calls are already in db_s)
    inner_db = sum(db.timings.get(k, [0, 0.0])[1] for k in ("adapted_traces", "neighbour_records")) if tunedb else 0.0
    overhead_s = db_s - inner_db + sum(r.get("prepare_s", 0.0) for r in reports.values()) + prep_s
    n_trials = len(timeline)
    return {"tasks": out_tasks, "latency_s": model_latency(best, weights), "trials": n_trials,
            "timeline": timeline, "wall_s": wall, "trial_s": wall / n_trials if n_trials else None,
            "db_s": db_s, "overhead_s": overhead_s,
            "db_share": overhead_s / wall if wall > 0 and n_trials else None, "pretrained": pretrained,
            "cost_model": cm_name, "target": db.target if tunedb else None,
            "db_timings": {k: list(v) for k, v in db.timings.items()} if tunedb else {}}
