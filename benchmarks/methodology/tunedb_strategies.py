"""Kernel Tuner custom strategies for ``benchmarks/bench_methodology.py``.

The autotuning methodology runs strategies through ``kernel_tuner.tune_kernel_T1``; a custom one
is a class in a file named by the experiment's ``custom_search_method_path``.  Kernel Tuner
instantiates it with the strategy options (the experiment's ``search_method_hyperparameters``),
wraps it in ``kernel_tuner.strategies.wrapper.OptAlgWrapper`` and calls it as
``optimizer(cost_func, searchspace)``; whatever is in ``cost_func.results`` afterwards is the
run's result list (it becomes the T4 output the methodology scores).

Both classes take one option, ``root``: the benchmark's work directory.  The case being run
(kernel, held-out GPU) is read from the cache file Kernel Tuner replays
(``<root>/cachefiles/<kernel>/<GPU>.json``).

``TunedbWarmStart``  tunedb's ``WarmStart`` on a fresh copy of the DB the benchmark imported
                     for this case (the other five GPUs' caches): it claims the next unused copy
                     of ``<root>/dbs/<kernel>/<GPU>/copies/<i>`` (prepared before the experiment,
                     so copying is not timed; a new copy of ``base`` is made only when the
                     prepared ones are used up) and runs with Tuner seed ``n``, the number of
                     runs of its variant on the case before it (``claim_seed``): the n-th run
                     with the guard on and the n-th with it off have the same seed, so the two
                     variants are compared run by run on the same random draws.  WarmStart makes
                     its own ``CostFunc`` on the same runner and tuning options, so Kernel
                     Tuner's strategy-time accounting (``CostFunc._run_configs`` ->
                     ``runner.add_strategy_time``) and time budget see all of its own work
                     between evaluations; its results are put into the wrapper's
                     ``cost_func.results``.  One JSON line per run goes to ``<root>/log/``.
``TunedbWarmStartNoGuard``  the same with the guard against misleading history off
                     (``TuneOptions(guard=False)``; ``--guard-off`` adds it).
``UnionOfBests``     the do-it-yourself transfer baseline: the other GPUs' ok configs, best
                     first, round-robin over the GPUs (``tunedb.transfer.apps.evaluation.
                     union_of_bests``, computed before the experiment into
                     ``<root>/bests/<kernel>/<GPU>.json``), then the rest of the searchspace in
                     a random order.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from kernel_tuner.strategies.wrapper import OptAlg

import tunedb
from tunedb.kernel_tuner import WarmStart, warm_start_options


def case_of(tuning_options: Any) -> tuple[str, str]:
    """(kernel, GPU) of the run: the replayed cache file is ``<root>/cachefiles/<kernel>/<GPU>.json``."""
    path = Path(tuning_options.cachefile)
    return path.parent.name, path.name.removesuffix(".json")


def claim_copy(root: Path, kernel: str, gpu: str) -> tuple[Path, int]:
    """(a fresh DB directory nobody used yet, its index): the next prepared copy, claimed by an
    atomic rename; a new copy of ``base`` when all prepared ones are used."""
    case = root / "dbs" / kernel / gpu
    used = case / "used"
    used.mkdir(exist_ok=True)
    for src in sorted((case / "copies").iterdir(), key=lambda p: int(p.name)):
        dst = used / src.name
        try:
            os.rename(src, dst)
        except OSError:  # claimed by someone else meanwhile
            continue
        return dst, int(src.name)
    n = len(list(used.iterdir()))
    while (used / str(n)).exists():
        n += 1
    shutil.copytree(case / "base", used / str(n))
    return used / str(n), n


def claim_seed(root: Path, kernel: str, gpu: str, variant: str) -> int:
    """The seed of the next run of ``variant`` on the case: 0, 1, 2, ... in the order the runs
    start (claimed by an atomic ``mkdir``, so runs in parallel never share one)."""
    d = root / "dbs" / kernel / gpu / "seeds" / variant
    d.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        try:
            (d / str(n)).mkdir()
            return n
        except FileExistsError:
            n += 1


class TunedbWarmStart(OptAlg):
    """tunedb's WarmStart on a fresh copy of the case's imported DB (see the module docstring)."""

    #: ``TuneOptions`` overrides of this variant (beside the seed)
    options: dict[str, Any] = {}

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = Path(root)

    def __call__(self, func: Any, searchspace: Any) -> tuple[Any, float]:
        kernel, gpu = case_of(func.tuning_options)
        db_dir, index = claim_copy(self.root, kernel, gpu)
        seed = claim_seed(self.root, kernel, gpu, type(self).__name__)
        t0 = time.perf_counter()
        db = tunedb.open(str(db_dir))
        strategy = WarmStart(db, warm_start_options(seed=seed, **self.options))
        n0 = len(func.results)
        try:
            results = strategy.tune(searchspace, func.runner, func.tuning_options)
            t_tune = time.perf_counter()
        finally:
            db.close()
        t1 = time.perf_counter()
        # the methodology's T4 schema takes numbers, strings and lists per result key: a nested
        # object (WarmStart's "tunedb_estimate") is left out of what it scores
        func.results.extend({k: v for k, v in r.items() if not isinstance(v, dict)} for r in results)
        run = strategy.last_run
        own = [r for r in results if r.get("tunedb") != "db"]
        line = {
            "variant": type(self).__name__, "kernel": kernel, "gpu": gpu, "copy": index, "seed": seed,
            "results": len(results),
            "kt_fevals": None if run is None else run.kt_fevals,
            "db_answers": None if run is None else run.db_answers,
            "stopped_by": None if run is None else run.stopped_by,
            "target": None if run is None else run.target.get("name"),
            # seconds: open + tune + close; the tune call alone; WarmStart's own account
            "wall_s": t1 - t0, "tune_s": t_tune - t0, "warmstart_wall_s": None if run is None else run.wall_s,
            "overhead": None if run is None else run.overhead,
            # what the methodology will count as this run's non-device time (ms -> s)
            "strategy_time_s": sum(float(r.get("strategy_time", 0) or 0) for r in own) / 1e3,
            "framework_time_s": sum(float(r.get("framework_time", 0) or 0) for r in own) / 1e3,
            "results_before": n0,
            # the guard's report (TuneResult.surrogate["guard"]: rho, share, fired, trace per round)
            "guard": (getattr(strategy.last_result, "surrogate", None) or {}).get("guard"),
        }
        log = self.root / "log"
        log.mkdir(exist_ok=True)
        with (log / f"warmstart-{os.getpid()}.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, default=str) + "\n")
        best = min((r for r in results if isinstance(r.get("time"), (int, float))), key=lambda r: r["time"],
                   default=None)
        return (None if best is None else tuple(best[k] for k in searchspace.tune_params)), (
            float("inf") if best is None else float(best["time"]))


class TunedbWarmStartNoGuard(TunedbWarmStart):
    """``TunedbWarmStart`` with the guard against misleading history off (``guard=False``): the
    benchmark's guard-off row."""

    options = {"guard": False}


class UnionOfBests(OptAlg):
    """The other GPUs' ok configs, best first, round-robin over the GPUs; then random configs."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = Path(root)

    def __call__(self, func: Any, searchspace: Any) -> tuple[Any, float]:
        kernel, gpu = case_of(func.tuning_options)
        keys = list(searchspace.tune_params)
        head = json.loads((self.root / "bests" / kernel / f"{gpu}.json").read_text(encoding="utf-8"))
        order = [tuple(c[k] for k in keys) for c in head]
        seen = set(order)
        rest = [tuple(c) for c in searchspace.list if tuple(c) not in seen]
        random.Random().shuffle(rest)
        best: tuple[Any, float] = (None, float("inf"))
        for x in order + rest:  # StopCriterionReached ends the run (OptAlgWrapper catches it)
            cost = func(list(x))
            if cost < best[1]:
                best = (x, cost)
        return best
