"""Leave-one-device-out evaluation of transfer on replayed Kernel Tuner data.

Shared by ``benchmarks/bench_transfer.py`` and ``notebooks/03_replay_gpus.ipynb``.  For a held-out
device, a fresh DB holds the other devices' records (all of them, as the cache files hold them);
the held-out device is replayed (``tunedb.transfer.measure.replay``) and tuned four ways:

``warm``          tunedb: the nearest entries' best configs seed a cost-model-ranked local search
``cold``          tunedb's local search from a random start, no retrieval, no prior model
``random``        random search without replacement (mean over ``random_seeds`` seeds)
``nearest_only``  the best config of the most similar device, measured once

and one diagnostic that no tuner can run (it uses all of the held-out device's measurements):
``hindsight_mixture`` -- the held-out device's log times fitted, by least squares over every config,
as a linear mix of the other devices' log times; the fraction of the optimum its 20 best-predicted
configs reach tells whether the other devices' data rank the held-out optimum well at all.

Quality at a budget is the fraction of the held-out device's true optimum reached
(``optimum / best found``, 1.0 = optimal; 0 when nothing ran).  Costs are seconds.
"""

from __future__ import annotations

import math
import random
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tunedb.index import TuningDB
from tunedb.transfer.measure.replay import KernelTunerReplayBackend, ReplayData
from tunedb.transfer.search.tuner import TuneOptions, Tuner

BUDGETS = (5, 10, 20, 50)


def best_within(history: list, budget: int) -> float | None:
    """Best cost so far after ``budget`` evaluations of a ``TuneResult.history``."""
    best = None
    for i, b in history:
        if i > budget:
            break
        best = b
    return best


def frac(opt: float, found: float | None) -> float:
    """Fraction of the optimum reached: ``opt / found`` (0.0 when nothing was found)."""
    return 0.0 if found is None or not math.isfinite(found) else opt / found


def random_curve(costs: list[float], n_total: int, budgets, seeds: int, opt: float) -> dict:
    """Mean fraction of optimum at each budget over ``seeds`` random orders (failed configs count)."""
    out = {}
    pool = costs + [math.inf] * (n_total - len(costs))
    for b in budgets:
        fr = []
        for s in range(seeds):
            rng = random.Random(s)
            sample = rng.sample(pool, min(b, len(pool)))
            fr.append(frac(opt, min(sample)))
        out[b] = statistics.fmean(fr)
    return out


def load_devices(folder: str | Path) -> dict[str, ReplayData]:
    """Device name (file stem) -> ReplayData for every ``*.json.gz`` cache in ``folder``
    (the ``*_T4`` duplicates in another results format are skipped)."""
    files = sorted(Path(folder).glob("*.json.gz"))
    return {f.name.split(".")[0]: ReplayData(f) for f in files if "_T4" not in f.name}


def hindsight_mixture(datas: dict[str, ReplayData], held: str, top: int = 20) -> dict:
    """Fraction of ``held``'s optimum reached by the ``top`` configs ranked by the best linear
    mix (with intercept) of the other devices' log times, fitted on all of ``held``'s ok configs.

    Only configs ``ok`` on every device take part (the optimum is still ``held``'s over all its
    configs).  Returns ``{"fraction": f, "optimum_rank": r, "configs": n, "weights": {...}}``,
    ``optimum_rank`` being the 0-based place of ``held``'s best shared config in the mix's order."""
    import numpy as np

    others = [d for d in datas if d != held]
    _, opt = datas[held].optimum()
    ok = {dev: {k: r.cost for k, r in d.results.items() if r.status == "ok" and r.cost}
          for dev, d in datas.items()}
    keys = [k for k in ok[held] if all(k in ok[o] for o in others)]
    if len(keys) < len(others) + 2:
        return {"fraction": None, "optimum_rank": None, "configs": len(keys), "weights": {}}
    y = np.log([ok[held][k] for k in keys])
    X = np.column_stack([np.log([ok[o][k] for k in keys]) for o in others] + [np.ones(len(keys))])
    w, *_ = np.linalg.lstsq(X, y, rcond=None)
    order = np.argsort(X @ w, kind="stable")
    best_found = float(np.exp(y[order[:top]].min()))
    rank = int(np.flatnonzero(order == int(np.argmin(y)))[0])
    return {"fraction": frac(opt, best_found), "optimum_rank": rank, "configs": len(keys),
            "weights": {name: round(float(v), 4) for name, v in zip(others + ["intercept"], w)}}


@dataclass
class HeldOut:
    """What the four strategies did on one held-out device (see the module docstring)."""

    device: str
    optimum: float
    warm_history: list
    cold_history: list
    nearest_device: str | None
    nearest_cost: float | None
    random: dict            # budget -> mean fraction of optimum
    random_to_95: float     # expected evaluations of random search to reach 95% of the optimum
    warm_to_95: int | None  # evaluations warm needed (None: not within max(budgets))

    def fraction(self, strategy: str, budget: int) -> float:
        """Fraction of the optimum ``strategy`` reached within ``budget`` evaluations."""
        if strategy == "warm":
            return frac(self.optimum, best_within(self.warm_history, budget))
        if strategy == "cold":
            return frac(self.optimum, best_within(self.cold_history, budget))
        if strategy == "random":
            return self.random[budget]
        if strategy == "nearest_only":
            return frac(self.optimum, self.nearest_cost)
        raise ValueError(f"unknown strategy {strategy!r}")


def leave_one_out(datas: dict[str, ReplayData], held: str, budgets=BUDGETS, random_seeds: int = 50,
                  seed: int = 0) -> HeldOut:
    """Hold ``held`` out of ``datas``: warm (DB of the others), cold, random and nearest-only on it.

    The DB holds every record of the other devices.  The nearest device is queried before any search runs, so the DB then holds the other devices
    only.  The DBs live in a temporary folder removed on return."""
    hd = datas[held]
    _, opt = hd.optimum()
    work = Path(tempfile.mkdtemp(prefix="tunedb_lodo_"))
    try:
        db = TuningDB.open(work / "warm")
        for dev, d in datas.items():
            if dev != held:
                db.commit(list(d.results.values()))
        backend = KernelTunerReplayBackend(hd)
        # before the warm search: afterwards the DB also holds the held-out device's own records
        matches = [m for m in db.nearest(hd.target, hd.workload, k=1, exclude_target=True) if m.best]
        nearest_cost = None
        nearest_dev = None
        if matches:
            nearest_dev = matches[0].target_name
            r = backend.measure(hd.target, hd.workload, matches[0].best[0].config)
            nearest_cost = r.cost if r.status == "ok" else None
        warm = Tuner(db, hd.target, hd.workload, hd.space, backend,
                     TuneOptions(budget=max(budgets), seed=seed, patience=10_000)).run()
        cold = Tuner(TuningDB.open(work / "cold"), hd.target, hd.workload, hd.space, backend,
                     TuneOptions(budget=max(budgets), seed=seed, cold=True, patience=10_000)).run()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok_costs = hd.costs_ok()
    n_total = hd.space.size()
    rnd = random_curve(ok_costs, n_total, budgets, random_seeds, opt)
    good = sum(1 for c in ok_costs if opt / c >= 0.95)
    return HeldOut(device=held, optimum=opt, warm_history=warm.history, cold_history=cold.history,
                   nearest_device=nearest_dev, nearest_cost=nearest_cost, random=rnd,
                   random_to_95=(n_total + 1) / (good + 1), warm_to_95=warm.evaluations_to_reach(opt / 0.95))
