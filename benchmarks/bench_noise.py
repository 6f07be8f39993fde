"""Choosing and claiming under measurement noise: today's selection against the estimator.

True costs: a real Kernel Tuner cache (``--cache``, default the convolution kernel measured on an
A100, ``../shared/data/kernel_tuner/convolution_milo/A100.json.gz``): its recorded times are the
truth.  Measurements: ``tunedb.transfer.measure.synthetic.SyntheticBackend``, the truth times
injected noise (``NoiseModel``: per record a lognormal machine-state factor of CV ``cv`` shared
by its 5 repeats, a per-repeat jitter of CV ``cv / 4``, and optionally 3x outliers with
probability 0.05).  Noise levels: CV 5 %, 20 %, 50 %, each without and with outliers.

Per level and seed (``--seeds``, default 10) one cold ``Tuner`` run in a fresh
``tunedb.open("memory:")`` with ``TuneOptions(budget=--budget (30), cold=True, seed=seed,
confirm_top=3, confirm_rounds=3)`` (``--modes cold,warm`` adds warm runs: the store first holds
every record of the other devices' caches in the same folder, and the run retrieves seeds and a
model from them); then, from the SAME run's records, two selections:

``old``        today's selection: the ok record with the lowest ``cost`` (the mean of its
               repeats; a minimum over measurements taken at different moments) - its config
               and that cost;
``new``        ``TuneResult.best_config`` / ``best_cost``: the lowest estimate
               (``tunedb.index.model.estimate``: median of per-record medians, confirmation
               re-measurements only once a config has >= 2 of them).

Both select among the same records, i.e. the same measurements (budget + confirmations).  For
the budget's honesty a third column, ``old+``, runs today's selection on a separate run of
``budget + confirmations`` search evaluations (no confirmation): the extra measurements spent on
search instead.

Scores (the chosen config's true cost is ``meta["true_s"]`` / ``SyntheticBackend.true_cost``)
  hit5      how often the chosen config's true cost is within 5 % of the true best among the
            configs that run measured;
  opt       median of chosen true cost / the cache's true optimum (1.00 = the optimum);
  bias      reported value / the chosen config's true cost - 1, in %: median and IQR; for the
            new method also split by the winner's estimate basis (``confirmed``: from its
            confirmation re-measurements; ``unconfirmed``: a config that was not a leader when
            the confirmation ran, estimated from its search sample);
  false-win claims of "A beats B" on pairs whose true costs differ by less than 1 % (per run:
            the new winner against itself, a random measured config against itself, and
            ``--pairs`` distinct configs near the top whose true costs are within 1 %), each
            pair measured afresh (a separate backend, independent noise):
            ``old``     one record each; a win is claimed when the two records' costs (means)
                        differ by more than 1 % (a 1 % dead band: differences the claim is not
                        about are not claimed);
            ``old-r``   the same rule with as many records per side as the new method used
                        (min over records of the mean, more measurements);
            ``strict``  one record each; a win is claimed only when the two records' repeat
                        ranges do not overlap (the most careful claim one measurement each allows);
            ``new``     ``compare(interleaved(A, B), question="sign")``: a win only on ``faster``
                        or ``slower`` (each round one record per side, its median of repeats);
            the measurements the new claims spent per pair are reported (``meas/pair``).

Goals (printed as met / not met): the new method's false-win rate <= 5 % at every level; the
new method's median bias within +-3 % at CV 20 % (with and without outliers); the new
selection's true quality the same or better than today's at the same budget over all runs,
judged per run (both methods choose from the same run's records): the new choice's true cost is
no worse than the old one's in at least as many runs as it is worse (a sign test's "not worse"),
and the median of new / old true cost over all runs is <= 1.01.

    python benchmarks/bench_noise.py                       # 6 levels x 10 seeds, budget 30
    python benchmarks/bench_noise.py --seeds 3 --budget 20 --json
    python benchmarks/bench_noise.py --modes cold,warm     # + warm runs (about 4 s each)
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tunedb
from tunedb.index.model.estimate import record_value
from tunedb.index.model.keys import key_of
from tunedb.transfer.measure.compare import compare, interleaved
from tunedb.transfer.measure.synthetic import NoiseModel, SyntheticBackend
from tunedb.transfer.search.tuner import TuneOptions, Tuner

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT.parent / "shared" / "data" / "kernel_tuner" / "convolution_milo" / "A100.json.gz"
#: (cv, outlier probability) of each noise level
LEVELS = ((0.05, 0.0), (0.05, 0.05), (0.20, 0.0), (0.20, 0.05), (0.50, 0.0), (0.50, 0.05))
OUTLIER_FACTOR = 3.0
CONFIRM_TOP, CONFIRM_ROUNDS = 3, 3
NEAR = 0.01        # pairs whose true costs differ by less than this are "the same"
OLD_DEAD_BAND = 0.01
HIT = 0.05
FALSE_WIN_GOAL = 0.05
BIAS_GOAL = 0.03
CLAIMS = ("old", "old_r", "strict", "new")
VERDICTS = ("faster", "slower", "equivalent", "inconclusive")


def label(cv: float, p: float) -> str:
    return f"cv {cv * 100:g}%" + (" +out" if p > 0 else "")


# ------------------------------------------------------------------------------------ helpers
def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def near_pairs(truth: dict, top: int = 300) -> list[tuple[dict, dict, float]]:
    """Pairs (A, B, true A / B) of distinct configs among the ``top`` fastest whose true costs
    differ by less than NEAR (consecutive in true-cost order)."""
    ranked = sorted(truth.values(), key=lambda cv: cv[1])[:top]
    out = []
    for (ca, ta), (cb, tb) in zip(ranked, ranked[1:]):
        if abs(ta / tb - 1) < NEAR:
            out.append((ca, cb, ta / tb))
    return out


def claim_old(ra: list, rb: list) -> bool:
    """Today's rule: min over each side's records of the mean; a win when they differ by > 1 %."""
    a = min(r.cost for r in ra)
    b = min(r.cost for r in rb)
    return abs(a / b - 1) > OLD_DEAD_BAND


def claim_strict(ra, rb) -> bool:
    """One record each: a win only when the repeat ranges do not overlap."""
    return max(ra.costs) < min(rb.costs) or max(rb.costs) < min(ra.costs)


def pair_trial(be: SyntheticBackend, a: dict, b: dict) -> dict:
    """Every method's claim on one pair, each from fresh measurements of ``be``."""
    t, w = be.target, be.workload
    one_a, one_b = be.measure(t, w, a), be.measure(t, w, b)
    old = claim_old([one_a], [one_b])
    strict = claim_strict(one_a, one_b)
    cmp = compare(interleaved(lambda: record_value(be.measure(t, w, a)), lambda: record_value(be.measure(t, w, b))),
                  question="sign")
    n = max(len(cmp.a), 1)
    ra = [be.measure(t, w, a) for _ in range(n)]
    rb = [be.measure(t, w, b) for _ in range(n)]
    return {"old": old, "strict": strict, "old_r": claim_old(ra, rb), "new": cmp.verdict in ("faster", "slower"),
            "verdict": cmp.verdict, "rounds": cmp.rounds, "meas": 2 * cmp.rounds}


