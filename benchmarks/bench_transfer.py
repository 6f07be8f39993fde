"""Transfer benchmark: does history make tuning a new device cheaper?

Replay mode (default): leave-one-device-out over the shared Kernel Tuner data
(convolution_milo, dedispersion_milo; 6 GPUs each).  For each held-out device a fresh DB holds
the other five devices' records; the held-out device is replayed.  For budgets 5, 10, 20, 50
it reports the fraction of the held-out device's true optimum reached (optimum / best found) by

  warm          tunedb with its defaults, as ``tunedb tune --replay FILE`` runs it: the nearest
                entries' best configs, interleaved by hardware similarity, seed a local search
                ranked by the RGPE transfer surrogate (surrogate.py), with the guard against
                misleading history (proposals/guard.py) giving a history-free explorer its share
  no_guard      the same with the guard off (``guard=False``)
  no_hw         ablation: the sources weighed alike (``similarity_power=0``), so the hardware
                similarity no longer orders the seeds (the RGPE weights still come from the
                device's own measurements); without workload features there is nothing to
                ablate here: every device of a data set runs the same workload
  topk_seeds    ablation: the seeds alone, no model, no guard: the family default (when there is
                one), then the sources' bests interleaved with equal quotas (``n_seeds`` = the
                budget), then neighbours of the best in random order
  diy_union     top-k, the do-it-yourself script: every other device's best, then second best,
                ... (round-robin, de-duplicated), then random (evaluation.union_of_bests)
  cold          tunedb's local search from a random start, no retrieval, no prior model
  random        random search without replacement (mean over --random-seeds seeds)
  nearest_only  the best config of the most similar device, measured once

Tuner strategies and diy_union are the mean over --seeds seeds (default 3); every run spends
its whole budget (no patience).  Every strategy is scored by the held-out device's recorded
cost of each config it evaluated (a tuner run's history is rebuilt from its evaluations), the
numbers the union of bests and the optimum are read from.  The table on stderr (and "table" in the JSON) gives the median
and the worst over the held-out devices at each budget.

plus a diagnostic no tuner can run, hindsight_mixture_at_20: the 20 configs ranked best by the
least-squares mix of the other devices' log times fitted on all of the held-out device's data
(see tunedb.transfer.apps.evaluation.hindsight_mixture); low values mean the other devices' data do not
rank the held-out optimum well, whatever the search does.  And the evaluations needed to reach
95% of the optimum (random: the exact expectation (N+1)/(m+1) for m good configs among N, which
is what infinitely many seeds average to).

Local mode (--local): real C kernels on this CPU.  The DB holds workloads of two families
tuned on one preset (cpu-x86-64-t1, SSE2 only); new shapes are tuned on cpu-native-t1 warm and
cold with equal budgets; the reference is the best a cold search finds with 4x the budget.

    python benchmarks/bench_transfer.py --json
    python benchmarks/bench_transfer.py --kernels convolution_milo --devices A100,W6600 --seeds 1
    python benchmarks/bench_transfer.py --local --json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tunedb.index import ParquetStore  # noqa: E402
from tunedb.transfer.apps.evaluation import (  # noqa: E402,F401
    BUDGETS,
    HeldOut,
    best_within,
    frac,
    hindsight_mixture,
    leave_one_out,
    load_devices,
    order_history,
    random_curve,
    union_curve,
)
from tunedb.transfer.search.tuner import TuneOptions, Tuner  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "kernel_tuner"


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


#: strategies of the replay benchmark, side by side in one run (tuner ones: mean over --seeds seeds)
STRATEGIES = ("warm", "no_guard", "no_hw", "topk_seeds", "diy_union", "cold", "random", "nearest_only")
#: the warm run's ablations (``TuneOptions`` overrides), run beside it on copies of the same DB
VARIANTS = {"no_guard": {"guard": False},
            "no_hw": {"similarity_power": 0.0},
            "topk_seeds": {"n_seeds": max(BUDGETS), "similarity_power": 0.0, "use_model": False,
                           "surrogate": "model", "guard": False}}


def held_out(datas: dict, held: str, random_seeds: int, seeds: int) -> HeldOut:
    """Leave ``held`` out (``evaluation.leave_one_out``): warm, cold and every ``VARIANTS`` run with
    ``seeds`` seeds, each on a fresh copy of a DB holding the other devices' records, plus random,
    nearest-only and the union of bests; every tuner run scored by the recorded costs of the
    configs it evaluated (``recorded_costs``), so every strategy is scored by the same numbers."""
    return leave_one_out(datas, held, BUDGETS, random_seeds, seeds=seeds, variants=VARIANTS, recorded_costs=True)


def replay_benchmark(data_dir: Path, kernels: list[str], random_seeds: int, quiet: bool, seeds: int = 3,
                     devices: list[str] | None = None) -> dict:
    rows = []
    weights = {}
    for kernel in kernels:
        datas = load_devices(data_dir / kernel)
        for held in datas:
            if devices and held not in devices:
                continue
            t0 = time.perf_counter()
            h = held_out(datas, held, random_seeds, seeds)
            mix = hindsight_mixture(datas, held, top=20)
            weights[f"{kernel}/{held}"] = h.surrogates.get("warm", {})
            for b in BUDGETS:
                rows.append({"kernel": kernel, "device": held, "budget": b,
                             **{st: h.fraction(st, b) for st in STRATEGIES},
                             "nearest_device": h.nearest_device,
                             "warm_measurements_to_95": h.warm_to_95,
                             "random_measurements_to_95": h.random_to_95,
                             "hindsight_mixture_at_20": mix["fraction"],
                             "hindsight_mixture_optimum_rank": mix["optimum_rank"]})
            _log(f"{kernel:>18} {held:>7}: " + "  ".join(
                f"{st} " + "/".join(f"{h.fraction(st, b):.3f}" for b in BUDGETS) for st in STRATEGIES[:5])
                + f"  hindsight-mix@20 {mix['fraction']:.3f}  [{time.perf_counter() - t0:.1f}s]", quiet)
    table = {st: {str(b): {"median": statistics.median(r[st] for r in rows if r["budget"] == b),
                           "worst": min(r[st] for r in rows if r["budget"] == b)} for b in BUDGETS}
             for st in STRATEGIES}
    at20 = [r for r in rows if r["budget"] == 20]
    w20 = [r["warm"] for r in at20]
    ratios = [r["random_measurements_to_95"] / r["warm_measurements_to_95"] if r["warm_measurements_to_95"]
              else r["random_measurements_to_95"] / (max(BUDGETS) + 1) for r in at20]
    summary = {
        "median_at_20": statistics.median(w20), "worst_at_20": min(w20),
        "cold_median_at_20": statistics.median(r["cold"] for r in at20),
        "random_median_at_20": statistics.median(r["random"] for r in at20),
        "nearest_only_median": statistics.median(r["nearest_only"] for r in at20),
        "median_random_over_warm_measurements_to_95": statistics.median(ratios),
        "worst_random_over_warm_measurements_to_95": min(ratios),
        "warm_never_reached_95": sum(1 for r in at20 if r["warm_measurements_to_95"] is None),
        "warm_beats_diy_worst": {str(b): table["warm"][str(b)]["worst"] > table["diy_union"][str(b)]["worst"]
                                 for b in BUDGETS},
        # the goal against top-k: at or above it at every budget, median and worst device
        "warm_at_or_above_topk": {str(b): {m: table["warm"][str(b)][m] >= table["diy_union"][str(b)][m]
                                           for m in ("median", "worst")} for b in BUDGETS},
    }
    _log(format_table(table), quiet)
    return {"devices": rows, "summary": summary, "table": table, "surrogate_weights": weights, "seeds": seeds}


def format_table(table: dict) -> str:
    """The side-by-side table: one line per strategy, median and worst at each budget."""
    head = f"{'strategy':<13}" + "".join(f"  med@{b:<3}" for b in BUDGETS) + "".join(f"  worst@{b:<3}" for b in BUDGETS)
    lines = [head]
    for st, per in table.items():
        lines.append(f"{st:<13}" + "".join(f"  {per[str(b)]['median']:.3f}  " for b in BUDGETS)
                     + "".join(f"  {per[str(b)]['worst']:.3f}    " for b in BUDGETS))
    return "\n".join(lines)


# --------------------------------------------------------------------------------- local
SOURCE_WORKLOADS = [
    {"family": "matmul", "M": 128, "N": 128, "K": 128},
    {"family": "matmul", "M": 192, "N": 192, "K": 192},
    {"family": "matmul", "M": 256, "N": 128, "K": 256},
]
NEW_WORKLOADS = [
    {"family": "matmul", "M": 160, "N": 160, "K": 160},
    {"family": "matmul", "M": 224, "N": 192, "K": 128},
    {"family": "matmul", "M": 256, "N": 256, "K": 256},
]


def _second_family_workloads() -> tuple[list, list]:
    from tunedb.transfer.kernels import families

    fams = families()
    fam = "softmax" if "softmax" in fams else next(f for f in fams if f not in ("matmul",))
    if fam == "softmax":
        src = [{"family": "softmax", "M": 256, "N": 512}, {"family": "softmax", "M": 512, "N": 1024}]
        new = [{"family": "softmax", "M": 384, "N": 768}, {"family": "softmax", "M": 1024, "N": 512}]
    else:  # pragma: no cover
        raise SystemExit(f"no second family to benchmark among {fams}")
    return src, new


def tune_source(db: ParquetStore, target: dict, workload: dict, budget: int):
    """How the local benchmark fills its DB: a cold search of ``budget`` measurements on a
    source preset, starting from the family default.  Returns the TuneResult."""
    from tunedb.transfer.measure.jobs import local_job

    job = local_job(target, workload)
    return Tuner(db, job.target, job.workload, job.space, job.backend,
                 TuneOptions(budget=budget, seed=0, cold=True, patience=10_000, start_default=True),
                 **job.tuner_kwargs()).run()


def local_benchmark(budget: int, quiet: bool, source_preset: str, new_preset: str) -> dict:
    from tunedb.index.hardware.localcpu import preset
    from tunedb.transfer.measure.jobs import local_job

    src2, new2 = _second_family_workloads()
    work = Path(tempfile.mkdtemp(prefix="bench_transfer_local_"))
    rows = []
    try:
        db = ParquetStore.open(work / "db")
        src_t = preset(source_preset)
        for w in SOURCE_WORKLOADS + src2:
            t0 = time.perf_counter()
            r = tune_source(db, src_t, w, 4 * budget)
            _log(f"source {source_preset} {w}: best {r.best_cost:.3g}s [{time.perf_counter() - t0:.0f}s]", quiet)
        new_t = preset(new_preset)
        for w in NEW_WORKLOADS + new2:
            job = local_job(new_t, w)
            t0 = time.perf_counter()
            ref = Tuner(ParquetStore.open(work / f"cold-{len(rows)}"), job.target, job.workload, job.space, job.backend,
                        TuneOptions(budget=4 * budget, seed=1, cold=True, patience=10_000),
                        **job.tuner_kwargs()).run()
            warm = Tuner(db, job.target, job.workload, job.space, job.backend,
                         TuneOptions(budget=budget, seed=1, patience=10_000), **job.tuner_kwargs()).run()
            target_cost = ref.best_cost / 0.95
            # the reference's first `budget` evaluations are exactly a cold run at that budget (same seed)
            c95 = ref.evaluations_to_reach(target_cost)
            c95 = c95 if c95 is not None and c95 <= budget else None
            w95 = warm.evaluations_to_reach(target_cost)
            rows.append({"workload": job.workload, "warm_measurements_to_95": w95, "cold_measurements_to_95": c95,
                         "warm_best": warm.best_cost, "cold_best": best_within(ref.history, budget),
                         # the first evaluation of a warm run is its top adapted seed
                         "warm_first": warm.history[0][1] if warm.history else None,
                         "warm_seeded_from": sorted({s["from_target"] for s in warm.seeds}),
                         "reference_best_4x": ref.best_cost, "budget": budget})
            _log(f"new {new_preset} {w}: warm->95% {w95} cold->95% {c95} warm {warm.best_cost:.3g}s "
                 f"cold {best_within(ref.history, budget):.3g}s ref {ref.best_cost:.3g}s "
                 f"[{time.perf_counter() - t0:.0f}s]", quiet)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for r in rows:
        w, c = r["warm_measurements_to_95"], r["cold_measurements_to_95"]
        if w is None and c is None:
            # neither reached the line: no ratio, the best each found instead
            r["warm_over_cold"] = None
            r["verdict"] = (f"not reached (best found: warm {r['warm_best']:.4g} s, cold {r['cold_best']:.4g} s, "
                            f"95% line {r['reference_best_4x'] / 0.95:.4g} s)")
        else:
            # a search that did not reach the line within the budget counts as budget + 1
            r["warm_over_cold"] = (w or budget + 1) / (c or budget + 1)
            r["verdict"] = f"warm {w if w else 'not reached'} vs cold {c if c else 'not reached'} evaluations to 95%"
    ratios = [r["warm_over_cold"] for r in rows if r["warm_over_cold"] is not None]
    return {"workloads": rows, "median_warm_over_cold": statistics.median(ratios) if ratios else None,
            "not_reached_by_either": sum(1 for r in rows if r["warm_over_cold"] is None),
            "note": "warm_over_cold: evaluations to 95% of the 4x-budget reference, warm / cold; a search that "
                    "did not reach it counts as budget+1; None (not reached) when neither did"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with the Kernel Tuner data sets")
    ap.add_argument("--kernels", default="convolution_milo,dedispersion_milo")
    ap.add_argument("--random-seeds", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=3, help="(replay) seeds per tuner strategy, averaged")
    ap.add_argument("--devices", default="", help="(replay) only these held-out devices, comma-separated")
    ap.add_argument("--local", action="store_true", help="real C kernels on this CPU instead of replay")
    ap.add_argument("--budget", type=int, default=16, help="(--local) equal budget of warm and cold")
    ap.add_argument("--source-preset", default="cpu-x86-64-t1")
    ap.add_argument("--new-preset", default="cpu-native-t1")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if a.local:
        res = local_benchmark(a.budget, a.json, a.source_preset, a.new_preset)
    else:
        res = replay_benchmark(Path(a.data), a.kernels.split(","), a.random_seeds, a.json, seeds=a.seeds,
                               devices=[d for d in a.devices.split(",") if d] or None)
    res["seconds"] = time.perf_counter() - t0
    print(json.dumps(res, sort_keys=True) if a.json else json.dumps(res, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
