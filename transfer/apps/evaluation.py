"""Leave-one-device-out evaluation of transfer on replayed Kernel Tuner data.

An experiment on top of the search (the apps layer): shared by ``benchmarks/bench_transfer.py``,
``benchmarks/transfer_diagnostics.py``, ``benchmarks/bench_methodology.py`` and
``notebooks/03_replay_gpus.ipynb`` (which runs against the installed package, so this ships with
it rather than living in ``benchmarks/``).  For a held-out
device, a fresh DB holds the other devices' records (all of them, as the cache files hold them);
the held-out device is replayed (``tunedb.transfer.measure.replay``) and tuned four ways:

``warm``          tunedb: the nearest entries' best configs seed a cost-model-ranked local search
``cold``          tunedb's local search from a random start, no retrieval, no prior model
``random``        random search without replacement (mean over ``random_seeds`` seeds)
``nearest_only``  the best config of the most similar device, measured once
``diy_union``     the do-it-yourself baseline: the union of every other device's best configs,
                  round-robin (each one's best, then each one's second best, ...; de-duplicated),
                  then random (``union_of_bests``; mean over the random tails' seeds)

``leave_one_out`` also runs named tuner *variants* (``TuneOptions`` overrides, e.g. today's
defaults beside the old ones) on fresh copies of the same DB, each with several seeds, so every
strategy is measured side by side in one run.

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
from dataclasses import dataclass, field
from pathlib import Path

from tunedb.index import ParquetStore
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


def union_of_bests(datas: dict[str, ReplayData], held: str, n: int | None = None, *, seed: int = 0,
                   depth: int | None = None) -> list[dict]:
    """The do-it-yourself baseline's evaluation order on ``held``: round-robin over the other
    devices (in ``datas`` order): each one's best ok config, then each one's second best, ...
    (de-duplicated, at most ``depth`` per device; None: all of them), then the rest of ``held``'s
    space in a random order (``random.Random(seed)``).  The first ``n`` configs (None: all)."""
    ranked = []
    for dev, d in datas.items():
        if dev == held:
            continue
        ok = sorted((r.cost, r.config_json) for r in d.results.values() if r.status == "ok" and r.cost)
        ranked.append([c for _, c in ok[:depth]])
    out: list[str] = []
    seen: set[str] = set()
    cap = n if n is not None else len(datas[held].results) + sum(len(r) for r in ranked)
    for i in range(max((len(r) for r in ranked), default=0)):
        for lst in ranked:
            if i < len(lst) and lst[i] not in seen:
                seen.add(lst[i])
                out.append(lst[i])
        if len(out) >= cap:
            break
    if len(out) < cap:
        rest = [c for c in datas[held].results if c not in seen]
        random.Random(seed).shuffle(rest)
        out.extend(rest)
    import json

    return [json.loads(c) for c in out[:cap]]


def order_history(data: ReplayData, configs: list[dict]) -> list:
    """``TuneResult.history`` (``[evaluation, best cost so far]``) of measuring ``configs`` on
    ``data`` in that order (a config absent from the file or failed there counts, as inf)."""
    from tunedb.index.model.keys import canonical_json

    best, hist = None, []
    for i, c in enumerate(configs, 1):
        r = data.results.get(canonical_json(dict(c)))
        if r is not None and r.status == "ok" and r.cost and (best is None or r.cost < best):
            best = r.cost
        hist.append([i, best])
    return hist


def union_curve(datas: dict[str, ReplayData], held: str, budgets=BUDGETS, seeds: int = 3) -> dict:
    """Mean fraction of ``held``'s optimum ``union_of_bests`` reaches at each budget, over
    ``seeds`` random tails (budget -> fraction)."""
    _, opt = datas[held].optimum()
    hists = [order_history(datas[held], union_of_bests(datas, held, max(budgets), seed=s)) for s in range(seeds)]
    return {b: statistics.fmean(frac(opt, best_within(h, b)) for h in hists) for b in budgets}


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
    """What the strategies did on one held-out device (see the module docstring)."""

    device: str
    optimum: float
    warm_history: list
    cold_history: list
    nearest_device: str | None
    nearest_cost: float | None
    random: dict            # budget -> mean fraction of optimum
    random_to_95: float     # expected evaluations of random search to reach 95% of the optimum
    warm_to_95: int | None  # evaluations warm needed (None: not within max(budgets))
    diy_union: dict = field(default_factory=dict)   # budget -> mean fraction of optimum (union_of_bests)
    #: strategy name -> the histories of its seeds (``warm`` and ``cold`` among them)
    histories: dict = field(default_factory=dict)
    #: strategy name -> the TuneResult.surrogate of its first seed (rgpe weights over time)
    surrogates: dict = field(default_factory=dict)

    def fraction(self, strategy: str, budget: int) -> float:
        """Fraction of the optimum ``strategy`` reached within ``budget`` evaluations (tuner
        strategies: the mean over their seeds)."""
        if strategy in self.histories:
            return statistics.fmean(frac(self.optimum, best_within(h, budget)) for h in self.histories[strategy])
        if strategy == "warm":
            return frac(self.optimum, best_within(self.warm_history, budget))
        if strategy == "cold":
            return frac(self.optimum, best_within(self.cold_history, budget))
        if strategy == "random":
            return self.random[budget]
        if strategy == "diy_union":
            return self.diy_union[budget]
        if strategy == "nearest_only":
            return frac(self.optimum, self.nearest_cost)
        raise ValueError(f"unknown strategy {strategy!r}")


def leave_one_out(datas: dict[str, ReplayData], held: str, budgets=BUDGETS, random_seeds: int = 50,
                  seed: int = 0, *, seeds: int = 1, variants: dict[str, dict] | None = None,
                  recorded_costs: bool = False) -> HeldOut:
    """Hold ``held`` out of ``datas``: warm (DB of the others), cold, random, nearest-only and the
    do-it-yourself union of bests on it, plus each of ``variants`` (name -> ``TuneOptions``
    overrides of a warm run, e.g. ``{"warm_old": {"surrogate": "model", "seed_order": "rank"}}``).

    Every tuner strategy runs with ``seeds`` seeds (``seed``, ``seed + 1``, ...), each on a fresh
    copy of a DB holding every record of the other devices (and the family's base model, fitted
    once), so no run sees another's measurements.  The nearest device is queried before any
    search runs.  The DBs live in a temporary folder removed on return.

    ``recorded_costs``: score a tuner run by the configs it evaluated, in order, each at its
    recorded cost on ``held`` (:func:`order_history`, the cost the union of bests and the optimum
    are read from) instead of by its own history, so every strategy is scored by the same numbers."""
    from tunedb.transfer.search import modelcache

    hd = datas[held]
    _, opt = hd.optimum()
    work = Path(tempfile.mkdtemp(prefix="tunedb_lodo_"))
    runs = {"warm": {}, "cold": {"cold": True}, **(variants or {})}
    hist: dict[str, list] = {name: [] for name in runs}
    surr: dict[str, dict] = {}
    try:
        db = ParquetStore.open(work / "base")
        for dev, d in datas.items():
            if dev != held:
                db.commit(list(d.results.values()))
        backend = KernelTunerReplayBackend(hd)
        matches = [m for m in db.nearest(hd.target, hd.workload, k=1, exclude_target=True) if m.best]
        nearest_cost = None
        nearest_dev = None
        if matches:
            nearest_dev = matches[0].target_name
            r = backend.measure(hd.target, hd.workload, matches[0].best[0].config)
            nearest_cost = r.cost if r.status == "ok" else None
        modelcache.base_model(db, hd.workload.get("family"), seed=0)  # persisted: every copy loads it
        n = 0
        for name, over in runs.items():
            for s in range(seed, seed + seeds):
                n += 1
                if not over.get("cold"):
                    shutil.copytree(work / "base", work / f"run{n}")
                rdb = ParquetStore.open(work / f"run{n}")  # cold: an empty DB
                cfgs: list[dict] = []
                # a bare Tuner: a harness run has no summary, stopwatch or record count to keep
                res = Tuner(rdb, hd.target, hd.workload, hd.space, backend,
                            TuneOptions(**{"budget": max(budgets), "seed": s, **over}),
                            on_evaluation=lambda c, _rec, _cached, _origin, cfgs=cfgs: cfgs.append(c)).run()
                hist[name].append(order_history(hd, cfgs) if recorded_costs else res.history)
                surr.setdefault(name, res.surrogate)
                shutil.rmtree(work / f"run{n}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok_costs = hd.costs_ok()
    n_total = hd.space.size()
    rnd = random_curve(ok_costs, n_total, budgets, random_seeds, opt)
    good = sum(1 for c in ok_costs if opt / c >= 0.95)
    warm_to = [i for i, b in hist["warm"][0] if b is not None and b <= opt / 0.95]
    return HeldOut(device=held, optimum=opt, warm_history=hist["warm"][0], cold_history=hist["cold"][0],
                   nearest_device=nearest_dev, nearest_cost=nearest_cost, random=rnd,
                   random_to_95=(n_total + 1) / (good + 1), warm_to_95=warm_to[0] if warm_to else None,
                   diy_union=union_curve(datas, held, budgets, seeds=max(seeds, 1)),
                   histories=hist, surrogates=surr)