def warm_history(cache: Path) -> list:
    """Every record of the other devices' caches in ``cache``'s folder (Kernel Tuner importer),
    the history a warm run retrieves seeds and models from."""
    from tunedb.transfer.interop import collect

    files = sorted(f for f in cache.parent.glob("*.json.gz")
                   if "_T4" not in f.name and f.name.split(".")[0] != cache.name.split(".")[0])
    recs, _ = collect("kernel-tuner", files)
    return list(recs)


# ------------------------------------------------------------------------------------ one run
def fresh_db(history: list | None) -> Any:
    """A new in-memory store: empty (cold) or holding ``history`` (the other devices' records)."""
    db = tunedb.open("memory:")
    if history:
        db.commit(history)
    return db


def one_run(data: Any, truth: dict, optimum: float, pairs_pool: list, cv: float, p: float, seed: int,
            budget: int, n_pairs: int, history: list | None = None) -> dict:
    """One tuning run at noise (cv, p) and its scores (module docstring); ``history``: warm."""
    cold = not history
    noise_seed = 7919 * seed + int(cv * 1000) * 31 + int(p * 1000) + (0 if cold else 1_000_003)
    be = SyntheticBackend(data, NoiseModel(cv=cv, outlier_p=p, outlier_factor=OUTLIER_FACTOR, seed=noise_seed))
    db = fresh_db(history)
    t0 = time.perf_counter()
    res = Tuner(db, be.target, be.workload, be.space(), be,
                TuneOptions(budget=budget, cold=cold, seed=seed, confirm_top=CONFIRM_TOP,
                            confirm_rounds=CONFIRM_ROUNDS)).run()
    tune_s = time.perf_counter() - t0
    recs = [r for r in db.entry_records(be.target, be.workload) if r.status == "ok" and r.costs]
    measured = {r.config_key: r.meta["true_s"] for r in recs}
    true_best = min(measured.values())
    old_rec = min(recs, key=lambda r: (r.cost, r.config_key))
    new_cfg, new_cost = res.best_config, res.best_cost
    new_true = be.true_cost(new_cfg)
    db_top = db.best_costs(be.target, be.workload, 1)[0]
    est = getattr(res, "best_estimate", None) or {}
    out: dict[str, Any] = {
        "seed": seed, "measurements": res.measurements + res.remeasurements, "confirmations": res.remeasurements,
        "tune_s": round(tune_s, 3),
        "old": {"true": old_rec.meta["true_s"], "reported": old_rec.cost, "true_best_measured": true_best},
        "new": {"true": new_true, "reported": new_cost, "true_best_measured": true_best,
                "basis": est.get("basis"), "selection_biased": getattr(res, "selection_biased", None),
                "same_as_db_best": db_top.config_key == key_of(new_cfg) and db_top.estimate.value == new_cost},
    }
    # today's selection with the confirmations spent on search instead
    be2 = SyntheticBackend(data, NoiseModel(cv=cv, outlier_p=p, outlier_factor=OUTLIER_FACTOR, seed=noise_seed))
    db2 = fresh_db(history)
    res2 = Tuner(db2, be2.target, be2.workload, be2.space(), be2,
                 TuneOptions(budget=budget + res.remeasurements, cold=cold, seed=seed)).run()
    recs2 = [r for r in db2.entry_records(be2.target, be2.workload) if r.status == "ok" and r.costs]
    old2 = min(recs2, key=lambda r: (r.cost, r.config_key))
    out["old+"] = {"true": old2.meta["true_s"], "reported": old2.cost,
                   "true_best_measured": min(r.meta["true_s"] for r in recs2),
                   "measurements": res2.measurements + res2.remeasurements}
    for m in ("old", "new", "old+"):
        d = out[m]
        d["hit5"] = d["true"] <= d["true_best_measured"] * (1 + HIT)
        d["opt"] = d["true"] / optimum
        d["bias"] = d["reported"] / d["true"] - 1
    # claims on pairs that are the same (true costs within 1 %), on fresh measurements
    pb = SyntheticBackend(data, NoiseModel(cv=cv, outlier_p=p, outlier_factor=OUTLIER_FACTOR,
                                           seed=noise_seed + 104729))
    rng = random.Random(noise_seed)
    chosen = [(new_cfg, new_cfg), (rng.choice(recs).config,) * 2]
    chosen += [(a, b) for a, b, _ in rng.sample(pairs_pool, min(n_pairs, len(pairs_pool)))]
    trials = [pair_trial(pb, a, b) for a, b in chosen]
    out["pairs"] = {"n": len(trials), **{m: sum(t[m] for t in trials) for m in CLAIMS},
                    "verdicts": {v: sum(t["verdict"] == v for t in trials) for v in VERDICTS},
                    "meas_new": sum(t["meas"] for t in trials)}
    return out


# ------------------------------------------------------------------------------------ summary
def summarise(runs: list[dict]) -> dict:
    s: dict[str, Any] = {"runs": len(runs)}
    for m in ("old", "new", "old+"):
        bias = [r[m]["bias"] * 100 for r in runs]
        opt = [r[m]["opt"] for r in runs]
        s[m] = {"hit5": sum(r[m]["hit5"] for r in runs) / len(runs),
                "opt_median": statistics.median(opt), "opt_p90": pct(opt, 90),
                "bias_median_pct": statistics.median(bias), "bias_p25_pct": pct(bias, 25),
                "bias_p75_pct": pct(bias, 75),
                "measurements": statistics.median(r["measurements"] if m != "old+" else r["old+"]["measurements"]
                                                  for r in runs)}
    s["new"]["confirmed_basis"] = sum(r["new"]["basis"] == "confirmed" for r in runs) / len(runs)
    for basis in ("confirmed", "all"):
        b = [r["new"]["bias"] * 100 for r in runs if r["new"]["basis"] == basis]
        s["new"][f"bias_median_pct_{basis}"] = statistics.median(b) if b else None
    s["new"]["same_as_db_best"] = sum(bool(r["new"]["same_as_db_best"]) for r in runs) / len(runs)
    n = sum(r["pairs"]["n"] for r in runs)
    s["pairs"] = n
    s["false_win"] = {m: sum(r["pairs"][m] for r in runs) / n for m in CLAIMS}
    s["new_verdicts"] = {v: sum(r["pairs"]["verdicts"][v] for r in runs) for v in VERDICTS}
    s["meas_per_pair_new"] = sum(r["pairs"]["meas_new"] for r in runs) / n
    s["tune_s_median"] = statistics.median(r["tune_s"] for r in runs)
    return s


def goals(levels: dict, all_runs: list[dict]) -> dict:
    """The goals (module docstring) over the levels' summaries and every run."""
    fw = {k: v["false_win"]["new"] for k, v in levels.items()}
    bias = {k: v["new"]["bias_median_pct"] for k, v in levels.items() if "cv 20%" in k}
    n = sum(v["runs"] for v in levels.values())
    hit = {m: sum(v[m]["hit5"] * v["runs"] for v in levels.values()) / n for m in ("old", "new", "old+")}
    opt = {m: statistics.median(r[m]["opt"] for r in all_runs) for m in ("old", "new", "old+")}
    ratios = [r["new"]["opt"] / r["old"]["opt"] for r in all_runs]
    paired = {"new_better": sum(x < 1 - 1e-12 for x in ratios), "new_worse": sum(x > 1 + 1e-12 for x in ratios),
              "same": sum(abs(x - 1) <= 1e-12 for x in ratios), "median_ratio": statistics.median(ratios)}
    g = {
        "false_win_le_5pct_every_level": {"met": all(x <= FALSE_WIN_GOAL for x in fw.values()), "values": fw},
        "bias_within_3pct_at_cv20": {"met": all(abs(x) <= BIAS_GOAL * 100 for x in bias.values()), "values": bias},
        "quality_same_or_better_than_old": {
            "met": paired["new_better"] >= paired["new_worse"] and paired["median_ratio"] <= 1.01,
            "paired_runs": paired, "hit5_all_runs": hit, "opt_median_all_runs": opt},
    }
    return g


def table(levels: dict) -> str:
    head = (f"{'noise':<17}{'method':<7}{'meas':>5}{'hit5':>7}{'opt med':>9}{'bias med':>10}{'bias IQR':>17}"
            f"{'false-win':>11}")
    lines = [head, "-" * len(head)]
    nb = {"confirmed": "confirmed", "all": "unconfirmed"}
    for k, v in levels.items():
        fw = v["false_win"]
        for m, fwm in (("old", fw["old"]), ("new", fw["new"]), ("old+", None)):
            x = v[m]
            iqr = f"{x['bias_p25_pct']:+.1f}..{x['bias_p75_pct']:+.1f}%"
            f = "" if fwm is None else f"{fwm * 100:.1f}%"
            lines.append(f"{k if m == 'old' else '':<17}{m:<7}{x['measurements']:>5.0f}{x['hit5'] * 100:>6.0f}%"
                         f"{x['opt_median']:>9.3f}{x['bias_median_pct']:>+9.1f}%{iqr:>17}{f:>11}")
        lines.append(f"{'':<17}pairs {v['pairs']}: false wins old-r {fw['old_r'] * 100:.1f}%, "
                     f"strict {fw['strict'] * 100:.1f}%; new used {v['meas_per_pair_new']:.1f} meas/pair; "
                     f"new winner confirmed {v['new']['confirmed_basis'] * 100:.0f}%, bias "
                     + ", ".join(f"{nb[b]} {v['new'][f'bias_median_pct_{b}']:+.1f}%" for b in nb
                                 if v["new"][f"bias_median_pct_{b}"] is not None)
                     + f"; new answer is tunedb best's first row {v['new']['same_as_db_best'] * 100:.0f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="Kernel Tuner cache whose times are the truth")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--pairs", type=int, default=8, help="near pairs of distinct configs per run (plus 2 self-pairs)")
    ap.add_argument("--levels", default="", help="only these levels, e.g. 0.2:0,0.2:0.05 (cv:outlier_p)")
    ap.add_argument("--modes", default="cold", help="cold and/or warm (warm: the other devices' records of the "
                    "cache's folder in the store; about 4 s a run)")
    ap.add_argument("--json", action="store_true", help="print one JSON object after the table")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    logging.getLogger("tunedb").setLevel(logging.WARNING)
    levels = LEVELS if not a.levels else tuple(tuple(float(x) for x in s.split(":")) for s in a.levels.split(","))
    t_all = time.perf_counter()
    probe = SyntheticBackend.from_kernel_tuner(a.cache)
    data = probe.data
    truth = probe.true_costs()
    _, optimum = probe.optimum()
    pool = near_pairs(truth)
    modes = [m for m in a.modes.split(",") if m]
    if set(modes) - {"cold", "warm"}:
        ap.error("--modes: cold and/or warm")
    history = warm_history(a.cache) if "warm" in modes else None
    runs: dict[str, list] = {}
    for mode in modes:
        for cv, p in levels:
            k = label(cv, p) if modes == ["cold"] else f"{mode} {label(cv, p)}"
            runs[k] = [one_run(data, truth, optimum, pool, cv, p, seed, a.budget, a.pairs,
                               history if mode == "warm" else None) for seed in range(a.seeds)]
            if not a.quiet:
                print(f"{k}: {a.seeds} runs, {time.perf_counter() - t_all:.0f} s", file=sys.stderr, flush=True)
    summary = {k: summarise(v) for k, v in runs.items()}
    verdict = goals(summary, [r for v in runs.values() for r in v])
    wall = time.perf_counter() - t_all
    print(f"truth: {a.cache.name} ({len(truth)} ok configs, optimum {optimum * 1e3:.4f} ms), {'+'.join(modes)} "
          f"Tuner runs{f' (warm: {len(history)} records of other devices)' if history else ''}, "
          f"budget {a.budget} + confirm_top={CONFIRM_TOP} x confirm_rounds={CONFIRM_ROUNDS}, {a.seeds} seeds, "
          f"{len(pool)} near pairs (< 1 %) in the pool, {wall:.0f} s")
    print(table(summary))
    for name, g in verdict.items():
        print(f"goal {name}: {'met' if g['met'] else 'NOT met'}")
    if a.json:
        print(json.dumps({"cache": str(a.cache), "budget": a.budget, "seeds": a.seeds, "pairs": a.pairs,
                          "modes": modes, "confirm_top": CONFIRM_TOP, "confirm_rounds": CONFIRM_ROUNDS,
                          "levels": summary, "goals": verdict, "wall_s": round(wall, 1),
                          "python": platform.python_version(), "runs": runs}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
